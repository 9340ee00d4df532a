"""Acceptance: sampling, the rules that accept or reject draft tokens, and draft trees verified in one pass."""
