"""Pure aggregation of benchmark timings: no clock, no I/O, no randomness.

Vocabulary (vLLM's definitions, reference/peers-and-benchmarks.md §3.1 and §5):

- TTFT: time from sending a request to its first streamed token.
- TPOT: time per output token after the first, (E2EL - TTFT) / (output_tokens - 1). This is the
  per-user speed; with speculation one chunk carries several tokens, so TPOT, not ITL, is it.
- ITL: gap between two consecutive streamed chunks of one request.
- E2EL: request latency as the client sees it.
- drafts / draft tokens / accepted tokens: per verification step the drafter proposes draft
  tokens, the target accepts a prefix of them, and one more token (the bonus or the recovered
  one) always comes from the target.
- acceptance rate: accepted / draft tokens, in percent (as vLLM's `spec_decode_acceptance_rate`).
- acceptance length (AL, tau): 1 + accepted / drafts, tokens committed per target pass.
- per-position acceptance rate: drafts whose i-th draft token was accepted / drafts.
- accepted-per-step histogram: index k counts the steps that accepted exactly k draft tokens.
- verified tokens per draft: draft tokens the target checks in one pass, a chain's k or a dynamic
  tree's nodes (a tree's draft tokens count its depth, so AL and acceptance rate stay per level).
- tokens per target pass: decode tokens / target passes, counting passes with no draft too;
  the theoretical speedup in the memory-bound regime (reference §2.3), against which the
  measured speedup is compared (`measured_over_theoretical`).

Throughput of a (variant, concurrency) cell is measured per repeat (output tokens / the wall
time that variant was running) and the median over repeats is reported; speedups are medians of
per-repeat ratios, so a noisy repeat hits speculative and baseline alike.
"""

from __future__ import annotations

import math
import re
import statistics
from collections.abc import Iterable, Sequence
from dataclasses import asdict, dataclass, field
from typing import Any

from trtspec.bench.full_load import full_load
from trtspec.bench.server_counters import (
    SPEC_PREFIX,
    prompt_share_copied,
    steps_by_draft,
    steps_on_fewer_threads,
    unsettled_reads,
)

SPECULATIVE = "speculative"
BASELINE = "baseline"
PERCENTILES = (50, 90, 99)


@dataclass
class SpecCounts:
    """Speculative-decoding counters of one request (or a sum of requests)."""

    num_drafts: int = 0
    num_draft_tokens: int = 0
    num_accepted_tokens: int = 0
    # accepted_per_position[i]: drafts whose (i+1)-th draft token was accepted; None when the
    # source (for example a Triton response) does not report positions.
    accepted_per_position: list[int] | None = None
    fallback: bool = False
    # draft tokens the target verified: a chain's k, a tree's nodes (0: not reported)
    num_verified_tokens: int = 0

    def add(self, other: SpecCounts) -> SpecCounts:
        """The sum of two counters (positions padded to the longer list)."""
        positions = None
        if self.accepted_per_position is not None or other.accepted_per_position is not None:
            mine, theirs = self.accepted_per_position or [], other.accepted_per_position or []
            size = max(len(mine), len(theirs))
            positions = [(mine[i] if i < len(mine) else 0) + (theirs[i] if i < len(theirs) else 0)
                         for i in range(size)]
        return SpecCounts(self.num_drafts + other.num_drafts, self.num_draft_tokens + other.num_draft_tokens,
                          self.num_accepted_tokens + other.num_accepted_tokens, positions,
                          self.fallback or other.fallback, self.num_verified_tokens + other.num_verified_tokens)


@dataclass
class RequestRecord:
    """What the load generator saw of one request. Times are seconds from sending it."""

    variant: str                      # "speculative" | "baseline"
    concurrency: int
    repeat: int
    prompt_index: int
    category: str
    chunk_times_s: list[float]        # arrival of each streamed chunk that carried text
    output_tokens: int
    e2e_s: float
    prompt_tokens: int | None = None
    spec: SpecCounts | None = None
    error: str | None = None
    sent_s: float | None = None       # when it was sent, on the load generator's clock (full_load.py)

    @property
    def ok(self) -> bool:
        return self.error is None and self.output_tokens > 0 and bool(self.chunk_times_s)

    @property
    def ttft_s(self) -> float:
        return self.chunk_times_s[0]

    @property
    def tpot_s(self) -> float | None:
        """None for a one-token answer (TPOT is undefined there; vLLM skips it too)."""
        if self.output_tokens < 2:
            return None
        return (self.e2e_s - self.ttft_s) / (self.output_tokens - 1)

    @property
    def itls_s(self) -> list[float]:
        times = self.chunk_times_s
        return [later - earlier for earlier, later in zip(times, times[1:], strict=False)]

    def to_dict(self) -> dict[str, Any]:
        data = asdict(self)
        data.update(ttft_s=self.ttft_s if self.ok else None, tpot_s=self.tpot_s if self.ok else None)
        return data


def percentile(values: Sequence[float], q: float) -> float:
    """The q-th percentile with linear interpolation between closest ranks (numpy's default)."""
    if not values:
        return math.nan
    ordered = sorted(values)
    rank = (len(ordered) - 1) * q / 100.0
    low = math.floor(rank)
    high = min(low + 1, len(ordered) - 1)
    return ordered[low] + (ordered[high] - ordered[low]) * (rank - low)


def describe_ms(name: str, values_s: Sequence[float]) -> dict[str, float]:
    """mean/median/std/p90/p99 of a latency metric, in milliseconds, under vLLM's key names."""
    values = [v * 1000.0 for v in values_s]
    out = {f"mean_{name}_ms": statistics.fmean(values) if values else math.nan,
           f"median_{name}_ms": percentile(values, 50),
           f"std_{name}_ms": statistics.pstdev(values) if values else math.nan}
    for q in PERCENTILES:
        if q != 50:
            out[f"p{q}_{name}_ms"] = percentile(values, q)
    return out


def accepted_histogram(counts: SpecCounts) -> list[int] | None:
    """Steps that accepted exactly k draft tokens, k = 0..len(positions).

    Acceptance is a prefix, so "accepted at position i" means "accepted at least i+1 tokens";
    the histogram is the difference of neighbouring positions.
    """
    positions = counts.accepted_per_position
    if positions is None or counts.num_drafts == 0:
        return None
    at_least = [counts.num_drafts] + list(positions) + [0]
    return [at_least[k] - at_least[k + 1] for k in range(len(positions) + 1)]


def spec_summary(counts: SpecCounts) -> dict[str, Any]:
    """The spec-decode section of a result, keys as vLLM's `bench serve` JSON."""
    drafts, drafted, accepted = counts.num_drafts, counts.num_draft_tokens, counts.num_accepted_tokens
    positions = counts.accepted_per_position
    return {
        "spec_decode_num_drafts": drafts,
        "spec_decode_draft_tokens": drafted,
        "spec_decode_accepted_tokens": accepted,
        "spec_decode_acceptance_rate": 100.0 * accepted / drafted if drafted else math.nan,
        "spec_decode_acceptance_length": 1.0 + accepted / drafts if drafts else math.nan,
        "spec_decode_per_position_acceptance_rates": (
            [p / drafts for p in positions] if positions is not None and drafts else None),
        "spec_decode_accepted_per_step_histogram": accepted_histogram(counts),
        # nodes the target checks per draft: k for a chain, the node count for a tree (its depth is
        # what draft_tokens counts); NaN where the source does not report it (Triton responses)
        "spec_decode_verified_tokens_per_draft": (
            counts.num_verified_tokens / drafts if drafts and counts.num_verified_tokens else math.nan),
    }


def sum_counts(records: Iterable[RequestRecord]) -> SpecCounts | None:
    total = None
    for record in records:
        if record.spec is not None:
            total = record.spec if total is None else total.add(record.spec)
    return total


COUNTER_PREFIX = SPEC_PREFIX  # the cpu model's names; other servers' counters are renamed to them
_POSITION = re.compile(r'position="(\d+)"')


def _metric_sum(samples: dict[str, float], name: str) -> float | None:
    values = [v for k, v in samples.items() if k == name or k.startswith(name + "{")]
    return sum(values) if values else None


def spec_counts_from_counters(delta: dict[str, float] | None) -> SpecCounts | None:
    """SpecCounts from diffed counters named like the cpu model's Prometheus metrics
    (`trtspec:spec_decode_num_drafts`, ..., `..._num_accepted_tokens_per_pos{position="i"}`)."""
    if not delta:
        return None
    drafts = _metric_sum(delta, COUNTER_PREFIX + "num_drafts")
    drafted = _metric_sum(delta, COUNTER_PREFIX + "num_draft_tokens")
    accepted = _metric_sum(delta, COUNTER_PREFIX + "num_accepted_tokens")
    if drafts is None or drafted is None or accepted is None:
        return None
    by_position: dict[int, float] = {}
    for key, value in delta.items():
        if key.startswith(COUNTER_PREFIX + "num_accepted_tokens_per_pos") and (match := _POSITION.search(key)):
            by_position[int(match[1])] = by_position.get(int(match[1]), 0) + value
    positions = [int(by_position.get(i, 0)) for i in range(max(by_position) + 1)] if by_position else None
    return SpecCounts(int(drafts), int(drafted), int(accepted), positions)


@dataclass
class Cell:
    """One (variant, concurrency) of a run: its records, each repeat's wall time, and the
    counters the target accumulated while this cell's blocks ran (None when it has none)."""

    variant: str
    concurrency: int
    records: list[RequestRecord] = field(default_factory=list)
    duration_by_repeat: dict[int, float] = field(default_factory=dict)
    counters: dict[str, float] | None = None


def group_cells(records: Iterable[RequestRecord], durations: dict[tuple[str, int, int], float],
                counters: dict[tuple[str, int], dict[str, float]] | None = None,
                order: Sequence[str] = (SPECULATIVE, BASELINE)) -> list[Cell]:
    """Cells by concurrency, then variants in `order` (others after, by name).
    durations: (variant, conc, repeat) -> s; counters: (variant, conc) -> counter deltas."""
    cells: dict[tuple[str, int], Cell] = {}
    for (variant, concurrency, repeat), seconds in durations.items():
        cells.setdefault((variant, concurrency), Cell(variant, concurrency)).duration_by_repeat[repeat] = seconds
    for key, delta in (counters or {}).items():
        if key in cells:
            cells[key].counters = delta
    for record in records:
        cells.setdefault((record.variant, record.concurrency), Cell(record.variant, record.concurrency)
                         ).records.append(record)
    rank = {variant: i for i, variant in enumerate(order)}
    return sorted(cells.values(), key=lambda c: (c.concurrency, rank.get(c.variant, len(rank)), c.variant))


def summarize_cell(cell: Cell) -> dict[str, Any]:
    """Aggregates of one cell: counts, throughput (median over repeats), latency stats, spec stats."""
    ok = [r for r in cell.records if r.ok]
    tokens_by_repeat: dict[int, int] = {}
    requests_by_repeat: dict[int, int] = {}
    busy_by_repeat: dict[int, float] = {}
    for record in ok:
        tokens_by_repeat[record.repeat] = tokens_by_repeat.get(record.repeat, 0) + record.output_tokens
        requests_by_repeat[record.repeat] = requests_by_repeat.get(record.repeat, 0) + 1
    for record in cell.records:
        busy_by_repeat[record.repeat] = busy_by_repeat.get(record.repeat, 0.0) + record.e2e_s
    repeats = sorted(cell.duration_by_repeat)
    tok_s = [tokens_by_repeat.get(r, 0) / cell.duration_by_repeat[r] for r in repeats if cell.duration_by_repeat[r] > 0]
    req_s = [requests_by_repeat.get(r, 0) / cell.duration_by_repeat[r] for r in repeats
             if cell.duration_by_repeat[r] > 0]
    # request-seconds per second of wall time: below the concurrency where blocks drain at their end
    in_flight = [busy_by_repeat.get(r, 0.0) / cell.duration_by_repeat[r] for r in repeats
                 if cell.duration_by_repeat[r] > 0]
    result: dict[str, Any] = {
        "variant": cell.variant,
        "max_concurrency": cell.concurrency,
        "repeats": len(repeats),
        "completed": len(ok),
        "failed": len(cell.records) - len(ok),
        "errors": sorted({r.error for r in cell.records if r.error})[:5],
        "duration": sum(cell.duration_by_repeat.values()),
        "total_input_tokens": sum(r.prompt_tokens or 0 for r in ok),
        "total_output_tokens": sum(r.output_tokens for r in ok),
        "request_throughput": statistics.median(req_s) if req_s else math.nan,
        "output_throughput": statistics.median(tok_s) if tok_s else math.nan,
        "output_throughput_by_repeat": tok_s,
        "mean_requests_in_flight": statistics.median(in_flight) if in_flight else math.nan,
    }
    result.update(full_load(cell.records, cell.concurrency, cell.duration_by_repeat))
    result.update(describe_ms("ttft", [r.ttft_s for r in ok]))
    result.update(describe_ms("tpot", [t for r in ok if (t := r.tpot_s) is not None]))
    result.update(describe_ms("itl", [gap for r in ok for gap in r.itls_s]))
    result.update(describe_ms("e2el", [r.e2e_s for r in ok]))
    if (steps := steps_by_draft(cell.counters)) is not None:
        result["engine_steps_by_draft"] = steps  # what the load policy chose, step by step
    if (copied := prompt_share_copied(cell.counters)) is not None:
        result["prefix_cache_hit_rate"] = copied
    if fewer := steps_on_fewer_threads(cell.counters):
        result["engine_steps_on_fewer_threads"] = fewer
    if unsettled := unsettled_reads(cell.counters):
        result["server_counters_unsettled_reads"] = unsettled  # read while busy: steps may be a neighbour's
    counts, server, source = sum_counts(ok), spec_counts_from_counters(cell.counters), "responses"
    if counts is None and cell.variant == SPECULATIVE and server is not None and server.num_drafts:
        counts, source = server, "server counters"  # answers that count nothing (OpenAI without usage details)
    elif counts is not None and counts.accepted_per_position is None and server:
        counts, source = server, "server counters"  # responses carry no positions; the server does
    if counts is not None:
        result.update(spec_summary(counts))
        result["spec_decode_source"] = source
        # Each request's first token comes from the prefill; every later target pass commits its
        # accepted drafts + 1, so passes = tokens - requests - accepted. Unlike AL this counts the
        # passes that had no draft (n-gram found no match), so it is the memory-bound ceiling.
        decode_tokens = result["total_output_tokens"] - result["completed"]
        passes = decode_tokens - counts.num_accepted_tokens
        result["tokens_per_target_pass"] = decode_tokens / passes if passes > 0 else math.nan
        result["spec_decode_fallback_requests"] = sum(1 for r in ok if r.spec and r.spec.fallback)
    return result


def speedups(summaries: Sequence[dict[str, Any]], numerator: str = SPECULATIVE,
             denominator: str = BASELINE) -> list[dict[str, Any]]:
    """`numerator` over `denominator` per concurrency (speculative over baseline unless told):
    tokens/s (median of per-repeat ratios), TPOT, E2EL, and the acceptance-length ceiling."""
    by_key = {(s["variant"], s["max_concurrency"]): s for s in summaries}
    out = []
    for concurrency in sorted({s["max_concurrency"] for s in summaries}):
        spec, base = by_key.get((numerator, concurrency)), by_key.get((denominator, concurrency))
        if not spec or not base:
            continue
        ratios = [a / b for a, b in zip(spec["output_throughput_by_repeat"], base["output_throughput_by_repeat"],
                                        strict=False) if b > 0]
        row = {"max_concurrency": concurrency,
               "output_throughput_speedup": statistics.median(ratios) if ratios else math.nan,
               "output_throughput_speedup_by_repeat": ratios,
               "tpot_speedup": ratio(base["mean_tpot_ms"], spec["mean_tpot_ms"]),
               "e2el_speedup": ratio(base["mean_e2el_ms"], spec["mean_e2el_ms"]),
               "ttft_ratio": ratio(spec["mean_ttft_ms"], base["mean_ttft_ms"])}
        # The memory-bound ceiling: if verifying a draft cost one plain decode step and drafting
        # were free, the speedup would equal the tokens each target pass commits.
        # Only against a non-speculative denominator (not, e.g., triton over in-process).
        ceiling = spec.get("tokens_per_target_pass", math.nan) if "tokens_per_target_pass" not in base else math.nan
        row["theoretical_speedup"] = ceiling
        row["measured_over_theoretical"] = ratio(row["output_throughput_speedup"], ceiling)
        out.append(row)
    return out


def leviathan_speedup(alpha: float, gamma: int, cost_ratio: float) -> float:
    """Expected walltime improvement, Leviathan et al. 2023 Theorem 3.8:
    (1 - alpha^(gamma+1)) / ((1 - alpha) (gamma c + 1)), alpha = per-token acceptance rate,
    gamma = draft tokens per step, c = drafting cost relative to one target step."""
    if alpha >= 1.0:
        return (gamma + 1) / (gamma * cost_ratio + 1)
    return (1 - alpha ** (gamma + 1)) / ((1 - alpha) * (gamma * cost_ratio + 1))


def ratio(numerator: float, denominator: float) -> float:
    if not denominator or math.isnan(denominator) or math.isnan(numerator):
        return math.nan
    return numerator / denominator
