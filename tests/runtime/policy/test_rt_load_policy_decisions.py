"""The load policy's decisions pinned against pricing each option alone, the straightforward way.

`CostModel.choose` prices a step's options together (trtspec.runtime.policy.step_rates: running
sums of the chains' gains per match level, the forward's fits read once). Its contract is the same
decision, bit for bit, as the formula computed option by option. The reference below is that
computation as it stood before (d3d1041): every chain of k sums its k pass rates, each one a walk
over the match lengths; T(n) re-reads the fits per option. A seeded replay of step measurements
(benchmarks/policy_cost.py's history: batch sizes 5..9, match lengths 1..8, noisy forwards,
verified chains and trees) feeds both models the same steps; every step's choice, probe and
estimate must be equal, at draft caps 4, 8 and 24 and beside a dynamic tree with drafts priced
and drafters behind.
"""

from __future__ import annotations

import pytest

from benchmarks.policy_cost import history, parse_case
from trtspec.runtime.policy.by_load import PRIOR_ACCEPT, CostModel
from trtspec.runtime.policy.choices import Choice, draft_work
from trtspec.runtime.policy.forward_costs import THIN
from trtspec.runtime.policy.plan import record_step


def _predict(line, x, prior):
    """DecayedLine.predict as written before (d3d1041)."""
    if line.s < 1e-9:
        return None
    mean_x, mean_y = line.sx / line.s, line.sy / line.s
    variance = line.sxx / line.s - mean_x * mean_x
    if line.s >= 4 and variance > 1.0:
        b = max((line.sxy / line.s - mean_x * mean_y) / variance, 0.0)
        a = max(mean_y - b * mean_x, 1e-6)
        return a + b * x
    return mean_y * prior(x) / prior(mean_x)


def _forward_seconds(costs, num_tokens, batch_size):
    """ForwardCosts.seconds as written before: every call re-reads the fits."""
    from trtspec.runtime.policy.decayed_line import DecayedLine
    from trtspec.runtime.policy.forward_costs import _prior

    def overall(n):
        measured = _predict(costs.overall, n, _prior)
        return measured if measured is not None else _prior(n)

    def plain_fit():
        own = costs.plain.get(batch_size)
        if (own is not None and own.s >= THIN) or costs.across.s < THIN:
            return own
        level = DecayedLine(1.0)
        level.add(float(batch_size), _predict(costs.across, float(batch_size), overall))
        return level

    plain = plain_fit() if batch_size else None
    drafted = costs.by_batch.get(batch_size) if batch_size else None
    for fit in (plain, drafted) if num_tokens <= (batch_size or 0) else (drafted, plain):
        measured = _predict(fit, num_tokens, overall) if fit is not None else None
        if measured is not None:
            return measured
    return overall(num_tokens)


class OneByOne:
    """CostModel.rate as written before: each option priced alone."""

    def __init__(self, model, batch_size, backlog):
        self.model, self.batch_size, self.backlog = model, batch_size, backlog

    def chain_gain(self, k, min_match):
        model = self.model
        model._grow(k)
        gain, survive = 0.0, 1.0
        for j in range(k):
            if min_match:
                offered, accepted = model.matches.at_least(min_match, j)
                survive *= (accepted + 2.0 * PRIOR_ACCEPT) / (offered + 2.0)
            else:
                survive *= model.accepted[j] / model.offered[j]
            gain += survive
        return gain

    def draft_seconds(self, rows):
        model = self.model
        if not model.drafts_cost:
            return 0.0
        measured = _predict(model.draft, rows, lambda _: 1.0)
        return measured if measured is not None else 0.1 * _forward_seconds(model.target, rows, None)

    def rate(self, choice: Choice) -> float:
        model, batch_size, backlog = self.model, self.batch_size, self.backlog
        found = (model.matches.found_at_least(choice.min_match) if choice.min_match else model.found) / model.proposed
        if choice.length == 0:
            gain, width = 0.0, 0
        elif choice.tree is None:
            gain, width = self.chain_gain(choice.length, choice.min_match), choice.length
        else:
            gain, width = model.tree_gain(choice.tree), model.verified_nodes(choice.tree)
        forwards, rows = draft_work(choice)
        seconds = (_forward_seconds(model.target, batch_size * (1 + found * width), batch_size)
                   + forwards * self.draft_seconds(batch_size * rows))
        if choice.length and backlog:
            first = batch_size * rows
            seconds += (self.draft_seconds(first + backlog) - self.draft_seconds(first)) / 4
        return batch_size * (1 + found * gain) / seconds


class ReferenceModel(CostModel):
    def step_rates(self, batch_size, backlog=0):
        return OneByOne(self, batch_size, backlog)


@pytest.mark.parametrize("case", ["chain:4", "chain:8", "chain:24", "tree:4,6,32"])
def test_choices_equal_pricing_each_option_alone(case):
    cap, shape = parse_case(case)
    fast, reference = CostModel(cap, shape is not None), ReferenceModel(cap, shape is not None)
    keys = []
    for batch, backlog, record in history(cap, shape, steps=250, seed=1):
        ours, theirs = fast.choose(batch, shape, backlog), reference.choose(batch, shape, backlog)
        assert (ours, fast.probe, fast.estimate) == (theirs, reference.probe, reference.estimate), len(keys)
        fast.planned = reference.planned = ours
        record_step(fast, record)
        record_step(reference, record)
        keys.append(ours.key)
    # the replay decides something: off, several drafts, and probes (a tree's too, beside one)
    assert "off" in keys and len(set(keys)) >= 4, set(keys)
    assert any(k.startswith("probe:") for k in keys)
    if shape is None:
        assert any("@" in k for k in keys)  # a chain drafted only on long n-gram matches
    else:
        assert any(k.startswith("tree:") for k in keys)


def test_every_option_priced_together_equals_alone():
    """Not only the winner: every option's estimate, at cap 24 after the replay, with a backlog."""
    cap, shape = parse_case("chain:24")
    model = CostModel(cap, drafts_cost=True)
    for _, _, record in history(cap, shape, steps=120, seed=2):
        model.planned = Choice(0)
        record_step(model, record)
    for batch in (2, 7, 8, 16):
        together, alone = model.step_rates(batch, backlog=5), OneByOne(model, batch, 5)
        options = model.candidates(None)
        assert len(options) > 100
        assert [together.rate(o) for o in options] == [alone.rate(o) for o in options]
