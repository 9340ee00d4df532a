"""A lone sequence's chain, priced where drafting costs (the cost model's `price_alone`, off by
default): a model drafter's head whose later positions never pass drafts a short chain alone (each
chain token is a draft forward), still writing the target's own greedy tokens; a seeded sampler
keeps the engine's fixed draft, so its tokens repeat; n-gram lookup (free to draft) keeps its fixed
draft alone (trtspec.runtime.policy.plan.priced_alone)."""

from __future__ import annotations

from itertools import pairwise

from tests.runtime.conftest import TINY_PROMPTS
from trtspec.runtime.policy.by_load import CostModel


def _alone(model: CostModel, passing: int) -> None:
    """Hand-made measurements of one sequence: a verify pass of n tokens costs 10 + 0.2 n ms, a
    draft forward 2 ms, and every draft of 4 keeps its first `passing` tokens."""
    for n in (1, 2, 3, 4, 5) * 20:
        model.observe_forward(n, 0.010 + 0.0002 * n, batch_size=1)
    for _ in range(100):
        model.observe_proposals(1, 1)
        model.observe_draft(1, 4, 4 * 0.002)
        model.observe_verify(4, passing)


def test_alone_the_model_prices_each_draft_forward():
    """At batch 1 a chain of k costs T(1 + k) + k D: with T(n) = 10 + 0.2 n ms and D = 2 ms,
    a head whose every token passes drafts all 4 (5 tokens in 18.8 ms against 1 in 10.2), one
    whose first token alone passes drafts 1 (2 in 12.4 ms; a chain of 4 keeps as many in 18.8),
    one that never passes does not draft."""
    rates = {}
    for passing in (4, 1, 0):
        model = CostModel(4, drafts_cost=True)
        model.price_alone = True  # what plan.priced_alone reads; best_length itself prices any batch
        _alone(model, passing)
        rates[passing] = model.best_length(1)
    assert rates == {4: 4, 1: 1, 0: 0}


def _steer(engine, prompt, plain, passing):
    """Every draft the engine's real head makes keeps its first `passing` tokens and misses after
    them: each of those is set to the target's own greedy token there (`plain`: its output
    after `prompt`), each later one to another token. Returns the undo."""
    original = engine.drafter.propose_batch
    full = list(prompt) + list(plain)
    vocab = engine.target.config.vocab_size

    def steered(sessions, tokens, max_lens):
        drafts = original(sessions, tokens, max_lens)
        for draft, seen in zip(drafts, tokens, strict=True):
            for j in range(draft.size if draft is not None else 0):
                right = full[len(seen) + j] if len(seen) + j < len(full) else 0
                draft.token_ids[j] = right if j < passing else (right + 1) % vocab
        return drafts

    engine.drafter.propose_batch = steered
    return lambda: engine.drafter.__dict__.pop("propose_batch", None)


def test_a_lone_greedy_sequence_drafts_a_short_chain_when_later_positions_never_pass(eagle_engine):
    """The EAGLE-3 engine alone, no schedule: its first draft token always passes, the later ones
    never. The cost model, which before drafted max_draft_len (4) at every lone step, learns that
    and drafts one token or none (with this tiny model a head forward costs about a target forward,
    so mostly none: 2 tokens for T(2) + D do not beat 1 for T(1)): in the second half of the steps
    none drafts more than 1 on its own choice (probes while off may); every token is the target's
    own greedy token."""
    prompt = TINY_PROMPTS[0]
    with eagle_engine.variant() as engine:
        engine.scheduler.cost_model.price_alone = True
        plain = engine.generate(prompt, max_new_tokens=40, speculative=False).token_ids
        undo = _steer(engine, prompt, plain, passing=1)
        snapshots = [engine.scheduler.stats.draft_shapes]
        engine.scheduler.on_step = lambda stats: snapshots.append(stats.draft_shapes)
        try:
            result = engine.generate(prompt, max_new_tokens=40)
        finally:
            undo()
    assert result.token_ids == plain
    assert result.stats.num_drafts > 0
    # each step's choice: the counter that grew (a snapshot keeps the counts it was taken with)
    keys = [k for before, after in pairwise(snapshots) for k in after if after[k] != before.get(k, 0)]
    # the priors (0.5 a position) may pick a longer chain at first; once a few drafts have shown
    # the second token missing, a longer chain only adds cost
    later = keys[len(keys) // 2:]
    assert later and all(k in ("off", "chain:1") or k.startswith("probe:") for k in later), keys


def test_a_seeded_sampler_alone_keeps_the_fixed_draft_and_repeats(eagle_engine):
    """Sampling with a seed alone: every step drafts max_draft_len whatever its drafts keep (the
    cost model's choices follow timings), so the same seed gives the same tokens again."""
    prompt = TINY_PROMPTS[1]
    kwargs = {"max_new_tokens": 24, "temperature": 0.8, "top_k": 50, "top_p": 0.95}
    with eagle_engine.variant() as engine:
        engine.scheduler.cost_model.price_alone = True
        plain = engine.generate(prompt, max_new_tokens=24, speculative=False).token_ids
        undo = _steer(engine, prompt, plain, passing=1)
        try:
            first = engine.generate(prompt, seed=11, **kwargs)
            again = engine.generate(prompt, seed=11, **kwargs)
        finally:
            undo()
        shapes = engine.scheduler.stats.draft_shapes
    assert first.token_ids == again.token_ids and first.stats.num_drafts > 0
    assert set(shapes) == {"chain:4"}


def test_ngram_lookup_alone_keeps_drafting_max_draft_len(ngram_engine):
    """Free drafts: a lone n-gram sequence drafts the engine's max_draft_len at every step, as before."""
    with ngram_engine.variant() as engine:
        engine.scheduler.cost_model.price_alone = True
        result = engine.generate(TINY_PROMPTS[0], max_new_tokens=24)
        shapes = engine.scheduler.stats.draft_shapes
    assert result.stats.num_drafts > 0 and set(shapes) == {"chain:4"}


def test_off_by_default_a_lone_model_chain_stays_the_fixed_draft(eagle_engine):
    """Without price_alone the lone sequence drafts max_draft_len at every step, as before."""
    prompt = TINY_PROMPTS[0]
    with eagle_engine.variant() as engine:
        plain = engine.generate(prompt, max_new_tokens=24, speculative=False).token_ids
        undo = _steer(engine, prompt, plain, passing=1)
        try:
            result = engine.generate(prompt, max_new_tokens=24)
        finally:
            undo()
        shapes = engine.scheduler.stats.draft_shapes
    assert result.token_ids == plain and set(shapes) == {"chain:4"}
