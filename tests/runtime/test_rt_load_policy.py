"""Speculation adapting to load: the measured table, the cost model, and both inside the engine."""

from __future__ import annotations

import threading
from concurrent.futures import ThreadPoolExecutor

from tests.runtime.conftest import TINY_PROMPTS
from trtspec.runtime.load_policy import CostModel, schedule_length


def test_schedule_lookup_takes_the_last_entry_at_or_below_the_batch():
    table = ((1, 4), (4, 2), (8, 0))
    assert [schedule_length(table, b, 4) for b in (1, 2, 3, 4, 7, 8, 16)] == [4, 4, 4, 2, 2, 0, 0]
    assert schedule_length(((2, 3),), 1, 6) == 3          # below the first entry: the first entry
    assert schedule_length(((1, 8),), 1, 4) == 4          # never above max_draft_len


def _measured(model: CostModel, seconds_for_tokens, accepted: int, found: float = 1.0) -> None:
    """Feed forward timings, and drafts of 4 of which the first `accepted` are always kept."""
    for n in (1, 2, 4, 8, 16, 32, 64, 128) * 3:
        model.observe_forward(n, seconds_for_tokens(n))
    for _ in range(200):
        model.observe_proposals(10, round(10 * found))
        model.observe_verify(4, accepted)


def test_cost_model_drafts_where_verifying_is_cheap_and_stops_where_it_is_not():
    # memory-bound: 64 tokens cost little more than one; 3 of 4 draft tokens accepted: draft 3
    cheap = CostModel(4, drafts_cost=False)
    _measured(cheap, lambda n: 0.05 + 0.0005 * n, accepted=3)
    assert cheap.best_length(1) == 3 and cheap.best_length(8) == 3
    # ... and all 4 when the 4th is accepted too, but only where lookups find drafts often enough
    _measured(cheap, lambda n: 0.05 + 0.0005 * n, accepted=4)
    assert cheap.best_length(8) == 4
    # compute-bound: every token costs as much as the step, and drafts are mostly rejected
    dear = CostModel(4, drafts_cost=False)
    _measured(dear, lambda n: 0.001 + 0.01 * n, accepted=0)
    for _ in range(100):
        dear.observe_verify(4, 1)  # the first draft token accepted one time in three
    assert dear.best_length(8) == 0 and dear.best_length(16) == 0
    # ... but while off it still probes now and then, so acceptance stays measured
    assert 4 in [dear.best_length(16) for _ in range(40)]


def test_cost_model_prices_drafting_for_model_drafters():
    free = CostModel(4, drafts_cost=False)
    paid = CostModel(4, drafts_cost=True)
    for model in (free, paid):
        _measured(model, lambda n: 0.05 + 0.002 * n, accepted=2)
    for _ in range(20):
        paid.observe_draft(8, 4, 4 * 0.1)  # a draft position costs more than a target step
    assert free.best_length(8) > paid.best_length(8)


def test_the_engine_follows_the_schedule_and_stays_lossless(ngram_engine):
    """draft_len_schedule [[1, 4], [3, 0]]: steps with 3 or more decoding sequences do not draft,
    fewer do; every output still equals the request alone."""
    prompts = TINY_PROMPTS + [[9, 8, 7, 9, 8, 7, 9], [3, 4] * 9]
    lengths = [12 + 8 * i for i in range(len(prompts))]  # staggered ends: the batch shrinks below 3
    alone = [ngram_engine.generate(p, max_new_tokens=n, speculative=False).token_ids
             for p, n in zip(prompts, lengths, strict=True)]
    with ngram_engine.variant(draft_len_schedule=((1, 4), (3, 0))) as engine:
        steps = []
        engine.scheduler.on_step = steps.append
        barrier = threading.Barrier(len(prompts))

        def one(prompt, length):
            barrier.wait()
            return engine.generate(prompt, max_new_tokens=length)

        with ThreadPoolExecutor(len(prompts)) as pool:
            results = list(pool.map(one, prompts, lengths))
        assert [r.token_ids for r in results] == alone
        assert {s.last_draft_len for s in steps if s.last_num_decoding >= 3} == {0}
        assert 4 in {s.last_draft_len for s in steps if s.last_num_decoding < 3}
        alone_drafts = engine.generate(TINY_PROMPTS[0], max_new_tokens=30)
        assert alone_drafts.stats.num_drafts > 0 and steps[-1].last_draft_len == 4


def test_a_probe_while_off_drafts_for_one_sequence_taking_turns():
    """Speculation off under load still measures acceptance, but a probe step adds one sequence's
    draft (k tokens), not every sequence's (B k): the probe must not cost what drafting costs."""
    from trtspec.runtime.step import one_prober

    dear = CostModel(4, drafts_cost=False)
    _measured(dear, lambda n: 0.001 + 0.01 * n, accepted=0)
    choices = [(dear.best_length(8), dear.probe) for _ in range(32)]
    assert {length for length, probe in choices if not probe} == {0}
    assert [length for length, probe in choices if probe] == [4] * (32 // 8)
    assert [one_prober([4, 4, 0, 4], turn) for turn in range(4)] == [
        [4, 0, 0, 0], [0, 4, 0, 0], [0, 0, 0, 4], [4, 0, 0, 0]]
    assert one_prober([0, 0], 3) == [0, 0]


def test_a_tree_probes_as_much_more_rarely_as_it_has_more_nodes():
    """A dynamic tree's probe verifies all its nodes: 16 nodes against max_draft_len 4 probe every
    32nd step, so the probes cost the same share as a chain's every 8th."""
    from trtspec.runtime.tree import TreeShape

    dear = CostModel(4, drafts_cost=False)
    _measured(dear, lambda n: 0.001 + 0.01 * n, accepted=0)
    probes = [dear.best_length(8, TreeShape(4, 4, 16)) and dear.probe for _ in range(64)]
    assert [i for i, probe in enumerate(probes) if probe] == [31, 63]
