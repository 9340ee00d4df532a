"""A per-step prompt budget (build.max_prefill_tokens) against none, paired in one process: TTFT
p50 and tokens/s of SmolLM2, plain and n-gram, at each concurrency.

One engine's weights, one variant per budget (`Engine.variant`, its own scheduler and cache; kept
prompts off, `kv_cache_reuse_mib` 0, so every repeat prefills its prompts; the chat template's
shared start is still copied, as served). Closed loops (benchmarks.batching.closed_loop): at
concurrency c, c requests in flight, a new one as soon as one ends. Within each repeat every
(mode, budget) cell runs once, in an order rotated per repeat; the 1-minute load average is read
before each cell. Prints per mode and concurrency the median over repeats of tokens/s and of the
repeat's TTFT p50, and each budget's ratio to no budget, the median of per-repeat ratios; outputs
are compared token for token with no budget's.

    .venv/bin/python -m benchmarks prefill-budget --budgets 256,512 --concurrency 1,8 \\
        --requests 8,16 --max-tokens 64 --repeats 3 --out reports/prefill-budget.json
    .venv/bin/python -m benchmarks prefill-budget --join 20 --budgets 256,512 --concurrency 8,1 \
        --requests 8,3 --max-tokens 48 --repeats 3 --threads 1      # ~530-token prompts
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
from pathlib import Path

from benchmarks.batching import closed_loop, trtspec_contender
from benchmarks.common import dev_rows, median_ratio, percentile, smollm2


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--budgets", default="256,512", help="max_prefill_tokens values beside none")
    parser.add_argument("--concurrency", default="1,8")
    parser.add_argument("--requests", default="8,16", help="dev prompts run per concurrency (the first N)")
    parser.add_argument("--prompts", default=None, help="JSONL prompt file (default: the packaged dev prompts)")
    parser.add_argument("--join", type=int, default=0,
                        help="long prompts: prompt i asks to summarize dev prompts 3i .. 3i+N-1 (cycled), one per paragraph")
    parser.add_argument("--modes", default="plain,ngram")
    parser.add_argument("--max-tokens", type=int, default=64)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--threads", type=int, default=0,
                        help="torch threads, held (adapt_threads off); 0: the engine's own count, adapting to load")
    parser.add_argument("--no-prompt-reuse", action="store_true",
                        help="kv_cache_reuse off: the chat template's shared start is prefilled too")
    parser.add_argument("--out", type=Path, default=None)
    args = parser.parse_args()

    import torch

    from trtspec.prompts import load_prompts
    from trtspec.runtime import Engine

    if args.threads:
        torch.set_num_threads(args.threads)

    budgets: list[int | None] = [None, *(int(b) for b in args.budgets.split(",") if b)]
    concurrencies = [int(c) for c in args.concurrency.split(",")]
    requests = dict(zip(concurrencies, (int(n) for n in args.requests.split(",")), strict=True))
    modes = args.modes.split(",")
    base = Engine.from_checkpoints(smollm2(), mode="ngram", max_draft_len=4, ngram_min=2, ngram_max=3,
                                   kv_cache_reuse=not args.no_prompt_reuse, kv_cache_reuse_mib=0,
                                   adapt_threads=not args.threads)
    engines = {b: base.variant(max_prefill_tokens=b) for b in budgets}
    count = max(requests.values())
    if args.prompts:
        texts = [p.text for p in load_prompts(args.prompts, limit=count)]
    elif args.join:
        rows = [row["prompt"] for row in dev_rows()]
        texts = ["Summarize the following requests in one paragraph:\n\n"
                 + "\n\n".join(rows[(3 * i + j) % len(rows)] for j in range(args.join)) for i in range(count)]
    else:
        texts = [row["prompt"] for row in dev_rows(limit=count)]
    prompts = [base.encode(text) for text in texts]
    cells = [(mode, b) for mode in modes for b in budgets]
    max_prefill = [0]  # the most prompt rows one step of the running cell prefilled

    def on_step(stats) -> None:
        max_prefill[0] = max(max_prefill[0], stats.last_prefill_tokens)

    for engine in engines.values():
        engine.scheduler.on_step = on_step
    results: dict[str, list[dict]] = {}
    try:
        for engine in engines.values():  # warm-up: lazy init, allocator growth, kernel choice
            closed_loop(trtspec_contender(engine, 8, True), prompts[:2], 2)
        for concurrency in concurrencies:
            for repeat in range(args.repeats):
                shift = repeat % len(cells)
                for mode, budget in cells[shift:] + cells[:shift]:
                    load, max_prefill[0] = os.getloadavg()[0], 0
                    run_one = trtspec_contender(engines[budget], args.max_tokens, mode != "plain")
                    seconds, records = closed_loop(run_one, prompts[:requests[concurrency]], concurrency)
                    records.sort(key=lambda r: r["prompt"])
                    cell = {"repeat": repeat, "load": load, "seconds": seconds,
                            "tokens_per_s": sum(r["tokens"] for r in records) / seconds,
                            "ttft_p50_ms": 1000 * percentile([r["ttft_s"] for r in records], 50),
                            "token_ids": [r["token_ids"] for r in records]}
                    cell["prefill_tokens_max"] = max_prefill[0]
                    results.setdefault(f"{mode} c={concurrency} budget={budget}", []).append(cell)
                    print(f"c={concurrency} repeat {repeat} {mode} budget {budget}: {cell['tokens_per_s']:.1f} tok/s, "
                          f"TTFT p50 {cell['ttft_p50_ms']:.0f} ms, largest prefill step {max_prefill[0]} rows, "
                          f"load {load:.1f}", flush=True)
    finally:
        for engine in engines.values():
            engine.close()
        base.close()
    summary = summarize(results, modes, concurrencies, budgets)
    source = args.prompts or (f"dev, {args.join} joined" if args.join else "dev")
    summary["settings"] = {"prompts": source, "prompt_tokens": [len(p) for p in prompts],
                           "max_tokens": args.max_tokens, "repeats": args.repeats, "requests": requests,
                           "threads": torch.get_num_threads(), "adapt_threads": not args.threads,
                           "prompt_reuse": not args.no_prompt_reuse, "cpu_count": os.cpu_count()}
    print(to_markdown(summary))
    if args.out:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(json.dumps(summary, indent=2))
    return 0


def summarize(results: dict[str, list[dict]], modes: list[str], concurrencies: list[int],
              budgets: list[int | None]) -> dict:
    rows = []
    for mode in modes:
        for concurrency in concurrencies:
            none = results[f"{mode} c={concurrency} budget=None"]
            for budget in budgets:
                runs = results[f"{mode} c={concurrency} budget={budget}"]
                rows.append({
                    "mode": mode, "concurrency": concurrency, "budget": budget,
                    "tokens_per_s": statistics.median(r["tokens_per_s"] for r in runs),
                    "ttft_p50_ms": statistics.median(r["ttft_p50_ms"] for r in runs),
                    "tokens_per_s_vs_none": median_ratio([r["tokens_per_s"] for r in runs],
                                                         [r["tokens_per_s"] for r in none]),
                    "ttft_p50_vs_none": median_ratio([r["ttft_p50_ms"] for r in runs], [r["ttft_p50_ms"] for r in none]),
                    "same_tokens": all(r["token_ids"] == n["token_ids"] for r, n in zip(runs, none, strict=True)),
                    "largest_prefill_step": max(r["prefill_tokens_max"] for r in runs),
                    "load": [round(r["load"], 1) for r in runs]})
    return {"rows": rows}


def to_markdown(summary: dict) -> str:
    lines = ["| mode | conc | max_prefill_tokens | tok/s | TTFT p50 ms | tok/s vs none | TTFT p50 vs none | same tokens "
             "| largest prefill step | load |", "|---|---|---|---|---|---|---|---|---|---|"]
    for r in summary["rows"]:
        lines.append(f"| {r['mode']} | {r['concurrency']} | {r['budget'] or 'none'} | {r['tokens_per_s']:.1f} | "
                     f"{r['ttft_p50_ms']:.0f} | {r['tokens_per_s_vs_none']:.3f} | {r['ttft_p50_vs_none']:.3f} | "
                     f"{r['same_tokens']} | {r['largest_prefill_step']} | {', '.join(map(str, r['load']))} |")
    return "\n".join(lines)


if __name__ == "__main__":
    raise SystemExit(main())
