"""Bench tests run tiny models: one torch thread is fastest, above all on a shared 2-core machine
(two OpenMP threads spin against each other under load, 5-10x slower)."""

from __future__ import annotations

import pytest


@pytest.fixture(autouse=True)
def _one_torch_thread_here(one_torch_thread):
    """Every test in this directory runs on one torch thread (tests/conftest.py)."""
