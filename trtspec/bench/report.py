"""Bench reports: a rich table on the terminal, bench.json, bench.csv and requests.jsonl.

bench.json mirrors `vllm bench serve --save-result`: one result per (variant, concurrency) with
`request_throughput`, `output_throughput`, `{mean,median,std,p90,p99}_{ttft,tpot,itl,e2el}_ms`
and the `spec_decode_*` section, plus trtspec's `speedup` and `by_category` tables and a
`metadata` block that names the machine, the date and the repeats (ratios, not absolutes: a
figure without its machine means nothing). This module formats; it computes nothing new.
"""

from __future__ import annotations

import csv
import json
import math
import os
import platform
import sys
import time
from pathlib import Path
from typing import Any, Literal

from trtspec import __version__
from trtspec.bench.metrics import (
    BASELINE,
    SPECULATIVE,
    RequestRecord,
    group_cells,
    spec_counts_from_counters,
    speedups,
    sum_counts,
    summarize_cell,
)
from trtspec.bench.scaling import scaling
from trtspec.bench.server_counters import Phase, phases_add_up
from trtspec.bench.table_rows import by_category, disagreement

BENCH_JSON = "bench.json"
BENCH_CSV = "bench.csv"
REQUESTS_JSONL = "requests.jsonl"


def machine_metadata() -> dict[str, Any]:
    """Where and when the figures were taken."""
    cpu = platform.processor() or platform.machine()
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    try:
        memory_gib = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") / 2**30
    except (ValueError, OSError, AttributeError):
        memory_gib = None
    try:
        load = os.getloadavg()
    except OSError:
        load = None
    torch = sys.modules.get("torch")  # only if this run loaded it (in-process engine): no import cost
    return {"hostname": platform.node(), "cpu": cpu, "cpu_count": os.cpu_count(),
            "omp_num_threads": os.environ.get("OMP_NUM_THREADS"),
            "omp_wait_policy": os.environ.get("OMP_WAIT_POLICY"),
            "torch_threads": torch.get_num_threads() if torch is not None else None,
            "memory_gib": round(memory_gib, 1) if memory_gib else None, "load_average": load,
            "python": platform.python_version(), "platform": platform.platform(),
            "date": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()), "trtspec_version": __version__}


def assemble_report(records: list[RequestRecord], durations: dict[tuple[str, int, int], float],
                    metadata: dict[str, Any], counters_delta: dict[str, float] | None = None,
                    cell_counters: dict[tuple[str, int], dict[str, float]] | None = None,
                    ratio: tuple[str, str] = (SPECULATIVE, BASELINE), phases: list[Phase] | None = None,
                    prompt_lengths: Any = None) -> dict[str, Any]:
    """bench.json's content: metadata, results per cell, `ratio[0]` over `ratio[1]` per concurrency
    (key `speedup`), categories, server counters; with `phases` (trtspec.bench.phases) each phase's
    counters, whether they add up to the run's, the answers' usage against the counters, and how each
    prompt's length was had (`prompt_lengths`, trtspec.bench.phases.PromptLengths)."""
    results = [summarize_cell(cell) for cell in group_cells(records, durations, cell_counters, order=ratio)]
    return {"metadata": {**metadata, "machine": metadata.get("machine") or machine_metadata()},
            "results": results, "ratio": {"numerator": ratio[0], "denominator": ratio[1]},
            "speedup": speedups(results, *ratio), "scaling": scaling(results),
            "by_category": by_category(records, *ratio, phases=phases),
            **context_sections(records, metadata, ratio, phases),
            "server_counters": counters_delta,
            **phase_sections(records, phases, counters_delta, ratio[0], prompt_lengths)}


def phase_sections(records: list[RequestRecord], phases: list[Phase] | None, total: dict[str, float] | None,
                   numerator: str, prompt_lengths: Any = None) -> dict[str, Any]:
    """`phases`, `phases_add_up`, `acceptance_cross_check` (the answers' usage summed against the
    run's counter delta) and `prompt_lengths` for a phased run; {} otherwise."""
    if not phases:
        return {}
    answers = sum_counts(r for r in records if r.ok and r.variant == numerator)
    counters = spec_counts_from_counters(total)
    check = {"answers_accepted_tokens": answers.num_accepted_tokens if answers else None,
             "answers_draft_tokens": answers.num_draft_tokens if answers else None,
             "counters_accepted_tokens": counters.num_accepted_tokens if counters else None,
             "counters_draft_tokens": counters.num_draft_tokens if counters else None,
             "disagreement": disagreement(answers, counters)}
    return {"phases": [phase.to_dict() for phase in phases], "phases_add_up": phases_add_up(phases, total),
            "acceptance_cross_check": check,
            **({"prompt_lengths": prompt_lengths.checked(records)} if prompt_lengths is not None else {})}


def context_sections(records: list[RequestRecord], metadata: dict[str, Any], ratio: tuple[str, str],
                     phases: list[Phase] | None = None) -> dict[str, Any]:
    """`by_context_length` (trtspec.bench.context_buckets) and, with an EAGLE-3 head, `head_context`."""
    from trtspec.bench.context_buckets import by_context_length, head_context

    section = by_context_length(records, metadata.get("max_seq_len"), *ratio, phases=phases)
    longest = max((r.prompt_tokens or 0 for r in records), default=0)
    head = head_context({"max_position_embeddings": metadata.get("head_max_position_embeddings")}, longest,
                        metadata.get("max_seq_len"))
    return {"by_context_length": section, **({"head_context": head} if head else {})}


def clean_json(value: Any) -> Any:
    """NaN -> None so bench.json is strict JSON (json.loads in any language reads it)."""
    if isinstance(value, float) and math.isnan(value):
        return None
    if isinstance(value, dict):
        return {k: clean_json(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [clean_json(v) for v in value]
    return value


def write_reports(out_dir: Path, report: dict[str, Any], requests: list[dict[str, Any]]) -> dict[str, Path]:
    """Write bench.json, bench.csv (one row per result, scalar columns) and requests.jsonl."""
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    paths = {"json": out_dir / BENCH_JSON, "csv": out_dir / BENCH_CSV, "requests": out_dir / REQUESTS_JSONL}
    paths["json"].write_text(json.dumps(clean_json(report), indent=2, allow_nan=False) + "\n")
    speedup = {row["max_concurrency"]: row for row in report.get("speedup", [])}
    rows = []
    for result in report["results"]:
        row = {k: v for k, v in result.items() if not isinstance(v, list | dict)}
        extra = speedup.get(result["max_concurrency"], {})
        row["output_throughput_speedup"] = extra.get("output_throughput_speedup")
        rows.append(clean_json(row))
    columns: list[str] = []
    for row in rows:
        columns.extend(k for k in row if k not in columns)
    with open(paths["csv"], "w", newline="") as handle:
        writer = csv.DictWriter(handle, fieldnames=columns)
        writer.writeheader()
        writer.writerows(rows)
    with open(paths["requests"], "w") as handle:
        for record in requests:
            handle.write(json.dumps(clean_json(record), allow_nan=False) + "\n")
    return paths


def _fmt(value: Any, digits: int = 1, suffix: str = "") -> str:
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return "-"
    return f"{value:.{digits}f}{suffix}"


def render_table(report: dict[str, Any]):
    """A rich renderable: one row per (concurrency, variant), then speedups and acceptance."""
    from rich.console import Group
    from rich.table import Table

    meta = report["metadata"]
    dtype = f", {meta['dtype']}" if meta.get("dtype", "float32") != "float32" else ""
    title = (f"trtspec bench: {meta.get('model')} ({meta.get('mode')}{dtype}) via {meta.get('target')}, "
             f"{meta.get('num_prompts')} prompts x {meta.get('repeats')} repeats, "
             f"max_tokens {meta.get('max_tokens')}")
    machine = meta["machine"]
    threads = f", OMP_NUM_THREADS={machine['omp_num_threads']}" if machine.get("omp_num_threads") else ""
    table = Table(title=title, caption=f"{machine['cpu']} x{machine['cpu_count']}{threads}, {machine['date']}; "
                                       f"latencies in ms, mean / p99")
    columns: list[tuple[str, Literal["left", "right"]]] = [
        ("conc", "right"), ("variant", "left"), ("ok", "right"), ("out tok/s", "right"),
        ("req/s", "right"), ("in flight", "right"), ("tok/s all in flight", "right"), ("TTFT", "right"),
        ("TPOT", "right"), ("ITL", "right"),
        ("E2EL", "right"), ("AL", "right"), ("accept %", "right"), ("verified/draft", "right")]
    for name, justify in columns:
        table.add_column(name, justify=justify)
    for r in report["results"]:
        table.add_row(str(r["max_concurrency"]), r["variant"], f"{r['completed']}/{r['completed'] + r['failed']}",
                      _fmt(r["output_throughput"]), _fmt(r["request_throughput"], 2),
                      _fmt(r.get("mean_requests_in_flight"), 1), _fmt(r.get("full_load_output_throughput")),
                      *[f"{_fmt(r[f'mean_{m}_ms'], 0)} / {_fmt(r[f'p99_{m}_ms'], 0)}"
                        for m in ("ttft", "tpot", "itl", "e2el")],
                      _fmt(r.get("spec_decode_acceptance_length"), 2), _fmt(r.get("spec_decode_acceptance_rate")),
                      _fmt(r.get("spec_decode_verified_tokens_per_draft"), 1))
    parts: list[Any] = [table]
    if report.get("speedup"):
        ratio = report.get("ratio") or {"numerator": SPECULATIVE, "denominator": BASELINE}
        speed = Table(title=f"{ratio['numerator']} / {ratio['denominator']} (same run, interleaved)")
        for name in ("conc", "tokens/s speedup", "per repeat", "TPOT speedup", "E2EL speedup",
                     "tokens/pass (ceiling)", "measured / ceiling"):
            speed.add_column(name, justify="right")
        for s in report["speedup"]:
            speed.add_row(str(s["max_concurrency"]), _fmt(s["output_throughput_speedup"], 2, "x"),
                          " ".join(_fmt(x, 2) for x in s["output_throughput_speedup_by_repeat"]),
                          _fmt(s["tpot_speedup"], 2, "x"), _fmt(s["e2el_speedup"], 2, "x"),
                          _fmt(s["theoretical_speedup"], 2), _fmt(s["measured_over_theoretical"], 2))
        parts.append(speed)
    if report.get("by_category"):
        ratio = report.get("ratio") or {"numerator": SPECULATIVE, "denominator": BASELINE}
        top, bottom = ratio["numerator"], ratio["denominator"]
        from trtspec.bench.context_buckets import positions_text

        cats = Table(title="by prompt category (per-user tokens/s = output tokens / E2E latency)")
        for name in ("conc", "category", f"{top} tok/s", f"{bottom} tok/s", "ratio", "AL", "accept %",
                     "accept % by position"):
            cats.add_column(name, justify="right")
        for c in report["by_category"]:
            cats.add_row(str(c["max_concurrency"]), c["category"], _fmt(c.get(f"{top}_user_tokens_per_s")),
                         _fmt(c.get(f"{bottom}_user_tokens_per_s")), _fmt(c.get("speedup"), 2, "x"),
                         _fmt(c.get("spec_decode_acceptance_length"), 2), _fmt(c.get("spec_decode_acceptance_rate")),
                         positions_text(c.get("spec_decode_per_position_acceptance_rates")))
        parts.append(cats)
    if (context := report.get("by_context_length")) and context.get("rows"):
        parts.append(_context_table(context, report.get("ratio") or {"numerator": SPECULATIVE, "denominator": BASELINE}))
    if warning := (report.get("head_context") or {}).get("warning"):
        parts.append(f"warning: {warning}")
    parts.extend(_phase_lines(report))
    rows = report.get("scaling") or []
    for variant in dict.fromkeys(row["variant"] for row in rows):
        mine = [row for row in rows if row["variant"] == variant]
        parts.append(f"{variant} tokens/s over concurrency {mine[0]['over_concurrency']} (median of per-repeat ratios): "
                     + ", ".join(f"{row['max_concurrency']}: {_fmt(row['output_throughput_scaling'], 2, 'x')}"
                                 for row in mine))
    for r in report["results"]:
        rates = r.get("spec_decode_per_position_acceptance_rates")
        if rates:
            positions = "  ".join(f"pos {i}: {100 * x:.0f}%" for i, x in enumerate(rates))
            who = "" if r["variant"] == SPECULATIVE else f" {r['variant']}"
            parts.append(f"conc {r['max_concurrency']}{who} acceptance per position: {positions}")
    for r in report["results"]:
        if steps := r.get("engine_steps_by_draft"):
            total = sum(steps.values())
            shares = ", ".join(f"{label} {100 * count / total:.0f}%" for label, count in steps.items())
            parts.append(f"conc {r['max_concurrency']} {r['variant']} load policy per step with speculating sequences ({total} steps): "
                         f"{shares}")
    copied = [f"{r['max_concurrency']} {r['variant']} {100 * r['prefix_cache_hit_rate']:.0f}%"
              for r in report["results"] if r.get("prefix_cache_hit_rate") is not None]
    if copied:
        from trtspec.runtime.cache.prefix_reuse import BLOCK

        parts.append("prompt tokens copied from kept prompts or the shared chat start, not prefilled: "
                     + ", ".join(copied) + f" (a prompt is prefilled by whichever cell meets it first, and one "
                     f"under {BLOCK} tokens past the chat start is never kept)")
    contended = [f"{r['max_concurrency']} {r['variant']} ({r['engine_steps_on_fewer_threads']} steps)"
                 for r in report["results"] if r.get("engine_steps_on_fewer_threads")]
    if contended:
        parts.append("other processes computed on the engine's cores and it stepped on fewer threads in: "
                     + ", ".join(contended) + ": those figures are not the engine's alone")
    unsettled = [f"{r['max_concurrency']} {r['variant']}" for r in report["results"]
                 if r.get("server_counters_unsettled_reads")]
    if unsettled:
        parts.append("the server was still busy when bench read its counters (another client, or an idle report "
                     "late on a loaded machine) for: " + ", ".join(unsettled)
                     + ": those cells' load-policy steps may belong to their neighbours")
    if profile := meta.get("head_profile"):  # what convert measured for this head (speculation_profile.json)
        from trtspec.convert.eagle3.profile import summary_lines

        parts.extend(summary_lines(profile))
    if report.get("server_counters"):
        parts.append(f"server counters (after - before): {len(report['server_counters'])} keys in bench.json")
    elif (metrics_url := report.get("metadata", {}).get("metrics_url")):
        parts.append(f"server counters: none read from {metrics_url} (pass --metrics-url), so the load policy's "
                     "steps, acceptance per position and the engine's thread fallbacks are missing here")
    return Group(*parts)


def _phase_lines(report: dict[str, Any]) -> list[str]:
    """What a phased run (trtspec.bench.phases) says of its acceptance by category and context length."""
    if not report.get("phases"):
        return []
    adds_up = {True: "they add up to the run's", False: "they do NOT add up to the run's (another client, or a "
               "read while the server was busy): the rows may hold a neighbour's drafts", None: "no run total to check"}
    lengths = report.get("prompt_lengths") or {"probe": True}
    how = ("A one-token probe of every prompt came first (its length; no tokenizer for the model here): a server "
           "that keeps prompts served even the first cell's from cache" if lengths.get("probe") else
           f"Prompt lengths {lengths.get('source')}: no probe request, the first cell's prompts as cold as in a run "
           "without phases")
    lines = [f"acceptance by category and context length: each of {len(report['phases'])} (category, bucket) phases "
             f"run alone, its counters diffed; {adds_up[report.get('phases_add_up')]}. {how}"]
    if lengths.get("num_differ_from_server"):
        first = lengths["differ_from_server"][0]
        lines.append(f"warning: {lengths['num_differ_from_server']} of {lengths.get('checked_against_server')} prompts "
                     f"counted other than the server's prompt_tokens (prompt {first['prompt_index']}: {first['counted']} "
                     f"here, {first['server']} there): their context-length buckets may be wrong")
    check = report.get("acceptance_cross_check") or {}
    if check.get("disagreement"):
        lines.append(f"warning: over the run, {check['disagreement']}")
    for key, name in (("by_category", "category"), ("by_context_length", "bucket")):
        section = report.get(key) or []
        for row in section["rows"] if isinstance(section, dict) else section:
            if row.get("acceptance_disagreement"):
                lines.append(f"warning: conc {row['max_concurrency']} {name} {row[name]}: {row['acceptance_disagreement']}")
    return lines


def _context_table(context: dict[str, Any], ratio: dict[str, str]):
    from rich.table import Table

    from trtspec.bench.context_buckets import table_rows

    top, bottom = ratio["numerator"], ratio["denominator"]
    table = Table(title=f"by context length (prompt tokens; buckets up to max_seq_len {context.get('max_seq_len')})")
    for name in ("conc", "prompt tokens", "requests", "mean prompt", f"{top} tok/s", f"{bottom} tok/s", "ratio", "AL",
                 "accept %", "accept % by position"):
        table.add_column(name, justify="right")
    for row in table_rows(context, top, bottom):
        table.add_row(*row)
    return table
