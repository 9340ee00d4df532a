"""Draft-length policy (fixed, dynamic), acceptance-floor fallback: units and in the engine."""

from __future__ import annotations

from tests.runtime.conftest import TINY_PROMPTS
from trtspec.runtime.policy.per_request import DraftPolicy


def test_fixed_policy_always_drafts_max_len():
    policy = DraftPolicy(4)
    for accepted in (0, 4, 1):
        assert policy.next_length() == 4
        assert policy.update(4, accepted) is False


def test_dynamic_policy_grows_after_full_acceptance_and_shrinks_after_rejection():
    policy = DraftPolicy(5, dynamic=True)
    policy.length = 2
    policy.update(2, 2)
    assert policy.next_length() == 3          # all accepted: one longer
    policy.update(3, 1)
    assert policy.next_length() == 2          # a rejection: one shorter
    for _ in range(5):
        policy.update(1, 0)
    assert policy.next_length() == 1          # never below 1
    for _ in range(10):
        policy.update(policy.length, policy.length)
    assert policy.next_length() == 5          # never above max_draft_len


def test_acceptance_floor_falls_back_then_probes():
    policy = DraftPolicy(4, floor=0.5, warmup=4, window=4, probe_every=3)
    entered = [policy.update(4, 0) for _ in range(4)]
    assert entered == [False, False, False, True]   # only after warmup, reported once
    lengths = [policy.next_length() for _ in range(6)]
    assert lengths == [0, 0, 4, 0, 0, 4]            # plain decoding, one probe every 3 steps
    for _ in range(4):
        policy.update(4, 4)                          # probes succeed: the window recovers
    assert not policy.in_fallback and policy.next_length() == 4


def test_engine_fallback_keeps_output_and_is_reported(tiny_llama, eagle_engine, modelopt_eagle3):
    from trtspec.runtime import Engine

    floored = Engine.from_checkpoints(tiny_llama, mode="eagle3", draft_dir=modelopt_eagle3[1], max_draft_len=4,
                                      acceptance_floor=0.5)
    prompt = TINY_PROMPTS[3]
    eager = eagle_engine.generate(prompt, max_new_tokens=40)
    careful = floored.generate(prompt, max_new_tokens=40)
    assert careful.token_ids == eager.token_ids
    assert eager.stats.acceptance_rate < 0.5, "the random head is a bad drafter"
    assert careful.stats.fallback and not eager.stats.fallback
    assert careful.stats.num_drafts < eager.stats.num_drafts / 2


def test_engine_dynamic_draft_is_lossless_and_adapts(tiny_llama):
    from trtspec.runtime import Engine

    engine = Engine.from_checkpoints(tiny_llama, mode="ngram", max_draft_len=6, dynamic_draft=True)
    fixed = Engine.from_checkpoints(tiny_llama, mode="ngram", max_draft_len=6)
    for prompt in TINY_PROMPTS[:2]:
        a = engine.generate(prompt, max_new_tokens=40)
        assert a.token_ids == fixed.generate(prompt, max_new_tokens=40, speculative=False).token_ids
    b = fixed.generate(TINY_PROMPTS[0], max_new_tokens=40)
    a = engine.generate(TINY_PROMPTS[0], max_new_tokens=40)
    assert a.stats.num_draft_tokens / a.stats.num_drafts < b.stats.num_draft_tokens / b.stats.num_drafts


def test_tree_drafts_go_through_the_policy_too(tiny_llama, modelopt_eagle3):
    """A tree draft passes the same numbered phases as a chain: an acceptance floor stops tree
    drafting as it stops chains (a random head's trees are mostly rejected), output unchanged."""
    from trtspec.runtime import Engine

    choices = [[0], [1], [0, 0], [1, 0]]
    eager = Engine.from_checkpoints(tiny_llama, mode="eagle3", draft_dir=modelopt_eagle3[1], max_draft_len=4,
                                    eagle_choices=choices)
    careful = eager.variant(acceptance_floor=0.9)
    try:
        prompt = TINY_PROMPTS[3]
        a = eager.generate(prompt, max_new_tokens=40)
        b = careful.generate(prompt, max_new_tokens=40)
        assert a.token_ids == b.token_ids
        assert a.stats.acceptance_rate < 0.9 and not a.stats.fallback
        assert b.stats.fallback and b.stats.num_drafts < a.stats.num_drafts / 2
    finally:
        careful.close()
