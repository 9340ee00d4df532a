"""Throughput while every slot of a cell was busy: the engine at concurrency c, without the drain.

Why: a cell's output_throughput divides its tokens by the whole wall time of its blocks, and each
block drains at its end (trtspec.bench.load): in its last seconds fewer than c requests are in
flight, so the figure mixes concurrency c with every smaller one (a concurrency-8 cell of 4
requests a slot on answers of 18-64 tokens averaged ~7.2 requests in flight). This module counts
only the time during which at least c requests were in flight, and the tokens streamed in it.

A request is in flight from its send (`RequestRecord.sent_s`) to its end (`sent_s + e2e_s`). A
chunk's token count is not recorded (a Triton stream carries text; only the request's total is
exact), so a request's output tokens are spread evenly over its chunks. Records without a send
time (older reports) give no figure.
"""

from __future__ import annotations

import bisect
import statistics
from collections.abc import Sequence
from typing import Any


def busy_windows(records: Sequence[Any], concurrency: int) -> list[tuple[float, float]]:
    """The [start, end) intervals during which at least `concurrency` of `records` were in flight."""
    # (stamp, change) tuples sort an end (-1) before a send (+1) at the same instant
    events = sorted([(r.sent_s, 1) for r in records] + [(r.sent_s + r.e2e_s, -1) for r in records])
    windows, in_flight, opened = [], 0, None
    for stamp, change in events:
        in_flight += change
        if in_flight >= concurrency and opened is None:
            opened = stamp
        elif in_flight < concurrency and opened is not None:
            if stamp > opened:
                windows.append((opened, stamp))
            opened = None
    return windows


def tokens_in(records: Sequence[Any], windows: list[tuple[float, float]]) -> float:
    """Output tokens streamed inside `windows` (sorted, disjoint, as busy_windows returns them),
    each request's tokens spread evenly over its chunks."""
    starts = [start for start, _ in windows]
    total = 0.0
    for record in records:
        if not record.ok:
            continue
        share = record.output_tokens / len(record.chunk_times_s)
        for offset in record.chunk_times_s:
            stamp = record.sent_s + offset
            index = bisect.bisect_right(starts, stamp) - 1  # the last window starting at or before it
            if index >= 0 and stamp < windows[index][1]:
                total += share
    return total


def full_load(records: Sequence[Any], concurrency: int, duration_by_repeat: dict[int, float]) -> dict[str, Any]:
    """Per repeat: tokens/s inside the windows where `concurrency` requests were in flight, and
    the share of the cell's wall time (`duration_by_repeat`) those windows cover; medians over
    repeats. Empty when any record lacks a send time."""
    if not records or any(r.sent_s is None for r in records):
        return {}
    rates, shares = [], []
    for repeat in sorted({r.repeat for r in records}):
        mine = [r for r in records if r.repeat == repeat]
        windows = busy_windows(mine, concurrency)
        seconds = sum(end - start for start, end in windows)
        if seconds > 0 and duration_by_repeat.get(repeat, 0) > 0:
            rates.append(tokens_in(mine, windows) / seconds)
            shares.append(seconds / duration_by_repeat[repeat])
    if not rates:
        return {}
    return {"full_load_output_throughput": statistics.median(rates), "full_load_output_throughput_by_repeat": rates,
            "full_load_time_share": statistics.median(shares)}
