"""Which draft a step makes by load: off, a chain of k tokens, or a dynamic tree of some shape.

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
"""

from __future__ import annotations

from typing import Any

from trtspec.runtime.verify.tree import TreeShape


def has_trees(schedule: Any) -> bool:
    return any(len(row) == 4 for row in schedule or ())


def schedule_row(schedule: Any, batch_size: int) -> tuple[int, ...]:
    """The table's row for `batch_size`: its last row at or below it (the first row below its own size)."""
    chosen = tuple(schedule[0])
    for row in schedule:
        if row[0] <= batch_size:
            chosen = tuple(row)
    return chosen


def plan_step(scheduler: Any, batch_size: int, backlog: int = 0) -> tuple[int, bool, TreeShape | None]:
    """(draft length, probe, dynamic tree or None) for a step with `batch_size` speculating
    sequences, whose drafters are `backlog` rows behind (DraftSession.backlog); with a tree the
    length only says whether to draft (its nodes are the budget).
    The choice is counted in the scheduler's `draft_shapes` and told to the cost model, which
    reads the step's drafting time by it."""
    from trtspec.runtime.policy.by_load import Choice

    config, tree, model = scheduler.config, scheduler.engine.tree, scheduler.cost_model
    if has_trees(config.draft_len_schedule):
        row = schedule_row(config.draft_len_schedule, batch_size)
        if len(row) == 4:
            choice = Choice(row[2], TreeShape(*row[1:]))
        else:
            choice = Choice(min(row[1], config.max_draft_len))
    elif isinstance(tree, TreeShape) and not config.draft_len_schedule and batch_size > 1:
        choice = model.choose(batch_size, tree, backlog)  # off, a chain, or the tree at some budget
    else:
        length, probe, min_match = scheduler.draft_length(batch_size, backlog)
        choice = Choice(length, tree if length > 0 else None, probe, min_match)
    model.planned = choice
    count_shape(scheduler.stats, choice.key)
    shape = choice.tree if isinstance(choice.tree, TreeShape) else None
    return (shape.depth if shape is not None else choice.length), choice.probe, shape


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
