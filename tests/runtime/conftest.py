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


def run_in_flight(engine, prompts, max_new_tokens, **kwargs) -> tuple[list, list]:
    """Every prompt in flight together on any machine; returns (the finished Sequences in prompt
    order, every step's SchedulerStats seen while they ran). `max_new_tokens`: one for all or a list.

    The first is submitted alone, and once it has been in a step the loop waits in
    scheduler.on_step (called after each step, outside the scheduler's lock) until the others are
    queued: from the next step on they all share the loop's steps, however late a busy machine runs
    this thread. (Threads started one by one overlap only by chance, and the loop the first submit
    starts can run its first steps before quick later submits are queued.) The hold asks the first
    sequence itself: the first on_step call after the hook is set can be an earlier generation's
    last step. An on_step already set is still called, and set again at the end."""
    import threading

    lengths = list(max_new_tokens) if isinstance(max_new_tokens, (list, tuple)) else [max_new_tokens] * len(prompts)
    previous, steps, failures, first = engine.scheduler.on_step, [], [], []
    held, queued, finished = threading.Event(), threading.Event(), threading.Semaphore(0)

    def on_step(stats):
        steps.append(stats)
        if previous is not None:
            previous(stats)
        if first and (first[0].prefilled or first[0].done) and not queued.is_set():
            held.set()
            queued.wait(300)

    def sink(item):
        if isinstance(item, BaseException):
            failures.append(item)
        if isinstance(item, BaseException) or item.finish_reason is not None:
            finished.release()

    engine.scheduler.on_step = on_step
    try:
        first.append(engine.submit(engine.encode(prompts[0]), max_new_tokens=lengths[0], sink=sink, **kwargs))
        assert held.wait(300), "the first request never ran a step"
        sequences = first + [engine.submit(engine.encode(p), max_new_tokens=n, sink=sink, **kwargs)
                             for p, n in zip(prompts[1:], lengths[1:], strict=True)]
        queued.set()
        for _ in sequences:
            assert finished.acquire(timeout=900), "a request never finished"
    finally:
        queued.set()
        engine.scheduler.on_step = previous
    if failures:
        raise failures[0]
    return sequences, steps


def assert_in_flight_equals_plain(engine, prompts, max_new_tokens: int) -> list:
    """Every prompt in flight together (run_in_flight; asserted: some step held them all, or a full
    batch); each answer must be its plain greedy answer. Returns the speculative Sequences (their
    .output.token_ids, .stats)."""
    plain = [engine.generate(p, max_new_tokens=max_new_tokens, speculative=False).token_ids for p in prompts]
    sequences, steps = run_in_flight(engine, prompts, max_new_tokens)
    assert [s.output.token_ids for s in sequences] == plain
    assert max(s.last_batch_size for s in steps) == min(len(prompts), engine.config.max_batch_size)
    return sequences
