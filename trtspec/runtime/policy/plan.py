"""What one step drafts, decided in one place: off, a chain of k tokens per sequence, or a dynamic
tree of some shape; and what the step measured, told to the cost model once, after the step.

`speculative.draft_len_schedule` rows are [batch_size, draft_len] (a chain, 0: off) and, for
EAGLE-3 or a draft model, [batch_size, topk, depth, num_draft_tokens] (a dynamic tree): from that many decoding
sequences on, that draft (`trtspec tune --concurrency 1,2,4,8 --tree-shapes ...` measures them and
writes the table). Why a table per batch size: at batch 1 a tree of N nodes costs a verify pass of
about one plain step, so its longer accepted runs pay; in a full batch every node costs nearly its
full price and a short chain, or no draft, is faster.

A schedule with no tree rows keeps its meaning from before trees: its length gates the engine's
own draft (chain, static tree or dynamic tree). Without a schedule the cost model decides
(trtspec.runtime.policy.by_load): off, a chain of any length, or the engine's dynamic tree at one of
its budgets (a static tree: all or nothing). This module only reads the table and tells the cost
model what the step drafts; every step's choice is counted in SchedulerStats.draft_shapes.

Per sequence, each request's own policy (per_request.py) may shorten the step's length, and the
step's token budget cuts the longest drafts first (`draft_lengths`). While speculation is off the
cost model's probe lets one sequence draft (`one_prober`). The step's measurements (drafts asked
and found, drafting and forward times, each verified draft, the tokens committed) are collected in
a StepRecord and fed to the cost model by `record_step` at the end of the step, in the order the
model reads them.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from trtspec.runtime.verify.tree import TreeShape


@dataclass(frozen=True)
class StepPlan:
    """One step's drafts: `lengths[i]` draft tokens for decoding sequence i (0: none; with a
    dynamic tree, its node budget), the tree's shape (None: chains), and the n-gram match length
    a chain's lookup needs for its draft to be verified (0: any)."""

    lengths: list[int]
    shape: TreeShape | None = None
    min_match: int = 0


@dataclass
class StepRecord:
    """What one step measured, for the cost model (fed once, by record_step)."""

    asked: int = 0                 # sequences asked for a draft
    found: int = 0                 # ... that returned one
    matches: list[int] = field(default_factory=list)  # their n-gram match lengths
    draft_positions: int = 0       # the longest draft asked for
    draft_seconds: float = 0.0
    forward_tokens: int = 0
    forward_seconds: float = 0.0
    decode_batch: int | None = None  # sequences of a step that only decoded (None: a prompt chunk rode along)
    verified: list[tuple[int, int, Any, list[int]]] = field(default_factory=list)  # (offered, accepted, draft, path)
    committed: int = 0             # tokens the decoding sequences committed


def record_step(model: Any, record: StepRecord) -> None:
    """The step's measurements into the cost model, in the order it reads them (the proposals set
    how much one verified draft ages the acceptance counts)."""
    model.observe_proposals(record.asked, record.found, record.matches)
    model.observe_draft(record.asked, record.draft_positions, record.draft_seconds)
    model.observe_forward(record.forward_tokens, record.forward_seconds, record.decode_batch)
    for offered, accepted, draft, path in record.verified:
        model.observe_verify(offered, accepted, draft, path)
    model.observe_step(record.committed, record.draft_seconds + record.forward_seconds,
                       decode_only=record.decode_batch is not None)


def has_trees(schedule: Any) -> bool:
    return any(len(row) == 4 for row in schedule or ())


def schedule_row(schedule: Any, batch_size: int) -> tuple[int, ...]:
    """The table's row for `batch_size`: its last row at or below it (the first row below its own size)."""
    chosen = tuple(schedule[0])
    for row in schedule:
        if row[0] <= batch_size:
            chosen = tuple(row)
    return chosen


def plan_step(view: Any, decoding: list[Any]) -> StepPlan:
    """The step's drafts for its `decoding` sequences (those with a drafter session speculate);
    `view`: the step's StepView (config, engine, cost model, stats)."""
    speculating = [s for s in decoding if s.session is not None]
    if not speculating:
        return StepPlan([0] * len(decoding))
    backlog = sum(s.session.backlog(len(s.tokens)) for s in speculating)
    choice = _choose(view, len(speculating), backlog)
    view.cost_model.planned = choice
    count_shape(view.stats, choice.key)
    shape = choice.tree if isinstance(choice.tree, TreeShape) else None
    step_len = shape.depth if shape is not None else choice.length  # with a tree: whether to draft
    lengths = draft_lengths(step_len, decoding, view.config.max_num_tokens, shape.num_nodes if shape else None)
    if choice.probe:
        lengths = one_prober(lengths, view.stats.num_steps)
    return StepPlan(lengths, shape, choice.min_match)


def _choose(view: Any, batch_size: int, backlog: int) -> Any:
    """The step's Choice for `batch_size` speculating sequences whose drafters are `backlog` rows
    behind (DraftSession.backlog): the spec's table, else the cost model."""
    from trtspec.runtime.policy.by_load import Choice, schedule_length

    config, tree, model = view.config, view.engine.tree, view.cost_model
    schedule = config.draft_len_schedule
    if has_trees(schedule):
        row = schedule_row(schedule, batch_size)
        if len(row) == 4:
            return Choice(row[2], TreeShape(*row[1:]))
        return Choice(min(row[1], config.max_draft_len))
    if isinstance(tree, TreeShape) and not schedule and batch_size > 1:
        return model.choose(batch_size, tree, backlog)  # off, a chain, or the tree at some budget
    if schedule:
        length, probe, min_match = schedule_length(schedule, batch_size, config.max_draft_len), False, 0
    elif batch_size <= 1:  # alone: a verify pass costs about one step, and seeded runs stay reproducible
        length, probe, min_match = config.max_draft_len, False, 0
    else:
        length, probe, min_match = model.best_length(batch_size, tree, backlog), model.probe, model.min_match
    return Choice(length, tree if length > 0 else None, probe, min_match)


def draft_lengths(step_len: int, decoding: list[Any], max_num_tokens: int, nodes: int | None = None) -> list[int]:
    """Draft tokens per decoding sequence this step: the load policy's `step_len`, shortened by
    each sequence's own policy (with a dynamic tree, `nodes`, its node budget, for every sequence
    that drafts), then cut so that every sequence's [pending] + draft fits the token budget
    together (one token each at least, whatever the budget)."""
    lengths = [min(step_len, s.policy.next_length()) if s.session is not None and step_len > 0 else 0
               for s in decoding]
    if nodes is not None:
        lengths = [nodes if k > 0 else 0 for k in lengths]
    room = max_num_tokens - len(decoding)
    while sum(lengths) > max(0, room):
        longest = max(lengths)
        lengths = [min(k, longest - 1) for k in lengths]
    return lengths


def one_prober(lengths: list[int], turn: int) -> list[int]:
    """A probe step (speculation off, acceptance still measured): only one sequence keeps its
    draft, taking turns by `turn`, so the probe adds k tokens to the step instead of B k."""
    drafting = [i for i, k in enumerate(lengths) if k > 0]
    if not drafting:
        return lengths
    chosen = drafting[turn % len(drafting)]
    return [k if i == chosen else 0 for i, k in enumerate(lengths)]


def count_shape(stats: Any, key: str) -> None:
    """One more step that drafted `key` (load_policy.Choice.key). The counters are replaced, never
    changed in place, so a stats snapshot keeps the counts it was taken with."""
    stats.draft_shapes = {**stats.draft_shapes, key: stats.draft_shapes.get(key, 0) + 1}


def widest_room(config: Any, tree: Any) -> int:
    """Most cache slots past the committed tokens any step may write: the longest chain, the
    engine's tree, or the largest tree of the schedule."""
    rooms = [config.max_draft_len, tree.room if tree is not None else 0]
    rooms += [TreeShape(*row[1:]).room for row in config.draft_len_schedule or () if len(row) == 4]
    return max(rooms)
