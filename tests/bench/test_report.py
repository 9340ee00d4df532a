"""Report files are written and parse back; plots are real PNGs; the load schedule interleaves."""

from __future__ import annotations

import csv
import json
import threading
import time

from trtspec.bench.load import Chunk, run_bench, schedule
from trtspec.bench.metrics import BASELINE, SPECULATIVE, RequestRecord, SpecCounts
from trtspec.bench.plots import plot_acceptance, plot_throughput
from trtspec.bench.report import assemble_report, render_table, write_reports
from trtspec.prompts import Prompt

PNG_MAGIC = b"\x89PNG\r\n\x1a\n"


def synthetic_run():
    records, durations = [], {}
    for concurrency, spec_s, base_s in ((1, 2.0, 4.0), (4, 1.0, 1.5)):
        for variant, seconds in ((SPECULATIVE, spec_s), (BASELINE, base_s)):
            durations[(variant, concurrency, 0)] = seconds
            for index, category in enumerate(["chat", "code"]):
                spec = SpecCounts(3, 12, 5, [3, 1, 1, 0]) if variant == SPECULATIVE else None
                records.append(RequestRecord(variant, concurrency, 0, index, category, [0.1, 0.3, 0.5], 6,
                                             0.6 if variant == SPECULATIVE else 1.0, prompt_tokens=12, spec=spec))
    return records, durations


def test_report_files_parse_and_table_renders(tmp_path):
    from rich.console import Console

    records, durations = synthetic_run()
    meta = {"model": "tiny", "mode": "ngram", "target": "engine", "num_prompts": 2, "repeats": 1, "max_tokens": 6}
    report = assemble_report(records, durations, meta, counters_delta={"requests": 8.0})
    paths = write_reports(tmp_path, report, [r.to_dict() for r in records])

    loaded = json.loads(paths["json"].read_text())
    assert [(r["variant"], r["max_concurrency"]) for r in loaded["results"]] == [
        (SPECULATIVE, 1), (BASELINE, 1), (SPECULATIVE, 4), (BASELINE, 4)]
    assert loaded["metadata"]["machine"]["cpu_count"] >= 1 and loaded["metadata"]["repeats"] == 1
    assert [s["output_throughput_speedup"] for s in loaded["speedup"]] == [2.0, 1.5]
    assert "spec_decode_acceptance_length" not in loaded["results"][1]          # baseline
    assert loaded["results"][0]["spec_decode_accepted_per_step_histogram"] == [0, 4, 0, 2, 0]  # per request: one step of 3, two of 1
    assert loaded["server_counters"] == {"requests": 8.0}

    with open(paths["csv"]) as handle:
        rows = list(csv.DictReader(handle))
    assert len(rows) == 4 and float(rows[0]["output_throughput"]) == 6.0     # 12 tokens / 2 s
    assert rows[1]["spec_decode_acceptance_length"] == ""                    # baseline: no spec column value
    assert float(rows[2]["output_throughput_speedup"]) == 1.5
    assert len(paths["requests"].read_text().splitlines()) == len(records)

    console = Console(record=True, width=160)
    console.print(render_table(report))
    text = console.export_text()
    assert "2.00x" in text and "1.50x" in text and "pos 0: 100%" in text


def test_a_cell_where_the_engine_stepped_on_fewer_threads_is_named():
    from rich.console import Console

    records, durations = synthetic_run()
    report = assemble_report(records, durations, {"model": "tiny"})
    console = Console(record=True, width=200)
    console.print(render_table(report))
    assert "fewer threads" not in console.export_text()
    report["results"][2]["engine_steps_on_fewer_threads"] = 30   # speculative at concurrency 4
    console = Console(record=True, width=200)
    console.print(render_table(report))
    assert "stepped on fewer threads in: 4 speculative (30 steps)" in console.export_text()


def test_plots_are_pngs(tmp_path):
    records, durations = synthetic_run()
    report = assemble_report(records, durations, {"model": "tiny"})
    throughput = plot_throughput(report["results"], report["speedup"], tmp_path / "throughput.png", "t")
    acceptance = plot_acceptance(report["results"], tmp_path / "acceptance.png", "a")
    for path in (throughput, acceptance):
        data = path.read_bytes()
        assert data[:8] == PNG_MAGIC and len(data) > 10_000
    baseline_only = [r for r in report["results"] if r["variant"] == BASELINE]
    assert plot_acceptance(baseline_only, tmp_path / "none.png", "a") is None


def test_schedule_interleaves_abba_and_covers_every_prompt_once():
    plan = schedule(5, [1, 2], repeats=2, variants=[SPECULATIVE, BASELINE])
    firsts = [variant for conc, repeat, variant, _ in plan[::2] if conc == 1]
    # conc 1: blocks of 2 prompts -> 3 blocks per repeat; who goes first alternates block by block
    assert firsts == [SPECULATIVE, BASELINE, SPECULATIVE, BASELINE, SPECULATIVE, BASELINE]
    for conc in (1, 2):
        for repeat in (0, 1):
            for variant in (SPECULATIVE, BASELINE):
                seen = [i for c, r, v, idx in plan if (c, r, v) == (conc, repeat, variant) for i in idx]
                assert sorted(seen) == [0, 1, 2, 3, 4]
    # repeat-major: repeat 0 runs both concurrencies before repeat 1 starts (scaling ratios per repeat)
    repeats = [repeat for _, repeat, *_ in plan]
    assert repeats == sorted(repeats)
    assert [conc for conc, repeat, *_ in plan if repeat == 0] == [1] * 6 + [2] * 4   # 3 blocks, then 2


def test_schedule_cycles_prompts_until_every_slot_is_busy():
    # 3 prompts at concurrency 4: 8 requests in one block (prompts 0 1 2 0 1 2 0 1), not 3
    plan = schedule(3, [4], repeats=1, variants=[SPECULATIVE])
    assert plan == [(4, 0, SPECULATIVE, list(range(8)))]
    # a larger factor: bigger blocks, every prompt still sent
    plan = schedule(10, [2], repeats=1, variants=[SPECULATIVE], requests_per_slot=4)
    assert [numbers for *_, numbers in plan] == [list(range(8)), [8, 9]]


class SleepTarget:
    """Streams `tokens` chunks, sleeping between them; records how many requests overlap. With
    `overlap`, the first request waits before its first chunk until that many are in flight (30 s
    at most): bench's threads then overlap on any machine, not only when they start within one
    short request of each other (a busy machine delays a thread's start by tens of ms)."""

    name = "sleep"

    def __init__(self, gap_s: float, overlap: int = 0):
        self.gap_s, self.in_flight, self.peak, self.lock = gap_s, 0, 0, threading.Condition()
        self.overlap = overlap
        self.sent: list[tuple[str, int]] = []

    def stream(self, prompt, *, max_tokens, speculative, temperature, seed):
        with self.lock:
            self.sent.append((prompt, seed))
            self.in_flight += 1
            self.peak = max(self.peak, self.in_flight)
            self.lock.notify_all()
            if len(self.sent) == 1 and self.overlap:
                self.lock.wait_for(lambda: self.in_flight >= self.overlap, timeout=30)
        try:
            per_chunk = 2 if speculative else 1           # speculation: two tokens per chunk
            for sent in range(0, max_tokens, per_chunk):
                time.sleep(self.gap_s)
                yield Chunk(min(per_chunk, max_tokens - sent))
            yield Chunk(0, final=True, spec=SpecCounts(1, 2, 1, [1, 0]) if speculative else None)
        finally:
            with self.lock:
                self.in_flight -= 1

    def counters(self):
        return None


def test_run_bench_caps_concurrency_and_stamps_chunks():
    prompts = [Prompt(i, f"p{i}", "chat") for i in range(4)]
    # 50 ms a chunk: a speculative block (2 waves of 2 chunks) 0.2 s shorter than a baseline one,
    # where a busy machine's thread starts and wake-ups took ~0.1 s (at 10 ms: 0.19 s vs 0.15 s, load 10)
    target = SleepTarget(0.05, overlap=2)
    run = run_bench(target, prompts, [2], max_tokens=4, baseline=True, warmup=False)
    assert target.peak == 2   # (the first request waited for a second one: never 3, the cap)
    assert len(run.records) == 8 and all(r.ok for r in run.records)
    spec = [r for r in run.records if r.variant == SPECULATIVE]
    base = [r for r in run.records if r.variant == BASELINE]
    assert all(len(r.chunk_times_s) == 2 and r.output_tokens == 4 for r in spec)
    assert all(len(r.chunk_times_s) == 4 for r in base)
    # chunk stamps rise and fall within the request
    assert all(r.chunk_times_s == sorted(r.chunk_times_s) and r.chunk_times_s[-1] <= r.e2e_s for r in run.records)
    assert run.durations[(SPECULATIVE, 2, 0)] < run.durations[(BASELINE, 2, 0)]
    # each request's send is stamped on one clock, so the report can find when every slot was busy
    sends = sorted(r.sent_s for r in base)
    assert sends[-1] - sends[0] < run.durations[(BASELINE, 2, 0)]


class BusyAtOneRead(SleepTarget):
    """Counters that rise by one step a request; the `busy_read`-th read (1-based) found the server
    still busy after bench's wait, as TritonTarget.counters says with `settled`."""

    def __init__(self, busy_read: int):
        super().__init__(0.001)
        self.reads, self.busy_read, self.settled = 0, busy_read, True

    def counters(self):
        self.reads += 1
        self.settled = self.reads != self.busy_read
        return {'trtspec:engine_steps{draft="chain:4"}': float(sum(1 for _, seed in self.sent if seed is not None))}


def test_a_cell_whose_counters_were_read_while_the_server_was_busy_says_so():
    from rich.console import Console

    prompts = [Prompt(0, "p0", "chat")]
    # reads: the run's before, then (before, after) per block: speculative, baseline; the 3rd is busy
    run = run_bench(BusyAtOneRead(busy_read=3), prompts, [1], max_tokens=2, baseline=True, warmup=False)
    report = assemble_report(run.records, run.durations, {"model": "tiny"}, run.counters_delta, run.cell_counters)
    unsettled = {r["variant"]: r.get("server_counters_unsettled_reads") for r in report["results"]}
    assert unsettled == {SPECULATIVE: 1, BASELINE: None}
    console = Console(record=True, width=300)
    console.print(render_table(report))
    text = " ".join(console.export_text().split())
    assert "still busy when bench read its counters" in text and "for: 1 speculative:" in text


def test_few_prompts_still_fill_every_slot_and_the_report_says_how_full():
    prompts = [Prompt(i, f"p{i}", "chat") for i in range(2)]
    # 50 ms a chunk, 0.3 s a request: the threads' start and wake-ups on a busy machine (tens of ms
    # each) stay a small part of the block; at 10 ms a chunk, beside an EAGLE-3 convert and two busy
    # processes, the block was 2.47 requests in flight (issue 71), and a block of 2 requests is 2 at most
    target = SleepTarget(0.05, overlap=4)          # (and the first waits for the other three)
    run = run_bench(target, prompts, [4], max_tokens=6, baseline=False, warmup=False)
    assert target.peak == 4                        # 2 prompts, yet 4 requests in flight
    assert sorted(target.sent) == [("p0", 0), ("p0", 2), ("p0", 4), ("p0", 6),
                                   ("p1", 1), ("p1", 3), ("p1", 5), ("p1", 7)]   # a seed per request
    assert {r.prompt_index for r in run.records} == {0, 1}
    cell = assemble_report(run.records, run.durations, {"model": "sleep"})["results"][0]
    # equal requests in two waves of 4: the block is never drained before its end
    assert 3.0 < cell["mean_requests_in_flight"] <= 4.0
    # the figure at full concurrency is there, over part of the wall time (tests/bench/test_full_load.py: its math)
    assert cell["full_load_output_throughput"] > 0 and 0 < cell["full_load_time_share"] <= 1
