"""Shared fixtures: tiny seeded Llama models (fast), SmolLM2 prepared once (slow), isolation.

No test touches the network at run time: SmolLM2 comes from the cache that `make setup` (or
`trtspec models fetch smollm2`) filled; the tests that need it skip with a clear reason when the
cache is empty outside CI, and fail in CI.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

# the dev prompt set, shipped in the package (the same lines as ../shared/prompts/dev-prompts.jsonl)
DEV_PROMPTS = Path(__file__).resolve().parents[1] / "trtspec" / "data" / "bench_prompts.jsonl"


@pytest.fixture(scope="session")
def tiny_llama(tmp_path_factory) -> Path:
    """A seeded random 4-layer Llama (vocab 512, hidden 64) with a tokenizer: the target."""
    from trtspec.testing.tiny import make_tiny_llama

    return make_tiny_llama(tmp_path_factory.mktemp("tiny-target"), seed=0)


@pytest.fixture(scope="session")
def tiny_llama_draft(tmp_path_factory) -> Path:
    """A smaller seeded random Llama with the same tokenizer: a draft for tiny_llama."""
    from trtspec.testing.tiny import make_tiny_llama

    return make_tiny_llama(tmp_path_factory.mktemp("tiny-draft"), seed=1, num_hidden_layers=1)


@pytest.fixture(scope="session")
def smollm2() -> Path:
    """SmolLM2-135M-Instruct as a safetensors checkpoint from the trtspec cache."""
    from trtspec import artifacts
    from trtspec.models import resolve_model

    cached = artifacts.model_cache_dir("smollm2")
    if not (cached / artifacts.MANIFEST).exists() and not os.environ.get("CI"):
        pytest.skip("SmolLM2 is not cached yet: run `trtspec models fetch smollm2` (make setup does)")
    return resolve_model("smollm2", quiet=True).path


@pytest.fixture(scope="session")
def dev_prompts() -> list[dict]:
    """The dev prompt set (30 prompts: chat, code, math, summarize)."""
    import json

    return [json.loads(line) for line in DEV_PROMPTS.read_text().splitlines() if line.strip()]


@pytest.fixture
def in_tmp(tmp_path, monkeypatch) -> Path:
    """Run the test in an empty temporary working directory."""
    monkeypatch.chdir(tmp_path)
    return tmp_path


@pytest.fixture
def one_torch_thread():
    """Tiny models run fastest on one thread, above all on a shared 2-core machine (10x here).

    The runtime and bench conftests make it autouse for their directories."""
    import torch

    saved = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(saved)
