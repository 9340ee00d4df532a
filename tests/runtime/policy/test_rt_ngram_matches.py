"""Drafting only on long n-gram matches under load (Choice.min_match, trtspec.runtime.policy.ngram_matches):
the counts per match length, the cost model's choice from them, and the engine verifying only
those drafts while every output stays the request's output alone."""

from __future__ import annotations

from tests.runtime.conftest import TINY_PROMPTS, run_in_flight
from trtspec.runtime.policy.by_load import CostModel
from trtspec.runtime.policy.choices import Choice
from trtspec.runtime.policy.ngram_matches import MatchStats


def test_match_stats_pool_the_matches_at_or_above_a_level():
    stats = MatchStats(0.5)
    stats.observe_found([2, 2, 3, 0])           # 0: a draft without a match length is not counted
    stats.observe_found([3])
    assert stats.found == {2: 1.0, 3: 1.5}      # the first step's counts halved once
    assert stats.levels() == [3] and stats.found_at_least(2) == 2.5 and stats.found_at_least(3) == 1.5
    stats.observe_chain(2, 4, 0, 0.5)              # position 0 at stake, failed
    stats.observe_chain(3, 4, 4, 0.5)              # all four passed
    stats.observe_chain(3, 2, 1, 0.5)              # position 0 passed, position 1 failed
    assert stats.at_least(3, 0) == (1.5, 1.5) and stats.at_least(3, 1) == (1.5, 0.5)
    assert stats.at_least(2, 0) == (2.5, 1.5) and stats.at_least(2, 3) == (1.0, 1.0)  # decayed per draft of its length
    stats.observe_chain(0, 4, 4, 0.5)              # a model drafter's chain: not counted here
    assert set(stats.offered) == {2, 3}


def _full_batch(model: CostModel, short_accepted: int, long_accepted: int) -> None:
    """Compute-bound steps of 16 (a drafted token costs 5 % of a plain step); per step 16 lookups
    find 4 drafts of 2-token matches and 1 of a 3-token match; each kind keeps a fixed prefix of 4."""
    for n in (16, 20, 24, 32, 48, 80) * 4:
        model.observe_forward(n, 0.06 + 0.003 * n, 16)
    for _ in range(200):
        model.observe_proposals(16, 5, [2, 2, 2, 2, 3])
        for match, accepted in ((2, short_accepted),) * 4 + ((3, long_accepted),):
            model.observe_verify(4, accepted, _Chain(match))


class _Chain:
    """What observe_verify reads of a chain draft: no tree, its match length."""

    tree = None

    def __init__(self, match: int):
        self.match = match


def test_under_load_the_model_drafts_only_where_the_match_is_long_enough():
    poor_short = CostModel(4, drafts_cost=False)
    _full_batch(poor_short, short_accepted=0, long_accepted=4)
    choice = poor_short.choose(16)
    assert choice.min_match == 3 and choice.length == 4 and choice.key == "chain:4@3"
    # every match as good as the long ones: no reason to leave any out
    all_good = CostModel(4, drafts_cost=False)
    _full_batch(all_good, short_accepted=4, long_accepted=4)
    assert all_good.choose(16).min_match == 0 and all_good.choose(16).length > 0
    # nothing pays: off, whatever the match
    none_pays = CostModel(4, drafts_cost=False)
    _full_batch(none_pays, short_accepted=0, long_accepted=0)
    assert none_pays.choose(16).length == 0
    # a model drafter's drafts carry no match length: no such choice is offered
    assert all(option.min_match == 0 for option in CostModel(4, drafts_cost=True).candidates())


def test_the_engine_verifies_only_long_matches_and_stays_lossless(ngram_engine):
    """With the policy's choice fixed at chains of 4 on matches of at least 3 tokens, lookups still
    find shorter matches but in steps of several sequences only the long ones' drafts are verified
    (a lone sequence drafts on any match); every output equals the request alone (greedy)."""
    prompts = TINY_PROMPTS + [[9, 8, 7, 9, 8, 7, 9], [3, 4] * 9]
    alone = [ngram_engine.generate(p, max_new_tokens=24, speculative=False).token_ids for p in prompts]
    with ngram_engine.variant() as engine:
        model = engine.scheduler.cost_model
        model.choose = lambda batch_size, tree=None, backlog=0: Choice(4, min_match=3)
        verified = []  # (decoding sequences in the step, the verified draft's match length)
        observe = model.observe_verify

        def recorded(offered, accepted, draft=None, path=None):
            verified.append((engine.scheduler.stats.last_num_decoding, draft.match))
            observe(offered, accepted, draft, path)

        model.observe_verify = recorded
        # in flight together on any machine (threads behind a barrier overlapped only by chance)
        sequences, _ = run_in_flight(engine, prompts, 24)
        assert [s.output.token_ids for s in sequences] == alone
        assert min(model.matches.found) < 3 <= max(model.matches.found)   # short matches were found ...
        assert {match for decoding, match in verified if decoding > 1} == {3}  # ... only long ones verified
        assert engine.scheduler.stats.draft_shapes.get("chain:4@3", 0) > 0


def test_acceptance_forgets_per_step_whatever_the_batch():
    """One step of 16 rejected drafts moves the estimate as little as one rejected draft at batch
    1: the drafts of a step share one step's forgetting (per draft, 16 rejections in a row would
    pull the first position's pass rate from 1.0 to about 0.7, and a noisy estimate drafts
    whenever it happens to read high)."""
    def pass_rate_after_a_bad_step(batch: int) -> float:
        model = CostModel(1, drafts_cost=False)
        for accepted in [1] * 100 + [0]:
            model.observe_proposals(batch, batch)
            for _ in range(batch):
                model.observe_verify(1, accepted)
        return model.accepted[0] / model.offered[0]

    alone, full = pass_rate_after_a_bad_step(1), pass_rate_after_a_bad_step(16)
    assert 0.97 < alone < 0.99 and abs(full - alone) < 0.01
