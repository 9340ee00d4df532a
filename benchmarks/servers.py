"""Two Triton servers of the cpu backend, measured in one run: before/after a change, same prompts.

Each named server gets every prompt at each concurrency, speculative and (with --baseline) not,
in ABBA-interleaved blocks (trtspec.bench.load), so machine noise hits all of them alike. Prints
output tokens/s (median over repeats) per server, variant and concurrency, TPOT and TTFT, and
each server's tokens/s over the first one's (median of per-repeat ratios).

    .venv/bin/python -m benchmarks servers --server before=127.0.0.1:18611 \\
        --server after=127.0.0.1:18711 --concurrency 1 --baseline --repeats 3 --out reports/before-after.json
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path

from benchmarks.common import median_ratio


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--server", action="append", required=True, help="NAME=HOST:GRPC_PORT (two or more)")
    parser.add_argument("--concurrency", default="1")
    parser.add_argument("--max-tokens", type=int, default=64)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--num-prompts", type=int, default=0)
    parser.add_argument("--prompts", default=None, help="JSONL prompt file (default: the packaged bench set)")
    parser.add_argument("--baseline", action="store_true", help="also each server with speculation off")
    parser.add_argument("--requests-per-slot", type=int, default=2, help="requests per block / concurrency")
    parser.add_argument("--out", type=Path, default=None)
    parser.add_argument("--chat-template", default=None, metavar="MODEL_DIR",
                        help="send each prompt through this checkpoint's chat template, as trtspec bench does "
                             "(the servers read text_input as sent); default: raw")
    args = parser.parse_args()

    from trtspec.bench.load import run_variants
    from trtspec.bench.metrics import group_cells, summarize_cell
    from trtspec.bench.targets import TritonTarget
    from trtspec.client.prompting import Renderer
    from trtspec.prompts import load_prompts

    render = Renderer()
    if args.chat_template:
        from transformers import AutoTokenizer

        render = Renderer(AutoTokenizer.from_pretrained(args.chat_template), args.chat_template)
    servers = dict(entry.split("=", 1) for entry in args.server)
    variants = {}
    for name, url in servers.items():
        target = TritonTarget(url, render=render)
        variants[f"{name} speculative"] = (target, True)
        if args.baseline:
            variants[f"{name} baseline"] = (target, False)
    prompts = load_prompts(args.prompts, "bench", args.num_prompts or None)
    concurrencies = [int(c) for c in args.concurrency.split(",")]
    load_before = os.getloadavg()
    run = run_variants(variants, prompts, concurrencies, max_tokens=args.max_tokens, repeats=args.repeats,
                       requests_per_slot=args.requests_per_slot)
    load_after = os.getloadavg()
    cells = [summarize_cell(cell) for cell in group_cells(run.records, run.durations, order=list(variants))]
    by = {(c["variant"], c["max_concurrency"]): c for c in cells}
    first = next(iter(servers))
    lines = ["| server / variant | conc | out tok/s | in flight | tok/s at conc (time share) | TPOT p50 ms | TTFT p50 ms "
             "| TTFT p99 ms | over " + first + " |", "|---|---:|---:|---:|---:|---:|---:|---:|---:|"]
    rows = []
    for concurrency in concurrencies:
        for label in variants:
            cell = by[(label, concurrency)]
            kind = label.split(" ", 1)[1]
            reference = by[(f"{first} {kind}", concurrency)]
            ratio = median_ratio(cell["output_throughput_by_repeat"], reference["output_throughput_by_repeat"])
            rows.append({"variant": label, "concurrency": concurrency, "output_throughput": cell["output_throughput"],
                         "by_repeat": cell["output_throughput_by_repeat"], "median_tpot_ms": cell["median_tpot_ms"],
                         "median_ttft_ms": cell["median_ttft_ms"], "p99_ttft_ms": cell["p99_ttft_ms"],
                         "mean_requests_in_flight": cell["mean_requests_in_flight"],
                         "full_load_output_throughput": cell.get("full_load_output_throughput"),
                         "full_load_by_repeat": cell.get("full_load_output_throughput_by_repeat"),
                         "full_load_time_share": cell.get("full_load_time_share"),
                         f"over_{first}": ratio, "failed": cell["failed"]})
            lines.append(f"| {label} | {concurrency} | {cell['output_throughput']:.1f} | "
                         f"{cell['mean_requests_in_flight']:.1f} | {cell.get('full_load_output_throughput', 0):.1f} "
                         f"({cell.get('full_load_time_share', 0):.0%}) | {cell['median_tpot_ms']:.0f} | "
                         f"{cell['median_ttft_ms']:.0f} | {cell['p99_ttft_ms']:.0f} | {ratio:.2f}x |")
    lines.append(f"\nload average before {load_before[0]:.1f}, after {load_after[0]:.1f}; {len(prompts)} prompts, "
                 f"{args.max_tokens} tokens, {args.repeats} repeats")
    print("\n".join(lines))
    if args.out:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(json.dumps({"rows": rows, "servers": servers, "load_average": [load_before, load_after],
                                        "settings": vars(args) | {"out": str(args.out)}}, indent=2, default=str))
    return 0


if __name__ == "__main__":
    sys.exit(main())
