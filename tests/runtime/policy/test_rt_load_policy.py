"""Speculation adapting to load: the measured table, the cost model, and both inside the engine."""

from __future__ import annotations

from tests.runtime.conftest import TINY_PROMPTS, run_in_flight
from trtspec.runtime.policy.by_load import CostModel, schedule_length


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
        # in flight together on any machine (threads behind a barrier overlapped only by chance)
        sequences, _ = run_in_flight(engine, prompts, lengths)
        assert [s.output.token_ids for s in sequences] == alone
        assert {s.last_draft_len for s in steps if s.last_num_decoding >= 3} == {0}
        assert 4 in {s.last_draft_len for s in steps if s.last_num_decoding < 3}
        alone_drafts = engine.generate(TINY_PROMPTS[0], max_new_tokens=30)
        assert alone_drafts.stats.num_drafts > 0 and steps[-1].last_draft_len == 4


def test_a_probe_while_off_drafts_for_one_sequence_taking_turns():
    """Speculation off under load still measures acceptance, but a probe step adds one sequence's
    draft (k tokens), not every sequence's (B k): the probe must not cost what drafting costs."""
    from trtspec.runtime.policy.plan import one_prober

    dear = CostModel(4, drafts_cost=False)
    _measured(dear, lambda n: 0.001 + 0.01 * n, accepted=0)
    choices = [(dear.best_length(8), dear.probe) for _ in range(120)]
    assert {length for length, probe in choices if not probe} == {0}
    # a probe (4 tokens more) adds 0.04 s to a 0.081 s step: every 25th step keeps probes at
    # PROBE_SHARE (2 %) of the time; drafting stays far from paying, so the next wait doubles: 50
    assert [i for i, (length, probe) in enumerate(choices) if probe] == [24, 74]
    assert {length for length, probe in choices if probe} == {4}
    assert [one_prober([4, 4, 0, 4], turn) for turn in range(4)] == [
        [4, 0, 0, 0], [0, 4, 0, 0], [0, 0, 0, 4], [4, 0, 0, 0]]
    assert one_prober([0, 0], 3) == [0, 0]


def test_a_tree_probes_as_much_more_rarely_as_it_has_more_nodes():
    """A dynamic tree's probe verifies all its nodes: 16 nodes add 0.16 s to a 0.081 s step, so
    they come every 99 steps where a chain of 4 comes every 25th: the same share of the time."""
    from trtspec.runtime.verify.tree import TreeShape

    dear = CostModel(4, drafts_cost=False)
    _measured(dear, lambda n: 0.001 + 0.01 * n, accepted=0)
    probes = [dear.best_length(8, TreeShape(4, 4, 16)) and dear.probe for _ in range(100)]
    assert [i for i, probe in enumerate(probes) if probe] == [98]


def test_a_draft_must_beat_plain_decoding_by_the_margin():
    """Estimates within SPEC_MARGIN of plain decoding choose plain decoding: a wrong 'draft' loses,
    a wrong 'off' does not. Hand-made costs: a target forward costs 1 + 0.02 n (n tokens), at batch
    8 and acceptance q per position a chain of 1 gives 8 (1 + q) / (1 + 0.02 * 16) against 8 / 1.16
    for off (8 tokens), i.e. (1 + q) 1.16 / 1.32 times off's rate."""
    from trtspec.runtime.policy.by_load import SPEC_MARGIN

    def model_with(q: float) -> CostModel:
        model = CostModel(1, drafts_cost=False)
        for n in (8, 16, 24, 32) * 20:
            model.observe_forward(n, 1.0 + 0.02 * n)
        for i in range(400):  # accepted evenly spread: a share q of the drafts
            model.observe_verify(1, int((i + 1) * q) - int(i * q))
        return model

    # q = 0.20: the chain is estimated 1.06x off, above the margin: draft
    assert model_with(0.20).best_length(8) == 1
    # q = 0.16: estimated 1.03x off, inside the margin: plain decoding
    assert model_with(0.16).best_length(8) == 0
    assert 0.03 < SPEC_MARGIN < 0.06


def test_decode_steps_price_draft_rows_at_their_own_batch_size():
    """The overall line (here fitted on prompt chunks: many rows, 1 ms each) is too flat for a
    full decode batch, where a drafted row cost 2.6 ms (measured at 16 sequences on 2 cores:
    the line said 1.5). Decode-only steps are fitted per batch size, so at 16 the chain's rows are
    priced as measured there (off), while at 8, measured cheap, it still drafts."""
    model = CostModel(1, drafts_cost=False)
    for _ in range(30):
        for n in (64, 128, 256):
            model.observe_forward(n, 0.040 + 0.001 * n)  # prompt chunks: no batch size
    for i in range(400):  # the first draft token accepted 40 % of the time
        model.observe_verify(1, int((i + 1) * 0.4) - int(i * 0.4))
    assert model.best_length(16) == 1 and model.best_length(8) == 1  # the line alone: draft
    for _ in range(30):
        for drafted in (0, 4, 8, 12):
            model.observe_forward(16 + drafted, 0.070 + 0.0026 * drafted, batch_size=16)
            model.observe_forward(8 + drafted, 0.050 + 0.0010 * drafted, batch_size=8)
    assert abs(model.forward_seconds(26, 16) - (0.070 + 0.0026 * 10)) < 1e-6
    assert model.best_length(16) == 0 and model.best_length(8) == 1
    # a batch size seen only without drafts: its own level along the overall line's shape
    for _ in range(10):
        model.observe_forward(12, 0.090, batch_size=12)
    assert abs(model.forward_seconds(12, 12) - 0.090) < 1e-9
    overall = model.forward_seconds(16) / model.forward_seconds(12)
    assert abs(model.forward_seconds(16, 12) / 0.090 - overall) < 1e-9


def test_a_batch_size_with_few_plain_steps_is_priced_from_the_others():
    """Measured through Triton at 16 streams: three slow plain steps at 15 sequences left T(15)
    above T(16), drafting at 15 was rated above plain decoding, chosen every step, and so never
    re-measured. A size's own plain mean counts from THIN steps on; before, its plain level comes
    from the line over every size's plain steps. Hand-made costs: plain steps at 16 take 49 ms,
    three at 15 took 60; steps at 15 with d drafted rows take 47.5 + 2 d ms; half the drafts pass."""
    from trtspec.runtime.policy.forward_costs import THIN

    model = CostModel(1, drafts_cost=False)
    for i in range(400):
        model.observe_verify(1, i % 2)
    for _ in range(60):
        model.observe_forward(16, 0.049, batch_size=16)
    for _ in range(3):
        model.observe_forward(15, 0.060, batch_size=15)
    for _ in range(20):
        for drafted in (4, 8, 12, 15):
            model.observe_forward(15 + drafted, 0.0475 + 0.002 * drafted, batch_size=15)
    # plain at 15 is priced near the steps at 16, not at its three slow steps: off beats the chain
    # (15 x 1.5 tokens in 77.5 ms against 15 in ~48)
    assert abs(model.forward_seconds(15, 15) - 0.049) < 0.002
    assert model.best_length(15) == 0
    # once 15 has THIN plain steps of its own, they price it, slow or not
    for _ in range(int(THIN)):
        model.observe_forward(15, 0.060, batch_size=15)
    assert abs(model.forward_seconds(15, 15) - 0.060) < 1e-3
    assert model.best_length(15) == 1


def test_the_catch_up_of_a_drafter_left_behind_is_priced():
    """A model drafter that did not draft for a while must feed every position verified since
    before its next draft. Hand-made costs: target forward 1 + 0.02 n, one draft forward
    0.1 + 0.005 rows; at batch 8 a chain of 1 accepted 60 % of the time is estimated
    8 x 1.6 / (1.32 + 0.14) = 8.8 tokens a second against 8 / 1.16 = 6.9 for off: it drafts. With
    the 8 drafters 400 rows behind, the catch-up adds 0.005 x 400 / CATCH_UP_HORIZON = 0.5 s to
    the step: 8.8 -> 6.6, below off. A short backlog (8 rows, one step's accepted tokens) changes
    nothing."""
    from trtspec.runtime.policy.step_rates import CATCH_UP_HORIZON

    model = CostModel(1, drafts_cost=True)
    for n in (8, 16, 24, 32) * 20:
        model.observe_forward(n, 1.0 + 0.02 * n)
    for rows in (1, 8, 16, 64) * 20:
        model.observe_draft(rows, 1, 0.1 + 0.005 * rows)
    for i in range(400):
        model.observe_verify(1, 1 if i % 5 < 3 else 0)
    assert model.best_length(8) == 1 and model.best_length(8, backlog=8) == 1
    assert model.best_length(8, backlog=400) == 0
    assert CATCH_UP_HORIZON == 4  # the figures above
    # a probe catches up one sequence's share of the backlog: (0.02 + 0.105 + 0.25) s against
    # 2 % of a 1.16 s step -> every 17th step, where without a backlog (0.125 s) every 6th
    from trtspec.runtime.policy.by_load import Choice

    assert model.probe_spacing(8, Choice(1, probe=True)) == 6
    assert model.probe_spacing(8, Choice(1, probe=True), backlog=400) == 17


def test_the_engine_tells_the_policy_how_far_the_head_is_behind(eagle_engine):
    """The backlog the step hands the load policy is what the EAGLE-3 head's next catch-up feeds
    beyond one row: the prompt before the first draft, then the tokens accepted since."""
    seen, result = _backlogs_seen(eagle_engine)
    assert seen[0] == len(TINY_PROMPTS[0]) - 1  # the head's positions start at the second token
    # each later step: the tokens the previous draft got accepted (the last draft's are never asked)
    assert all(0 <= rows <= 4 for rows in seen[1:])
    assert sum(seen[1:]) <= result.stats.num_accepted_tokens <= sum(seen[1:]) + 4


def test_a_draft_model_is_behind_by_the_prompt_before_its_first_draft(draft_engine):
    seen, _ = _backlogs_seen(draft_engine)
    assert seen[0] == len(TINY_PROMPTS[0])  # prompt + first token to feed, one row counted as usual
    assert all(0 <= rows <= 4 for rows in seen[1:])


def _backlogs_seen(engine_fixture):
    """(the backlog handed to the policy at every step of one greedy request, its result)."""
    from trtspec.runtime.policy import plan

    with engine_fixture.variant() as engine:
        seen, original = [], plan._choose

        def spy(view, batch_size, backlog=0):
            seen.append(backlog)
            return original(view, batch_size, backlog)

        plan._choose = spy
        try:
            result = engine.generate(TINY_PROMPTS[0], max_new_tokens=12)
        finally:
            plan._choose = original
    assert result.stats.num_drafts > 0 and len(seen) > 1
    return seen, result


def test_drafts_that_keep_fewer_tokens_than_estimated_are_priced_down_then_tried_again():
    """Each step that drafted the cost model's pick reports what it committed; realized rates
    below the estimates scale every draft's estimate down (here a chain estimated 1.06x plain
    decoding, the margin is 1.05x: realizing 0.8 of its estimate turns it off), never up, and
    the scale returns to 1 while nothing is drafted."""
    from trtspec.runtime.policy.by_load import DECAY, Choice

    model = CostModel(1, drafts_cost=False)
    for n in (8, 16, 24, 32) * 20:
        model.observe_forward(n, 1.0 + 0.02 * n)
    for i in range(400):  # the first draft token accepted 20 % of the time
        model.observe_verify(1, int((i + 1) * 0.2) - int(i * 0.2))
    assert model.best_length(8) == 1 and model.calibration() == 1.0
    estimate = model.estimate
    assert estimate == model.rate(8, Choice(1))  # the chosen draft's own estimate, unscaled
    def drafts() -> bool:  # the model's own choice, not a probe
        choice = model.choose(8)
        return choice.length > 0 and not choice.probe

    drafted = 0
    while drafts():  # the chain's steps keep 0.8 of the estimated tokens per second
        model.observe_step(round(0.8 * estimate * 100), 100.0, decode_only=True)
        drafted += 1
    assert 1 <= drafted <= 3 and model.calibration() < 1.05 / 1.06
    steps = 0  # plain steps: no outcome, the mean ages
    while not drafts():
        model.observe_step(8, 1.0, decode_only=True)
        steps += 1
    assert 10 < steps < 1 / (1 - DECAY) * 5
    # a step with a prompt chunk is no outcome; drafts that beat their estimate do not raise it
    model.best_length(8)
    model.observe_step(1, 1.0, decode_only=False)
    for _ in range(50):
        model.best_length(8)
        model.observe_step(round(2 * model.estimate * 100), 100.0, decode_only=True)
    assert model.calibration() == 1.0
