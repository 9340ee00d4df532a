"""Engines over the session's tiny models, loaded once per test session."""

from __future__ import annotations

import pytest

# Prompts with repetition give the n-gram drafter something to find; the rest exercise misses.
TINY_PROMPTS = [
    [5, 6, 7, 8, 5, 6, 7, 8, 5, 6],
    [100, 200, 300, 100, 200, 300, 100],
    [42],
    list(range(10, 60)),
]


@pytest.fixture(scope="session")
def ngram_engine(tiny_llama):
    from trtspec.runtime import Engine

    return Engine.from_checkpoints(tiny_llama, mode="ngram", max_draft_len=4, ngram_min=1, ngram_max=3)


@pytest.fixture(autouse=True)
def one_torch_thread():
    """Tiny models run fastest on one thread, above all on a shared 2-core machine (10x here)."""
    import torch

    saved = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(saved)


@pytest.fixture(scope="session")
def draft_engine(tiny_llama, tiny_llama_draft):
    from trtspec.runtime import Engine

    return Engine.from_checkpoints(tiny_llama, mode="draft-target", draft_dir=tiny_llama_draft, max_draft_len=4)
