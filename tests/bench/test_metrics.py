"""Aggregation math on synthetic timings; every expected value is worked out by hand in comments."""

from __future__ import annotations

import math

import numpy as np
import pytest

from trtspec.bench.metrics import (
    BASELINE,
    SPECULATIVE,
    RequestRecord,
    SpecCounts,
    accepted_histogram,
    group_cells,
    leviathan_speedup,
    percentile,
    speedups,
    summarize_cell,
)
from trtspec.bench.scaling import scaling
from trtspec.bench.server_counters import diff_counters
from trtspec.bench.table_rows import by_category


def rec(variant, index, category, chunks, tokens, e2e, spec=None, repeat=0, concurrency=1, error=None):
    return RequestRecord(variant=variant, concurrency=concurrency, repeat=repeat, prompt_index=index,
                         category=category, chunk_times_s=chunks, output_tokens=tokens, e2e_s=e2e,
                         spec=spec, error=error)


@pytest.fixture
def records():
    return [
        # A: TTFT 0.1, TPOT (0.5 - 0.1) / 4 = 0.1, ITL 0.2 and 0.1; two drafts of 4: accepted 2, then 1.
        rec(SPECULATIVE, 0, "chat", [0.1, 0.3, 0.4], 5, 0.5, SpecCounts(2, 8, 3, [2, 1, 0, 0])),
        # B: TTFT 0.2, TPOT (0.6 - 0.2) / 2 = 0.2, ITL 0.4; one draft of 4, one accepted.
        rec(SPECULATIVE, 1, "code", [0.2, 0.6], 3, 0.6, SpecCounts(1, 4, 1, [1, 0, 0, 0])),
        # A failed request: counted as failed, excluded from every statistic.
        rec(SPECULATIVE, 2, "code", [], 0, 0.05, error="ServerError: boom"),
        # Baseline of A: TPOT (1.1 - 0.1) / 4 = 0.25.
        rec(BASELINE, 0, "chat", [0.1, 0.35, 0.6, 0.85, 1.1], 5, 1.1),
        # Baseline of B: TPOT (1.0 - 0.2) / 2 = 0.4.
        rec(BASELINE, 1, "code", [0.2, 0.6, 1.0], 3, 1.0),
    ]


DURATIONS = {(SPECULATIVE, 1, 0): 2.0, (BASELINE, 1, 0): 4.0}


def test_percentile_matches_numpy_linear_interpolation():
    assert percentile([1, 2, 3, 4], 50) == 2.5
    assert percentile([4, 1, 3, 2], 90) == pytest.approx(3.7)  # rank 0.9 * 3 = 2.7 -> 3 + 0.7
    values = [0.3, 7.0, 2.5, 9.1, 4.4, 4.4, 0.0]
    for q in (0, 25, 50, 90, 99, 100):
        assert percentile(values, q) == pytest.approx(np.percentile(values, q))
    assert math.isnan(percentile([], 50))


def test_speculative_cell(records):
    spec_cell, base_cell = group_cells(records, DURATIONS)
    assert (spec_cell.variant, base_cell.variant) == (SPECULATIVE, BASELINE)
    s = summarize_cell(spec_cell)
    assert (s["completed"], s["failed"], s["errors"]) == (2, 1, ["ServerError: boom"])
    assert s["total_output_tokens"] == 8
    assert s["output_throughput"] == pytest.approx(4.0)     # 8 tokens / 2.0 s
    assert s["request_throughput"] == pytest.approx(1.0)    # 2 requests / 2.0 s
    # TTFT 100, 200 ms
    assert s["mean_ttft_ms"] == pytest.approx(150)
    assert s["median_ttft_ms"] == pytest.approx(150)
    assert s["std_ttft_ms"] == pytest.approx(50)
    assert s["p90_ttft_ms"] == pytest.approx(190)           # 100 + 0.9 * 100
    assert s["p99_ttft_ms"] == pytest.approx(199)
    assert s["mean_tpot_ms"] == pytest.approx(150)          # 100 and 200
    # ITL 200, 100 (A) and 400 (B): sorted 100, 200, 400
    assert s["mean_itl_ms"] == pytest.approx(700 / 3)
    assert s["median_itl_ms"] == pytest.approx(200)
    assert s["p90_itl_ms"] == pytest.approx(360)            # rank 1.8: 200 + 0.8 * 200
    assert s["p99_itl_ms"] == pytest.approx(396)            # rank 1.98
    assert s["mean_e2el_ms"] == pytest.approx(550)
    assert s["p99_e2el_ms"] == pytest.approx(599)
    # 3 drafts, 12 draft tokens, 4 accepted
    assert (s["spec_decode_num_drafts"], s["spec_decode_draft_tokens"], s["spec_decode_accepted_tokens"]) == (3, 12, 4)
    assert s["spec_decode_acceptance_rate"] == pytest.approx(100 * 4 / 12)
    assert s["spec_decode_acceptance_length"] == pytest.approx(1 + 4 / 3)
    assert s["spec_decode_per_position_acceptance_rates"] == pytest.approx([1, 1 / 3, 0, 0])
    # steps accepting 0..4 tokens: A's 2 and 1, B's 1
    assert s["spec_decode_accepted_per_step_histogram"] == [0, 2, 1, 0, 0]
    # 8 tokens - 2 first tokens = 6 decode tokens over 6 - 4 accepted = 2 target passes
    assert s["tokens_per_target_pass"] == pytest.approx(3.0)


def test_baseline_cell_has_no_spec_section(records):
    b = summarize_cell(group_cells(records, DURATIONS)[1])
    assert b["output_throughput"] == pytest.approx(2.0)     # 8 tokens / 4.0 s
    assert b["mean_tpot_ms"] == pytest.approx(325)          # 250 and 400
    assert "spec_decode_acceptance_length" not in b


def test_speedup_and_measured_over_theoretical(records):
    results = [summarize_cell(cell) for cell in group_cells(records, DURATIONS)]
    (row,) = speedups(results)
    assert row["output_throughput_speedup"] == pytest.approx(2.0)   # 4 / 2 tokens/s
    assert row["tpot_speedup"] == pytest.approx(325 / 150)
    assert row["e2el_speedup"] == pytest.approx(1050 / 550)
    assert row["theoretical_speedup"] == pytest.approx(3.0)         # tokens per target pass
    assert row["measured_over_theoretical"] == pytest.approx(2 / 3)


def test_speedup_is_the_median_of_per_repeat_ratios():
    records, durations = [], {}
    # Same 10 tokens every repeat; spec/base wall times give ratios 2.0, 1.0, 1.5 -> median 1.5.
    for repeat, (spec_s, base_s) in enumerate([(1.0, 2.0), (3.0, 3.0), (2.0, 3.0)]):
        for variant, seconds in ((SPECULATIVE, spec_s), (BASELINE, base_s)):
            records.append(rec(variant, 0, "chat", [0.1, 0.2], 10, 0.3, repeat=repeat, concurrency=4))
            durations[(variant, 4, repeat)] = seconds
    results = [summarize_cell(cell) for cell in group_cells(records, durations)]
    assert results[0]["output_throughput"] == pytest.approx(5.0)    # median of 10, 3.33, 5
    (row,) = speedups(results)
    assert row["output_throughput_speedup_by_repeat"] == pytest.approx([2.0, 1.0, 1.5])
    assert row["output_throughput_speedup"] == pytest.approx(1.5)
    assert math.isnan(row["theoretical_speedup"])                   # no spec counters at all


def test_scaling_is_each_variants_throughput_over_its_lowest_concurrency():
    records, durations = [], {}
    # 10 tokens per cell; baseline wall times: conc 1 -> 2.0 and 4.0 s (5 and 2.5 tok/s), conc 8 ->
    # 0.5 and 0.5 s (20 tok/s): per-repeat ratios 4.0 and 8.0, median 6.0. Speculative runs only at 8.
    for repeat, (one_s, eight_s) in enumerate([(2.0, 0.5), (4.0, 0.5)]):
        for concurrency, seconds in ((1, one_s), (8, eight_s)):
            records.append(rec(BASELINE, 0, "chat", [0.1, 0.2], 10, 0.3, repeat=repeat, concurrency=concurrency))
            durations[(BASELINE, concurrency, repeat)] = seconds
        records.append(rec(SPECULATIVE, 0, "chat", [0.1, 0.2], 10, 0.3, repeat=repeat, concurrency=8))
        durations[(SPECULATIVE, 8, repeat)] = 1.0
    (row,) = scaling([summarize_cell(cell) for cell in group_cells(records, durations)])
    assert (row["variant"], row["max_concurrency"], row["over_concurrency"]) == (BASELINE, 8, 1)
    assert row["output_throughput_scaling_by_repeat"] == pytest.approx([4.0, 8.0])
    assert row["output_throughput_scaling"] == pytest.approx(6.0)


def test_by_category(records):
    chat, code = by_category(records)
    assert chat["category"] == "chat"
    assert chat["speculative_user_tokens_per_s"] == pytest.approx(10.0)   # 5 / 0.5
    assert chat["baseline_user_tokens_per_s"] == pytest.approx(5 / 1.1)
    assert chat["speedup"] == pytest.approx(2.2)
    assert chat["spec_decode_acceptance_length"] == pytest.approx(2.5)   # 1 + 3/2
    assert code["speedup"] == pytest.approx(5 / 3)                       # 3/0.6 over 3/1.0
    assert code["spec_decode_acceptance_length"] == pytest.approx(2.0)   # 1 + 1/1
    assert code["speculative_requests"] == 1                             # the failed one is left out


def test_histogram_from_positions_and_tpot_edge_cases():
    # 5 drafts: positions say 4 accepted >= 1, 2 accepted >= 2, none accepted 3
    assert accepted_histogram(SpecCounts(5, 15, 6, [4, 2, 0])) == [1, 2, 2, 0]
    assert accepted_histogram(SpecCounts(5, 15, 6, None)) is None
    single = rec(SPECULATIVE, 0, "chat", [0.2], 1, 0.2)
    assert single.tpot_s is None and single.itls_s == []


def test_leviathan_theorem_matches_reference_table():
    # reference/peers-and-benchmarks.md §2.2: alpha 0.6, c 0.05, gamma 4 -> 1.92
    assert leviathan_speedup(0.6, 4, 0.05) == pytest.approx(1.9213, abs=1e-4)
    assert leviathan_speedup(0.8, 3, 0.30) == pytest.approx(1.55, abs=0.01)  # best gamma 3
    assert leviathan_speedup(0.8, 4, 0.30) == pytest.approx(1.53, abs=0.01)
    assert leviathan_speedup(1.0, 4, 0.0) == 5.0


def test_counters_are_diffed_never_cumulative():
    before = {"requests_total": 10, "accepted_total": 5, "label": "x", "up": True}
    after = {"requests_total": 15, "accepted_total": 5, "new_total": 3, "label": "y", "up": True}
    # a counter first seen after the run started at 0
    assert diff_counters(before, after) == {"requests_total": 5, "accepted_total": 0, "new_total": 3}


def test_positions_come_from_server_counters_when_responses_lack_them():
    from trtspec.bench.metrics import Cell, spec_counts_from_counters

    delta = {'trtspec:spec_decode_num_drafts{model="m",version="1"}': 4.0,
             'trtspec:spec_decode_num_draft_tokens{model="m",version="1"}': 16.0,
             'trtspec:spec_decode_num_accepted_tokens{model="m",version="1"}': 6.0,
             'trtspec:spec_decode_num_accepted_tokens_per_pos{model="m",position="1",version="1"}': 2.0,
             'trtspec:spec_decode_num_accepted_tokens_per_pos{model="m",position="0",version="1"}': 3.0,
             'nv_inference_count{model="m",version="1"}': 9.0}
    counts = spec_counts_from_counters(delta)
    assert (counts.num_drafts, counts.num_draft_tokens, counts.num_accepted_tokens) == (4, 16, 6)
    assert counts.accepted_per_position == [3, 2]
    # a Triton response carries totals but no positions -> the cell's counters fill them in
    record = rec(SPECULATIVE, 0, "chat", [0.1, 0.2], 3, 0.3, SpecCounts(4, 16, 6, None))
    s = summarize_cell(Cell(SPECULATIVE, 1, [record], {0: 1.0}, counters=delta))
    assert s["spec_decode_source"] == "server counters"
    assert s["spec_decode_per_position_acceptance_rates"] == pytest.approx([0.75, 0.5])
    assert s["spec_decode_accepted_per_step_histogram"] == [1, 1, 2]     # at least: 4, 3, 2, 0
    assert spec_counts_from_counters({"other": 1.0}) is None


def test_no_theoretical_ceiling_when_both_sides_speculate(records):
    # triton / in-process: both speculative, so "tokens per pass" is no ceiling for their ratio
    relabelled = [RequestRecord(**{**r.__dict__, "variant": "triton" if r.variant == SPECULATIVE else "in-process",
                                   "spec": r.spec or SpecCounts(3, 12, 4, [3, 1, 0, 0])}) for r in records]
    durations = {("triton", 1, 0): 2.0, ("in-process", 1, 0): 4.0}
    results = [summarize_cell(c) for c in group_cells(relabelled, durations, order=["triton", "in-process"])]
    (row,) = speedups(results, "triton", "in-process")
    assert row["output_throughput_speedup"] == pytest.approx(2.0)
    assert math.isnan(row["theoretical_speedup"]) and math.isnan(row["measured_over_theoretical"])


def test_the_load_policys_choices_come_from_server_step_counters():
    """`trtspec:engine_steps{draft=...}` deltas become steps per choice, most frequent first;
    other counters and zero deltas are ignored; no such counters -> None."""
    from trtspec.bench.server_counters import steps_by_draft

    delta = {'trtspec:engine_steps{draft="chain:4",model="m",version="1"}': 30.0,
             'trtspec:engine_steps{draft="off",model="m",version="1"}': 50.0,
             'trtspec:engine_steps{draft="probe:chain:4",model="m",version="1"}': 6.0,
             'trtspec:engine_steps{draft="chain:2",model="m",version="1"}': 0.0,
             "trtspec:spec_decode_num_drafts": 12.0}
    assert steps_by_draft(delta) == {"off": 50, "chain:4": 30, "probe:chain:4": 6}
    assert steps_by_draft({"trtspec:spec_decode_num_drafts": 3.0}) is None
    assert steps_by_draft(None) is None


def test_the_share_of_prompt_tokens_copied_comes_from_the_prefix_counters():
    from trtspec.bench.server_counters import prompt_share_copied

    delta = {'trtspec:prefix_cache_queries{model="m",version="1"}': 400.0,
             'trtspec:prefix_cache_hits{model="m",version="1"}': 300.0, "trtspec:spec_decode_num_drafts": 2.0}
    assert prompt_share_copied(delta) == 0.75
    assert prompt_share_copied({"trtspec:spec_decode_num_drafts": 2.0}) is None and prompt_share_copied(None) is None


def test_steps_on_fewer_threads_come_from_the_engines_counter():
    from trtspec.bench.server_counters import steps_on_fewer_threads

    delta = {'trtspec:engine_steps_on_fewer_threads{model="m",version="1"}': 40.0,
             'trtspec:engine_thread_fallbacks{model="m",version="1"}': 0.0, "trtspec:spec_decode_num_drafts": 2.0}
    assert steps_on_fewer_threads(delta) == 40
    assert steps_on_fewer_threads({"trtspec:spec_decode_num_drafts": 2.0}) == 0 and steps_on_fewer_threads(None) == 0
