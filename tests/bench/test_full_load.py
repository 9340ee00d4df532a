"""Throughput at full concurrency (trtspec.bench.full_load) on hand-timed records."""

from __future__ import annotations

import pytest

from trtspec.bench.full_load import busy_windows, full_load, tokens_in
from trtspec.bench.metrics import BASELINE, Cell, RequestRecord, summarize_cell


def rec(sent, chunks, tokens, e2e, repeat=0, error=None):
    return RequestRecord(variant=BASELINE, concurrency=2, repeat=repeat, prompt_index=0, category="chat",
                         chunk_times_s=chunks, output_tokens=tokens, e2e_s=e2e, error=error, sent_s=sent)


def drained_block(repeat=0, sent_offset=0.0):
    """Two slots, sent at 0: A [0, 4) and B [0, 2); C fills B's slot [2, 4); D fills A's at 4 and
    runs alone [4, 8): the drain. Two requests in flight during [0, 4) only."""
    t = sent_offset
    return [rec(t + 0, [1, 2, 3, 4], 4, 4, repeat),   # 4 tokens, all inside [0, 4)
            rec(t + 0, [1, 2], 2, 2, repeat),         # 2 tokens
            rec(t + 2, [1, 2], 2, 2, repeat),         # 2 tokens, at 3 and 4: 4 is the window's end
            rec(t + 4, [1, 2, 3, 4], 4, 4, repeat)]   # 4 tokens, alone


def test_windows_are_where_every_slot_is_busy():
    assert busy_windows(drained_block(), 2) == [(0, 2), (2, 4)]   # an end and a send at 2 split, not merge
    assert busy_windows(drained_block(), 1) == [(0, 4), (4, 8)]
    assert busy_windows(drained_block(), 3) == []


def test_tokens_count_only_inside_the_windows():
    records = drained_block()
    # A: 4 (at 1, 2, 3, 4: 4 is outside [2, 4)) -> 3; B: 2; C: at 3 -> 1 (5 is outside); D: 0
    assert tokens_in(records, [(0, 2), (2, 4)]) == 3 + 2 + 1
    # a request's tokens spread evenly over its chunks: 6 tokens in 3 chunks count 2 each
    assert tokens_in([rec(0, [1, 2, 3], 6, 3)], [(0, 2.5)]) == 4
    assert tokens_in([rec(0, [1], 1, 1, error="boom")], [(0, 2)]) == 0   # failed requests count nothing


def test_the_drain_is_left_out_of_the_full_load_figure():
    cell = Cell(BASELINE, 2, drained_block(0) + drained_block(1, sent_offset=100.0), {0: 8.0, 1: 8.0})
    summary = summarize_cell(cell)
    assert summary["output_throughput"] == pytest.approx(12 / 8)            # the whole block, drain included
    assert summary["full_load_output_throughput"] == pytest.approx(6 / 4)   # 6 tokens in the 4 busy seconds
    assert summary["full_load_output_throughput_by_repeat"] == pytest.approx([1.5, 1.5])
    assert summary["full_load_time_share"] == pytest.approx(0.5)


def test_records_without_a_send_time_give_no_figure():
    records = drained_block()
    records[0].sent_s = None
    assert full_load(records, 2, {0: 8.0}) == {}
    assert "full_load_output_throughput" not in summarize_cell(Cell(BASELINE, 2, records, {0: 8.0}))
