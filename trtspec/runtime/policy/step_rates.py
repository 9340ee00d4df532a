"""One step's prices: the expected committed tokens per second of every draft the load policy weighs
at one batch size, with what the options share worked out once per step.

Why: at a draft cap of 24 with eight n-gram match levels seen, `CostModel.choose` weighs 193
options a step; priced one by one, each chain of k summed k pass rates over every match level
(about k x levels dictionary walks) and re-read the forward's fits, 2.1 ms of CPU a step on this
2-core EPYC against 0.37 ms at a cap of 8 (docs/BENCHMARKS-log.md, "The load policy's cost per
step"). Here the chains' gains G(1..cap) are one running sum per match level, the share of lookups
that found a draft one figure per level, T(n) at the step's batch size one set of fits
(ForwardCosts.at_batch), and draft forwards one price per row count.

Contract: `rate(choice)` is the formula of trtspec.runtime.policy.by_load's docstring, computed in
the same order of floating-point operations as pricing each option alone, so decisions are the
same bit for bit (tests/runtime/policy/test_rt_load_policy_decisions.py replays a history against
the one-by-one computation). It reads the model; it changes nothing the model would not change
pricing the option alone (a tree's budget starts being measured: CostModel.tree_gain). Valid for
one step: the model's measurements must not change while it is in use.
"""

from __future__ import annotations

from typing import Any

from trtspec.runtime.policy.choices import Choice, draft_work

# While drafting is off, a model drafter's cache falls behind (the EAGLE-3 head, a draft model):
# the first draft after plain steps feeds every position verified since, in one forward. That
# catch-up is priced, spread over this many steps (a resumed draft usually lasts several): at
# concurrency 8 through Triton, drafts chosen on estimates a few percent above off after long
# off stretches, catch-up unpriced, made the run 0.94x of plain decoding (docs/BENCHMARKS-log.md).
CATCH_UP_HORIZON = 4


class StepRates:
    """`rate(choice)`: tokens per second when each of `batch_size` sequences drafts `choice`, their
    drafters `backlog` rows behind, priced from `model` (a CostModel) as it stands."""

    def __init__(self, model: Any, batch_size: int, backlog: int = 0):
        self.model = model
        self.batch_size = batch_size
        self.backlog = backlog
        self.forward = model.target.at_batch(batch_size)  # T(n) for a step of batch_size sequences
        self._found: dict[int, float] = {}         # f, by min_match
        self._gains: dict[int, list[float]] = {}   # G(1), G(2), ... by min_match
        self._draft: dict[float, float] = {}       # D(rows), by rows

    def found(self, min_match: int) -> float:
        """f: how often a lookup (matching at least `min_match` tokens, where given) found a draft."""
        if min_match not in self._found:
            model = self.model
            found = model.matches.found_at_least(min_match) if min_match else model.found
            self._found[min_match] = found / model.proposed
        return self._found[min_match]

    def _chain_gain(self, k: int, min_match: int) -> float:
        """G(k) for k >= 1, read off one running sum per match level (CostModel.chain_gains)."""
        gains = self._gains.get(min_match)
        if gains is None or len(gains) < k:
            gains = self._gains[min_match] = self.model.chain_gains(max(k, self.model.max_draft_len), min_match)
        return gains[k - 1]

    def draft_seconds(self, rows: float) -> float:
        """D(rows), once per row count."""
        if rows not in self._draft:
            self._draft[rows] = self.model.draft_seconds(rows)
        return self._draft[rows]

    def rate(self, choice: Choice) -> float:
        """Expected committed tokens per second when every sequence drafts `choice`."""
        model, batch_size = self.model, self.batch_size
        found = self.found(choice.min_match)
        if choice.length == 0:
            gain, width = 0.0, 0
        elif choice.tree is None:
            gain, width = self._chain_gain(choice.length, choice.min_match), choice.length
        else:
            gain, width = model.tree_gain(choice.tree), model.verified_nodes(choice.tree)
        forwards, rows = draft_work(choice)
        seconds = self.forward(batch_size * (1 + found * width)) + forwards * self.draft_seconds(batch_size * rows)
        if choice.length and self.backlog:
            first = batch_size * rows
            seconds += (self.draft_seconds(first + self.backlog) - self.draft_seconds(first)) / CATCH_UP_HORIZON
        return batch_size * (1 + found * gain) / seconds
