"""What a benchmark reads from the server's own counters: diffed around a run, a cell or a phase,
then summed by name (the cpu model's Prometheus metrics; trtspec.bench.targets gives the in-process
engine's the same names, trtspec.bench.openai_target a Dynamo worker's vLLM-named ones). Pure: no I/O.

A table row's acceptance is trtspec.bench.table_rows'; the phases' deltas it may take are
trtspec.bench.phases'.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

_DRAFT_LABEL = re.compile(r'draft="([^"]*)"')
STEPS_METRIC = "trtspec:engine_steps"
# not the server's: the block reads (before, after) of a cell that found the server still busy
# after TritonTarget's wait (trtspec.bench.targets.SETTLE_S), kept beside the cell's counter deltas
UNSETTLED_READS = "trtspec_bench:unsettled_reads"


def steps_by_draft(delta: dict[str, float] | None) -> dict[str, int] | None:
    """The server's steps by the draft its load policy chose (diffed `trtspec:engine_steps{draft="chain:4"}`
    counters: off, chain:K, tree:..., probe:...), most frequent first; None without them (a baseline
    cell: steps without speculating sequences are not counted)."""
    counts: dict[str, int] = {}
    for key, value in (delta or {}).items():
        if key.startswith(STEPS_METRIC + "{") and (match := _DRAFT_LABEL.search(key)) and value > 0:
            counts[match[1]] = counts.get(match[1], 0) + int(value)
    return dict(sorted(counts.items(), key=lambda item: -item[1])) if counts else None


def prompt_share_copied(delta: dict[str, float] | None) -> float | None:
    """Share of the prompt tokens the server copied (kept prompts, the shared chat start) instead of
    prefilling, from diffed `trtspec:prefix_cache_hits` / `_queries`: a benchmark that repeats its
    prompts is served from cache; None without them."""
    from trtspec.client.metrics import metric_total

    delta = delta or {}
    queries = metric_total(delta, "trtspec:prefix_cache_queries")
    return metric_total(delta, "trtspec:prefix_cache_hits") / queries if queries > 0 else None


def steps_on_fewer_threads(delta: dict[str, float] | None) -> int:
    """Engine steps run on fewer threads because other processes computed on its cores (diffed
    `trtspec:engine_steps_on_fewer_threads`; a fall back before the cell began still counts its
    steps here): a cell with any measured the machine, not the engine."""
    from trtspec.client.metrics import metric_total

    return int(metric_total(delta or {}, "trtspec:engine_steps_on_fewer_threads"))


def diff_counters(before: dict[str, float], after: dict[str, float]) -> dict[str, float]:
    """Server counters accumulated during one run: after - before.

    Counters are never used cumulatively: a server that ran other requests earlier would
    contaminate the figures (reference §3.1 pitfall 2). A counter that first appears after the
    run (a new label, e.g. a draft position never reached before) started at 0. Non-numbers
    and booleans are skipped.
    """
    def number(value: Any) -> bool:
        return isinstance(value, int | float) and not isinstance(value, bool)

    return {key: value - (before.get(key, 0) if number(before.get(key, 0)) else 0)
            for key, value in after.items() if number(value)}


def unsettled_reads(delta: dict[str, float] | None) -> int:
    """A cell's counter reads that found the server busy (its steps may be a neighbour's); 0 without."""
    return int((delta or {}).get(UNSETTLED_READS, 0))


@dataclass
class Phase:
    """Prompts of one category and one context-length bucket, run alone (trtspec.bench.phases): the
    counter deltas of each of its (variant, concurrency) cells, and of the whole phase."""

    category: str
    bucket: str | None                      # trtspec.bench.context_buckets.label; None: no prompt length
    prompt_indices: tuple[int, ...]
    cells: dict[tuple[str, int], dict[str, float]] = field(default_factory=dict)
    delta: dict[str, float] | None = None

    def to_dict(self) -> dict[str, Any]:
        """For bench.json: the speculative counters only (what the rows are made of)."""
        def spec(delta: dict[str, float] | None) -> dict[str, float] | None:
            return None if delta is None else {k: v for k, v in delta.items() if k.startswith(SPEC_PREFIX)
                                               or k == UNSETTLED_READS}

        return {"category": self.category, "bucket": self.bucket, "prompt_indices": list(self.prompt_indices),
                "counters": spec(self.delta),
                "cells": [{"variant": variant, "max_concurrency": concurrency, "counters": spec(delta)}
                          for (variant, concurrency), delta in self.cells.items()]}


SPEC_PREFIX = "trtspec:spec_decode_"  # trtspec.bench.metrics.COUNTER_PREFIX (imported there from here)


def phases_add_up(phases: Sequence[Phase], total: dict[str, float] | None) -> bool | None:
    """Whether the phases' speculative counter deltas add up to the run's (nothing else ran on the
    server between the first phase and the last, and every read found it settled); None without counters."""
    if total is None or any(p.delta is None for p in phases):
        return None
    summed: dict[str, float] = {}
    for phase in phases:
        for key, value in (phase.delta or {}).items():
            if key.startswith(SPEC_PREFIX):
                summed[key] = summed.get(key, 0) + value
    return all(abs(summed.get(key, 0) - value) < 1e-6 for key, value in total.items() if key.startswith(SPEC_PREFIX)) \
        and all(key in total or value == 0 for key, value in summed.items())
