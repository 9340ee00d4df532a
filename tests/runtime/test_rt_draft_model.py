"""The external draft model drafter: lossless greedy output, its own cache, self-drafting accepts."""

from __future__ import annotations

import pytest

from tests.runtime.conftest import TINY_PROMPTS


@pytest.mark.parametrize("prompt", TINY_PROMPTS[:3])
def test_draft_model_greedy_equals_plain_greedy(draft_engine, prompt):
    plain = draft_engine.generate(prompt, max_new_tokens=40, speculative=False)
    spec = draft_engine.generate(prompt, max_new_tokens=40)
    assert spec.token_ids == plain.token_ids
    assert spec.stats.num_drafts > 0 and spec.stats.num_draft_tokens >= spec.stats.num_drafts


def test_the_target_as_its_own_draft_is_accepted_almost_always(tiny_llama):
    """Same weights drafting: every draft token equals the target's argmax (up to near-ties)."""
    from trtspec.runtime import Engine

    engine = Engine.from_checkpoints(tiny_llama, mode="draft-target", draft_dir=tiny_llama, max_draft_len=4)
    result = engine.generate(TINY_PROMPTS[3], max_new_tokens=40)
    assert result.stats.acceptance_rate > 0.95
    assert result.stats.mean_acceptance_length > 4.5
    assert result.token_ids == engine.generate(TINY_PROMPTS[3], max_new_tokens=40, speculative=False).token_ids


def test_draft_model_sampling_runs_and_is_seeded(draft_engine):
    kwargs = {"max_new_tokens": 20, "temperature": 1.0, "top_p": 0.9, "seed": 3}
    first = draft_engine.generate(TINY_PROMPTS[0], **kwargs)
    assert first.token_ids == draft_engine.generate(TINY_PROMPTS[0], **kwargs).token_ids
    assert first.stats.num_drafts > 0 and len(first.token_ids) == 20


def test_confidence_threshold_shortens_drafts(tiny_llama, tiny_llama_draft):
    from trtspec.runtime import Engine

    eager = Engine.from_checkpoints(tiny_llama, mode="draft-target", draft_dir=tiny_llama_draft, max_draft_len=4)
    careful = Engine.from_checkpoints(tiny_llama, mode="draft-target", draft_dir=tiny_llama_draft, max_draft_len=4,
                                      confidence_threshold=0.9)
    a = eager.generate(TINY_PROMPTS[1], max_new_tokens=30)
    b = careful.generate(TINY_PROMPTS[1], max_new_tokens=30)
    assert a.token_ids == b.token_ids
    assert b.stats.num_draft_tokens / b.stats.num_drafts < a.stats.num_draft_tokens / a.stats.num_drafts
