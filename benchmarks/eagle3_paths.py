"""What an EAGLE-3 draft step costs on each drafting path: chains, a static tree, a dynamic tree.

Plain greedy decoding, then EAGLE-3 chains of 4 (`chain:4`), the static tree of `benchmarks trees`
(`choices`: 10 nodes, depth 4) and a dynamic tree (`tree:2,4,8`), each forced on at every batch
size, in process on SmolLM2 with the held-back dev prompts, at each concurrency; the cells of a
repeat run in turn, in alternating order, over one engine's weights. Per cell: the engine loop
thread's CPU ms per step in the drafter (propose_batch), per head forward and in the target's
forward (one torch thread: CPU time is the engine's own work on a loaded machine), the break-even
acceptance length L* = (draft + verify) / plain step, the process's CPU ms per token and its speed-up
over plain (plain / this, per repeat: what tokens/s would read on cores of its own), and whether the
tokens are plain's.

The head is a seeded random head of the shape convert gives SmolLM2 (`eagle3-draft --head random`):
what a step costs does not depend on what it accepts (`--head DIR`: a trained head's acceptance).
`--layouts lean,build` runs every speculative cell twice, the head's attention layout from
trtspec.runtime.drafters.head_layout (lean, the default) and from Layout.build (build: the layout the
head had before), alternating, with the paired ratios.

    .venv/bin/python -m benchmarks eagle3-paths --concurrency 1,4 --repeats 2 --layouts lean,build
"""

from __future__ import annotations

import argparse
import json
import statistics
import tempfile
import time
from pathlib import Path

from benchmarks.batching import closed_loop, trtspec_contender
from benchmarks.common import chat_ids, dev_rows, load_average, smollm2

PATHS = ("chain:4", "choices", "tree:2,4,8")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--head", default="random", help="an EAGLE-3 head directory, or random (the default)")
    parser.add_argument("--paths", nargs="+", default=list(PATHS), help=f"any of {' '.join(PATHS)}")
    parser.add_argument("--concurrency", default="1,4")
    parser.add_argument("--repeats", type=int, default=2)
    parser.add_argument("--prompts", type=int, default=4, help="requests per concurrency slot")
    parser.add_argument("--max-tokens", type=int, default=32)
    parser.add_argument("--layouts", default="lean", help="lean, build or both (lean,build)")
    parser.add_argument("--json", action="store_true", help="print the cells as one JSON line too")
    args = parser.parse_args()

    import torch

    from benchmarks.eagle3_draft import Timers, random_head
    from benchmarks.trees import make_engine
    from trtspec.runtime import Engine
    from trtspec.runtime.cores.threads import release_idle_openmp_team

    torch.set_num_threads(1)
    concurrencies = [int(c) for c in args.concurrency.split(",")]
    paths, layouts = args.paths, args.layouts.split(",")
    with tempfile.TemporaryDirectory() as scratch:
        head = Path(args.head) if args.head != "random" else random_head(
            Path(scratch) / "head", json.loads((smollm2() / "config.json").read_text()))
        base = Engine.from_checkpoints(smollm2(), mode="eagle3", draft_dir=head, max_draft_len=4,
                                       max_batch_size=max(8, *concurrencies), draft_len_schedule=((1, 4),),
                                       kv_cache_reuse_mib=0, adapt_threads=False)
    engines = {path: make_engine(base, path) for path in paths}
    prompts = [chat_ids(base.tokenizer, row["prompt"]) for row in dev_rows(held_back=True)]
    timers = Timers([base.drafter])
    release_idle_openmp_team()
    cells_order = [("plain", "-")] + [(path, layout) for path in paths for layout in layouts]
    for path in paths:  # warm-up: every path once, two sequences
        closed_loop(trtspec_contender(engines[path], 8, speculative=True), prompts[:2], 2)
    cells: dict[tuple[str, str, int], list[dict]] = {}
    for repeat in range(args.repeats):
        for path, layout in cells_order if repeat % 2 == 0 else cells_order[::-1]:
            engine = base if path == "plain" else engines[path]
            base.drafter.lean_layout = layout != "build"
            for concurrency in concurrencies:
                work = [prompts[i % len(prompts)] for i in range(concurrency * args.prompts)]
                before = engine.cumulative_stats()
                timers.reset()
                cpu = time.process_time()
                wall, records = closed_loop(trtspec_contender(engine, args.max_tokens, speculative=path != "plain"),
                                            work, concurrency)
                cpu = time.process_time() - cpu
                after = engine.cumulative_stats()
                drafts = after.num_drafts - before.num_drafts
                steps, tokens = max(1, timers.steps), sum(r["tokens"] for r in records)
                cells.setdefault((path, layout, concurrency), []).append({
                    "tokens_per_s": tokens / wall, "cpu_ms_per_token": 1e3 * cpu / tokens,
                    "draft_ms": 1e3 * timers.draft / steps, "verify_ms": 1e3 * timers.verify / steps,
                    "head_ms": 1e3 * timers.head / max(1, timers.head_calls),
                    "head_calls_per_step": timers.head_calls / steps, "load": load_average(),
                    "acceptance_length": 1 + (after.num_accepted_tokens - before.num_accepted_tokens) / drafts
                    if drafts else None,
                    "token_ids": [r["token_ids"] for r in sorted(records, key=lambda r: r["prompt"])]})
    base.drafter.lean_layout = True
    for engine in engines.values():
        if engine is not base:
            engine.close()
    base.close()
    _report(cells, cells_order, concurrencies, args)
    if args.json:
        print(json.dumps({f"{p} {lay} c{c}": [{k: v for k, v in run.items() if k != "token_ids"} for run in runs]
                          for (p, lay, c), runs in cells.items()}))


def _report(cells, order, concurrencies, args) -> None:
    def med(runs, key):
        return statistics.median(r[key] for r in runs)

    print(f"head {args.head}, {args.repeats} repeats, {args.prompts} requests per slot, {args.max_tokens} tokens, "
          f"one torch thread; CPU ms: the engine loop thread's; tokens/s: wall clock; speed-up: plain / this "
          f"process CPU ms per token, per repeat, median")
    print("| path | layout | conc | tokens/s (median) | process CPU ms/token | speed-up | draft CPU ms/step "
          "| head CPU ms/forward | forwards/step "
          "| verify CPU ms/step | L* = (draft + verify) / plain | acceptance length | tokens = plain | load |")
    print("|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---|---|")
    for concurrency in concurrencies:
        plain = cells[("plain", "-", concurrency)]
        plain_ms, plain_ids = med(plain, "verify_ms"), plain[0]["token_ids"]
        for path, layout in order:
            runs = cells[(path, layout, concurrency)]
            spec = path != "plain"
            lengths = [r["acceptance_length"] for r in runs if r["acceptance_length"] is not None]
            same = all(r["token_ids"] == plain_ids for r in runs)
            speed_up = statistics.median(p["cpu_ms_per_token"] / r["cpu_ms_per_token"]
                                         for p, r in zip(plain, runs, strict=True))
            print(f"| {path} | {layout} | {concurrency} | {med(runs, 'tokens_per_s'):.1f} "
                  f"| {med(runs, 'cpu_ms_per_token'):.2f} | {speed_up:.3f} "
                  f"| {med(runs, 'draft_ms'):.2f} "
                  f"| {med(runs, 'head_ms') if spec else 0:.2f} | {med(runs, 'head_calls_per_step'):.2f} "
                  f"| {med(runs, 'verify_ms'):.2f} "
                  f"| {(med(runs, 'draft_ms') + med(runs, 'verify_ms')) / plain_ms if spec else 1:.3f} "
                  f"| {f'{statistics.median(lengths):.3f}' if lengths and spec else '-'} | {same} "
                  f"| {min(r['load'] for r in runs):.1f}-{max(r['load'] for r in runs):.1f} |")
        for path, layout in order:
            if layout != "build" or ("lean" not in {lay for _, lay in order}):
                continue
            lean, build = cells[(path, "lean", concurrency)], cells[(path, "build", concurrency)]
            ratios = [a["draft_ms"] / b["draft_ms"] for a, b in zip(lean, build, strict=True) if b["draft_ms"]]
            print(f"conc {concurrency} {path}: lean / build draft CPU ms per step, per repeat "
                  f"{', '.join(f'{r:.3f}' for r in ratios)} (median {statistics.median(ratios):.3f})")


if __name__ == "__main__":
    main()
