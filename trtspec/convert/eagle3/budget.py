"""The time budget of `trtspec convert --mode eagle3`: `max_minutes` is the whole eagle3 stage.

Vocabulary: the *data step* is answers (the target writes the training rows) plus features (one
frozen-target pass per row); *finish* is the export and the held-out acceptance report; training
gets the rest. The clock starts when the stage starts (loading the target included).

The plan is made once, near the start, from rates measured on this machine (`Rates`): seconds per
answer from the first PROBE_SAMPLES answers (real rows, kept), seconds per feature row from one
timed target forward over PROBE_ROWS of them, and a one-row forward standing in for a step of
the acceptance report. `plan_budget` then sizes the data: the data step may take
at most DATA_SHARE of the budget, and where the requested `num_samples` would take longer the
number of samples shrinks to what fits (never below `min_samples`). Training gets what is left
when it starts (`training_seconds`), so an estimate that was off moves training's share, not the
end of the command; only a data step that overran by more than the budget itself makes the
command longer (training keeps MIN_TRAINING_SHARE).

Why half: on SmolLM2 (docs/CONVERT.md) twice the data at the same training time moved the
held-out mean acceptance length by nothing (1.53 -> 1.54), twice the training time at the same
data by about +0.1, and a head trained over too few rows memorises them (training accuracy 0.8,
held-out 1.2). Both matter and neither dominates, so neither gets less than half.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass, replace
from typing import Any

DATA_SHARE = 0.5           # the data step's share of the budget, at most
MIN_TRAINING_SHARE = 0.1   # training's share when the data step overran
PROBE_SAMPLES = 16         # answers timed to estimate the rest (a quarter of generate_batch_size's default)
PROBE_ROWS = 8             # rows in the timed feature forward (the feature pass's batch)
FINISH_OVERHEAD_S = 15.0   # export, the engine's load, the report


@dataclass(frozen=True)
class Rates:
    """What the data step and the finish cost here, measured near the start."""

    answer_s: float    # seconds per new sample (all processes together)
    feature_s: float   # seconds per row of features (all processes together)
    finish_s: float    # export + acceptance report


@dataclass(frozen=True)
class BudgetPlan:
    budget_s: float
    spent_s: float     # before the plan: loading the target, the probes
    requested: int     # num_samples in the spec
    samples: int       # samples trained on (<= requested)
    on_disk: int       # rows already made (by the probe or an earlier run)
    answers_s: float   # estimated, for the samples still to make
    features_s: float
    finish_s: float
    training_s: float

    @property
    def shrunk(self) -> bool:
        return self.samples < self.requested

    def line(self) -> str:
        """The plan in one line, said before the long phases start."""
        made = f", {self.on_disk} made" if self.on_disk else ""
        cut = f" (of {self.requested}: all would not fit in {DATA_SHARE:.0%} of the budget)" if self.shrunk else ""
        return (f"budget {_minutes(self.budget_s)} for the whole eagle3 stage: answers ~{_minutes(self.answers_s)} "
                f"for {self.samples} samples{cut}{made}, features ~{_minutes(self.features_s)}, training gets the "
                f"rest, ~{_minutes(self.training_s)}; export and acceptance ~{_minutes(self.finish_s)} "
                f"({_minutes(self.spent_s)} spent so far)")

    def to_dict(self) -> dict[str, Any]:
        return {name: round(value, 1) if isinstance(value, float) else value for name, value in asdict(self).items()}


def _minutes(seconds: float) -> str:
    return f"{seconds / 60:.1f} min"


def samples_that_fit(allowance_s: float, on_disk: int, rates: Rates) -> int:
    """The most samples whose data step fits `allowance_s`: new answers for those not on disk, and
    features for all of them."""
    if allowance_s <= 0:
        return 0
    if on_disk * rates.feature_s >= allowance_s:  # even the rows on disk do not all fit
        return int(allowance_s / rates.feature_s) if rates.feature_s > 0 else on_disk
    per_new = rates.answer_s + rates.feature_s
    if per_new <= 0:
        return 1 << 30
    return on_disk + int((allowance_s - on_disk * rates.feature_s) / per_new)


def plan_budget(budget_s: float, spent_s: float, *, requested: int, on_disk: int, rates: Rates,
                min_samples: int) -> BudgetPlan:
    """Size the data to the budget (see the module docstring) and say what training gets."""
    allowance = DATA_SHARE * budget_s - spent_s
    samples = min(requested, max(min(min_samples, requested), samples_that_fit(allowance, on_disk, rates)))
    answers_s = max(0, samples - on_disk) * rates.answer_s
    features_s = samples * rates.feature_s
    training_s = training_seconds(budget_s, spent_s + answers_s + features_s, rates.finish_s)
    return BudgetPlan(budget_s=budget_s, spent_s=spent_s, requested=requested, samples=samples, on_disk=on_disk,
                      answers_s=answers_s, features_s=features_s, finish_s=rates.finish_s, training_s=training_s)


def with_finish(plan: BudgetPlan, finish_s: float) -> BudgetPlan:
    """`plan` with the finish re-estimated: the smaller of the two estimates (load only makes a
    timed forward slower), training's estimate moved by the difference."""
    better = min(plan.finish_s, finish_s)
    return replace(plan, finish_s=better, training_s=plan.training_s + plan.finish_s - better)


def training_seconds(budget_s: float, elapsed_s: float, finish_s: float) -> float:
    """What is left for training at `elapsed_s` into the stage (at least MIN_TRAINING_SHARE)."""
    return max(MIN_TRAINING_SHARE * budget_s, budget_s - elapsed_s - finish_s)


# One-row 16-token forwards of transformers' model (what `step_s` times) per held-out token: the
# report runs the cpu engine with the new head, whose verify pass + head steps cost a fraction of
# that forward. The default SmolLM2 run of issue 26 (load ~1.5, 2 cores) estimated 3.0 of them per
# token, 193.5 s, for a finish that took 21.5 s (12 prompts x 48 tokens, 365 engine steps, AL 1.49):
# about 0.28 per token after the load and export. The report also decodes every prompt without
# speculation (is the head worth it on this machine?): one plain engine step per token, about as
# much again. 1.1 keeps a margin of ~2x for a busier machine or a head that accepts less (fewer
# tokens per step) and hands training the rest.
FINISH_STEPS_PER_TOKEN = 1.1


def finish_estimate(held_out_tokens: int, step_s: float) -> float:
    """Export + the acceptance report: FINISH_STEPS_PER_TOKEN one-row forwards per held-out token
    (prompts x eval tokens), plus the fixed costs."""
    return FINISH_OVERHEAD_S + held_out_tokens * FINISH_STEPS_PER_TOKEN * step_s


def probe_size(requested: int, on_disk: int, world_size: int) -> int:
    """Answers to time before planning: PROBE_SAMPLES (a whole number per process), at most what is missing."""
    per_process = math.ceil(PROBE_SAMPLES / world_size)
    return max(0, min(requested - on_disk, per_process * world_size))
