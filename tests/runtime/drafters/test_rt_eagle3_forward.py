"""The EAGLE-3 head's direct forward (trtspec.runtime.drafters.eagle3_forward) equals its
transformers modules' forward bit for bit, at every head forward of real generations: chains,
static and dynamic trees, several sessions in flight, every HEAD_FORWARDS kind."""

from __future__ import annotations

import threading

import pytest
import torch

from tests.runtime.conftest import TINY_PROMPTS


def _pool_state(pool) -> list:
    # the pool is torch.empty: slots never written may hold NaN bit patterns, equal in both copies
    return [t.nan_to_num().clone() for t in (*pool.keys, *pool.values)]


def _checked(engine) -> list[int]:
    """Make every head forward of `engine` run both routes from the same cache state and compare
    logits, hidden rows and the keys and values written; returns per forward its row count."""
    drafter = engine.drafter
    assert drafter._direct is not False
    drafter._direct = True
    direct, rows = type(drafter).forward, []

    def both(feeds):
        lengths = [f.kv.length for f in feeds]
        pool = feeds[0].kv.pool
        reference = [(logits.clone(), h.clone()) for logits, h in drafter.forward_modules(feeds)]
        written = _pool_state(pool)
        for feed, length in zip(feeds, lengths, strict=True):
            feed.kv.length = length
        mine = direct(drafter, feeds)
        assert [f.kv.length for f in feeds] == [length + len(f.token_ids) for f, length in zip(feeds, lengths,
                                                                                                strict=True)]
        for (logits, h), (ref_logits, ref_h) in zip(mine, reference, strict=True):
            assert torch.equal(logits, ref_logits) and torch.equal(h, ref_h)
        assert all(torch.equal(a, b) for a, b in zip(_pool_state(pool), written, strict=True))
        rows.append(sum(len(f.token_ids) for f in feeds))
        return mine

    drafter.forward = both
    return rows


def _run_in_flight(engine, prompts, max_new_tokens=16) -> list:
    results: list = [None] * len(prompts)

    def run(i):
        results[i] = engine.generate(prompts[i], max_new_tokens=max_new_tokens)

    threads = [threading.Thread(target=run, args=(i,)) for i in range(len(prompts))]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    return results


@pytest.mark.parametrize("kind", ["modelopt", "eagle", "norm_before_residual"])
def test_direct_forward_equals_modules(eagle_engine, kind):
    from trtspec.runtime.drafters import eagle3_forward

    drafter = eagle_engine.drafter
    assert eagle3_forward.supports(drafter.head)
    saved = drafter.head.forward_kind
    drafter.head.forward_kind = kind
    rows = _checked(eagle_engine)
    try:
        plain = eagle_engine.generate(TINY_PROMPTS[0], max_new_tokens=24, speculative=False)
        spec = eagle_engine.generate(TINY_PROMPTS[0], max_new_tokens=24)
        _run_in_flight(eagle_engine, TINY_PROMPTS)
        with eagle_engine.variant(eagle_choices=[[0], [1], [0, 0], [0, 1], [0, 0, 0]],
                                  draft_len_schedule=((1, 5),)) as static_tree:
            static_tree.generate(TINY_PROMPTS[1], max_new_tokens=12)
        with eagle_engine.variant(tree=(2, 3, 4), draft_len_schedule=((1, 4),)) as dynamic_tree:
            _run_in_flight(dynamic_tree, TINY_PROMPTS[:2], max_new_tokens=12)
    finally:
        del drafter.forward
        drafter.head.forward_kind = saved
    assert spec.token_ids == plain.token_ids
    assert len(rows) > 20 and max(rows) > 1 and 1 in rows  # catch-up rows, single chain rows, batches


def test_switch_keeps_the_module_route(eagle_engine, monkeypatch):
    from trtspec.runtime.drafters import eagle3_forward

    monkeypatch.setenv("TRTSPEC_EAGLE3_FORWARD", "modules")
    assert not eagle3_forward.supports(eagle_engine.drafter.head)


def test_bfloat16_head_is_lossless(tiny_llama, modelopt_eagle3):
    """head_dtype bfloat16: every head linear on the bfloat16 row kernel, the target's stay float32;
    greedy output is the target's; both head routes still agree bit for bit."""
    from trtspec.runtime import Engine
    from trtspec.runtime.forward.linear_choice import ROWDOT_BF16
    from trtspec.runtime.kernels import rowdot

    why = rowdot.bfloat16_unavailable()
    if why is not None:
        pytest.skip(f"the bfloat16 row kernel cannot run here: {why}")
    with Engine.from_checkpoints(tiny_llama, mode="eagle3", draft_dir=modelopt_eagle3[1], max_draft_len=4,
                                 head_dtype="bfloat16", draft_len_schedule=((1, 4),)) as engine:
        kernels = {part: {m.kernel for m in model.modules() if type(m).__name__ == "PackedLinear"}
                   for part, model in (("target", engine.target), ("head", engine.drafter.head))}
        assert kernels["head"] == {ROWDOT_BF16} and ROWDOT_BF16 not in kernels["target"]
        rows = _checked(engine)
        for prompt in TINY_PROMPTS[:2]:
            plain = engine.generate(prompt, max_new_tokens=24, speculative=False)
            spec = engine.generate(prompt, max_new_tokens=24)
            assert spec.token_ids == plain.token_ids and spec.stats.num_drafts > 0
        assert rows


def test_head_dtype_is_checked(tiny_llama, modelopt_eagle3):
    from trtspec.errors import IncompatibleArtifactError
    from trtspec.runtime import Engine

    with pytest.raises(IncompatibleArtifactError, match="head_dtype 'float16'"):
        Engine.from_checkpoints(tiny_llama, mode="eagle3", draft_dir=modelopt_eagle3[1], head_dtype="float16")


def test_rotary_table_rows_are_the_modules_own(eagle_engine):
    """The direct route's rotary table gives the module's cos and sin bit for bit, at scattered
    positions and past the first table (it grows)."""
    from trtspec.runtime.drafters import eagle3_forward

    rotary = eagle_engine.drafter.head.rotary_emb
    h = torch.zeros(1, 1, eagle_engine.drafter.kv_config.hidden_size)
    positions = torch.tensor([[0, 5, 17, 1000, 4095, 4096, 6000]])
    cos, sin = eagle3_forward._rotary(rotary, h, positions)
    assert rotary.trtspec_table is not False and rotary.trtspec_table[0].shape[1] > 6000
    reference = rotary(h, positions)
    assert torch.equal(cos, reference[0]) and torch.equal(sin, reference[1])
