"""Bench tests run tiny models: one torch thread is fastest, above all on a shared 2-core machine
(two OpenMP threads spin against each other under load, 5-10x slower)."""

from __future__ import annotations

import pytest


@pytest.fixture(autouse=True)
def one_torch_thread():
    import torch

    saved = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(saved)
