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
def _one_torch_thread_here(one_torch_thread):
    """Every test in this directory runs on one torch thread (tests/conftest.py)."""


@pytest.fixture(scope="session")
def tiny_deepseek_mtp(tmp_path_factory):
    """A tiny seeded DeepSeek-V3 (MLA, MoE) with one MTP module in DeepSeek's layout, written once
    for mode mtp's tests, its block-FP8 copies and the full-batch chi-square test."""
    from trtspec.testing.tiny import make_tiny_causal_lm

    return make_tiny_causal_lm(tmp_path_factory.mktemp("deepseek-mtp"), "deepseek_v3", mtp=True)


@pytest.fixture(scope="session")
def draft_engine(tiny_llama, tiny_llama_draft):
    from trtspec.runtime import Engine

    return Engine.from_checkpoints(tiny_llama, mode="draft-target", draft_dir=tiny_llama_draft, max_draft_len=4)


@pytest.fixture(scope="session")
def modelopt_eagle3(tiny_llama, tmp_path_factory):
    """(ModelOpt EAGLE-3 model over tiny_llama, its export directory), random head, perturbed.

    The head is sized for the tiny target and made with ModelOpt itself (mtsp.convert with
    EAGLE3_DEFAULT_CFG), then exported with export_speculative_decoding: exactly what
    `trtspec convert` ships. The export keeps the training rope (no yarn injection) so its drafts
    are comparable with pseudo_speculative_generate.
    """
    import torch
    from modelopt.torch.export import export_speculative_decoding

    from trtspec.testing.tiny import make_tiny_eagle3

    model = make_tiny_eagle3(tiny_llama)
    generator = torch.Generator().manual_seed(0)
    with torch.no_grad():  # norms start at 1 and projections tiny: perturb so every weight matters
        for parameter in model.eagle_module.parameters():
            parameter.add_(torch.randn(parameter.shape, generator=generator) * 0.05)
    export_dir = tmp_path_factory.mktemp("eagle3")
    export_speculative_decoding(model, export_dir=export_dir)
    return model, export_dir


@pytest.fixture(scope="session")
def eagle_engine(tiny_llama, modelopt_eagle3):
    from trtspec.runtime import Engine

    return Engine.from_checkpoints(tiny_llama, mode="eagle3", draft_dir=modelopt_eagle3[1], max_draft_len=4)


def spy_drafts(engine):
    """Record every batch of drafts the engine's drafter returns (a list that grows per call)."""
    seen, original = [], engine.drafter.propose_batch

    def spy(sessions, tokens, max_lens):
        drafts = original(sessions, tokens, max_lens)
        seen.append(drafts)
        return drafts

    engine.drafter.propose_batch = spy
    return seen


def assert_dynamic_trees_lossless(engine, prompt, shape) -> None:
    """Alone, every step of `engine` grows a dynamic tree of `shape` (topk, depth, nodes): the
    output is the target's own greedy output, every draft verifies all its nodes, and not every
    tree is a chain."""
    seen = spy_drafts(engine)
    try:
        spec = engine.generate(prompt, max_new_tokens=32)
    finally:
        del engine.drafter.propose_batch
    assert spec.token_ids == engine.generate(prompt, max_new_tokens=32, speculative=False).token_ids
    trees = [d.tree for batch in seen for d in batch if d is not None]
    assert trees and all(t.num_nodes == shape[2] and t.max_depth <= shape[1] for t in trees)
    assert not all(t.is_chain for t in trees)
    assert spec.stats.num_verified_tokens == shape[2] * spec.stats.num_drafts


def assert_in_flight_equals_plain(engine, prompts, max_new_tokens: int) -> list:
    """Every prompt from its own thread at once (the engine batches them in flight, asserted: some
    step held more than one sequence); each answer must be its plain greedy answer. Returns the
    speculative results."""
    import threading

    plain = [engine.generate(p, max_new_tokens=max_new_tokens, speculative=False).token_ids for p in prompts]
    steps, results = [], [None] * len(prompts)
    engine.scheduler.on_step = steps.append

    def run(i):
        results[i] = engine.generate(prompts[i], max_new_tokens=max_new_tokens)

    threads = [threading.Thread(target=run, args=(i,)) for i in range(len(prompts))]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    engine.scheduler.on_step = None
    assert [r.token_ids for r in results] == plain
    assert max(s.last_batch_size for s in steps) > 1
    return results
