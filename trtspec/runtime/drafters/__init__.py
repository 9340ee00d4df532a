"""Drafters behind one interface (base.py): n-gram lookup, an external draft model, EAGLE-3."""

from trtspec.runtime.drafters.base import Draft, Drafter, DraftSession

__all__ = ["Draft", "DraftSession", "Drafter"]
