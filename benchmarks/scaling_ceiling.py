"""What concurrency c over 1 can reach on this machine, and what pulls a closed loop below it:
plain greedy decoding in process on SmolLM2 (float32, the held-back dev prompts).

Why: issue 25 asks for baseline concurrency 8 / 1 >= 5x through Triton; an AVX2 CPU read
4.0-4.5x (docs/BENCHMARKS-log.md). Through Triton and in process the ratio is the same, so this
splits it in process into factors that multiply back to it:

- ceiling: c x (a decode forward of 1 sequence) / (a decode forward of c sequences), at fixed
  contexts (each sequence's prompt plus 32 generated positions, in lanes as the scheduler places
  them): what c over 1 would read with every slot decoding every step and no prompt rows;
- in the closed loop, per cell: the decode-only steps' mean time and mean sequences, the share
  of wall time in steps that carry prompt rows, and the share between steps (scheduling, the
  clients, waiting for a request);
- c over 1 = (c x t1 / tc) x (sequences per decode step / c) x (wall time left after the prompt
  rows' cost beyond a decode step) x (wall time left after the gaps between steps), each relative
  to 1's: a prompt step counts as a decode step that also carries prompt rows, so the product
  differs from the measured ratio by what that approximation misses.

benchmarks/prefill_share.py times a similar split per forward for its kv_cache_reuse A/B; this
one adds the ceiling and multiplies the factors back into the ratio.

    .venv/bin/python -m benchmarks scaling-ceiling --concurrency 1,8 --repeats 3

Needs the SmolLM2 cache (`trtspec models fetch smollm2`). Measure on an otherwise idle machine.
"""

from __future__ import annotations

import argparse
import json
import statistics
import time

from benchmarks.batching import closed_loop, trtspec_contender
from benchmarks.step_costs import heldback_engine

GENERATED = 32  # positions past the prompt in the ceiling's fixed contexts (half of 64 new tokens)


class StepLog:
    """Every engine step's seconds, sequences, decoding sequences and forward rows (wraps
    step.run_step and the forward it calls)."""

    def __init__(self) -> None:
        from trtspec.runtime.loop import step

        self.steps: list[tuple[float, float, int, int, int]] = []  # started, seconds, sequences, decoding, rows
        self._rows = 0
        run_step, forward = step.run_step, step.forward

        def counted(model, feeds, *args):
            self._rows += sum(len(feed.token_ids) for feed in feeds)
            return forward(model, feeds, *args)

        def timed(view, batch):
            self._rows, started = 0, time.perf_counter()
            try:
                return run_step(view, batch)
            finally:
                stats = view.stats
                self.steps.append((started, time.perf_counter() - started, stats.last_batch_size,
                                   stats.last_num_decoding, self._rows))

        step.forward = counted
        step.run_step = timed  # the scheduler's loop imports it when its thread starts

    def cell(self, since: float, wall: float, tokens: int) -> dict:
        """The steps that started after `since` (not the previous cell's last one, which may end after it)."""
        steps = [step[1:] for step in self.steps if step[0] >= since]
        decode = [(s, n) for s, n, decoding, _ in steps if n == decoding]
        prompt = [(s, rows - decoding) for s, n, decoding, rows in steps if n != decoding]
        decode_s, prompt_s = sum(s for s, _ in decode), sum(s for s, _ in prompt)
        decode_step = decode_s / max(1, len(decode))
        return {"tokens_per_s": tokens / wall, "wall_s": wall, "decode_steps": len(decode),
                "decode_step_ms": 1000 * decode_step,
                "sequences_per_step": sum(n for _, n in decode) / max(1, len(decode)),
                "decode_share": decode_s / wall, "prompt_share": prompt_s / wall,
                "between_share": 1 - (decode_s + prompt_s) / wall,
                "prompt_steps": len(prompt), "prompt_rows": sum(rows for _, rows in prompt),
                # what the prompt steps cost beyond a decode step each, per prompt row
                "ms_per_prompt_row": 1000 * (prompt_s - len(prompt) * decode_step) / max(1, sum(r for _, r in prompt))}


def ceiling_forwards(engine, prompts: list[list[int]], concurrencies: list[int], repeats: int) -> dict[int, float]:
    """Median seconds of one decode forward over the first c contexts, for each c (interleaved)."""
    import torch

    from trtspec.runtime.cache.paged import BlockTable, KVPool, SeqKV
    from trtspec.runtime.forward.batch import Feed, forward

    model, size = engine.target, 16
    lengths = [len(ids) + GENERATED for ids in prompts]
    lane = -(-(max(lengths) + 1) // size)  # blocks per sequence, one lane each
    count = max(concurrencies)
    pool = KVPool.for_model(model.config, count * lane * size)
    generator = torch.Generator().manual_seed(0)
    contexts = []
    with torch.inference_mode():
        for index in range(count):
            kv = SeqKV(pool, BlockTable(list(range(index * lane, (index + 1) * lane)), size))
            pool.zero_blocks(kv.table)
            ids = prompts[index % len(prompts)] + torch.randint(0, 1000, (GENERATED,), generator=generator).tolist()
            forward(model, [Feed(kv, ids, num_logits=1)])
            contexts.append(kv)

    def once(c: int) -> float:
        feeds = [Feed(kv, [100 + i], num_logits=1) for i, kv in enumerate(contexts[:c])]
        with torch.inference_mode():
            started = time.perf_counter()
            forward(model, feeds)
            elapsed = time.perf_counter() - started
        for feed in feeds:
            feed.kv.length -= 1  # the next forward rewrites the same position
        return elapsed

    times: dict[int, list[float]] = {c: [] for c in concurrencies}
    for round_ in range(2 + 5 * repeats):
        for c in concurrencies:
            elapsed = once(c)
            if round_ >= 2:
                times[c].append(elapsed)
    return {c: statistics.median(values) for c, values in times.items()}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--concurrency", default="1,8", help="the first is the reference (1)")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--requests-per-slot", type=int, default=8)
    parser.add_argument("--max-tokens", type=int, default=64)
    parser.add_argument("--json", action="store_true", help="print the figures as JSON too")
    args = parser.parse_args()

    import threading

    from trtspec.runtime.cores.threads import release_idle_openmp_team

    concurrencies = [int(c) for c in args.concurrency.split(",")]
    log = StepLog()
    engine, prompts = heldback_engine(max(16, max(concurrencies)))
    release_idle_openmp_team()  # this thread loaded the model; the engine's loop thread does the work
    ceiling: dict[int, float] = {}
    # the forwards run on a thread of their own, as the engine's loop does
    worker = threading.Thread(target=lambda: ceiling.update(ceiling_forwards(engine, prompts, concurrencies, args.repeats)))
    worker.start()
    worker.join()
    run_one = trtspec_contender(engine, args.max_tokens, speculative=False)
    closed_loop(run_one, prompts[:2], 2)  # warm-up
    cells: dict[int, list[dict]] = {c: [] for c in concurrencies}
    for _ in range(args.repeats):
        for concurrency in concurrencies:
            work = [prompts[i % len(prompts)] for i in range(concurrency * args.requests_per_slot)]
            since = time.perf_counter()
            wall, records = closed_loop(run_one, work, concurrency)
            cells[concurrency].append(log.cell(since, wall, sum(r["tokens"] for r in records)))
    engine.close()
    _report(ceiling, cells, concurrencies)
    if args.json:
        print(json.dumps({"ceiling_forward_s": ceiling, "cells": cells}))


def _report(ceiling: dict[int, float], cells: dict[int, list[dict]], concurrencies: list[int]) -> None:
    first = concurrencies[0]
    print(f"| conc | ceiling c x t{first} / tc | tokens/s (repeats) | measured c / {first} (repeats) | "
          "decode step ms | sequences a step | prompt rows a prompt step, ms a row beyond a decode step | "
          "decode / prompt steps / between, % of wall | "
          "factors: forward x occupancy x prompt rows x between = product |")
    print("|---:|---:|---|---|---:|---:|---|---|---|")
    for c in concurrencies:
        runs, refs = cells[c], cells[first]
        measured = [r["tokens_per_s"] / ref["tokens_per_s"] for r, ref in zip(runs, refs, strict=True)]
        factors = [_factors(r, ref, c / first) for r, ref in zip(runs, refs, strict=True)]
        median = {key: statistics.median(r[key] for r in runs)
                  for key in ("decode_step_ms", "sequences_per_step", "decode_share", "prompt_share", "between_share",
                              "ms_per_prompt_row")}
        rows_a_step = statistics.median(r["prompt_rows"] / max(1, r["prompt_steps"]) for r in runs)
        parts = [statistics.median(f[i] for f in factors) for i in range(4)]
        product = parts[0] * parts[1] * parts[2] * parts[3]
        rates = ", ".join(f"{r['tokens_per_s']:.1f}" for r in runs)
        print(f"| {c} | {c / first * ceiling[first] / ceiling[c]:.2f} | {rates} | "
              f"{', '.join(f'{m:.2f}' for m in measured)} | {median['decode_step_ms']:.1f} | "
              f"{median['sequences_per_step']:.2f} | {rows_a_step:.0f}, {median['ms_per_prompt_row']:.1f} | "
              f"{100 * median['decode_share']:.0f} / {100 * median['prompt_share']:.0f} / {100 * median['between_share']:.0f} | "
              f"{' x '.join(f'{p:.2f}' for p in parts)} = {product:.2f} |")
    print(f"ceiling forward ms: {', '.join(f'{c}: {1000 * t:.1f}' for c, t in ceiling.items())}; "
          f"{len(cells[first])} repeats")


def _factors(run: dict, ref: dict, scale: float) -> tuple[float, float, float, float]:
    """c over 1 as a product: decode steps' cost, sequences per decode step, wall time left after
    the prompt rows' cost beyond a decode step, wall time left after the gaps between steps (a
    prompt step counts as a decode step that also carries prompt rows)."""
    def without_prompt_rows(cell: dict) -> float:
        extra = cell["prompt_share"] - cell["prompt_steps"] * cell["decode_step_ms"] / 1000 / cell["wall_s"]
        return 1 - extra
    return (scale * ref["decode_step_ms"] / run["decode_step_ms"],
            (run["sequences_per_step"] / scale) / ref["sequences_per_step"],
            without_prompt_rows(run) / without_prompt_rows(ref),
            (1 - run["between_share"]) / (1 - ref["between_share"]))


if __name__ == "__main__":
    main()
