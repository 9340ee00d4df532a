"""Where the engine's time goes at concurrency 1 and c: plain greedy decoding in process (closed
loop, SmolLM2, the held-back dev prompts), each cell's step time split into the linear layers,
attention and the rest, and what concurrency c over 1 would read if attention and the rest cost
per step what they cost at concurrency 1 (the linear layers as measured).

Why: concurrency 8 over 1 through Triton stayed at 4.0-4.4x on an AVX2 CPU (docs/BENCHMARKS-log.md);
this says which part of a step grows with the batch. Timers wrap PackedLinear.forward and
Layout.attend (a perf_counter pair per call). --attention names the attention routes to run, each
cell once per route per repeat in alternating order, with the ratios of the first route to the
others: kernel (compiled, trtspec.runtime.forward.attention_kernel; the engine's default where it builds),
strided (torch's products, decode groups in lanes: trtspec.runtime.forward.attention_strided) and
per-sequence (torch's products per sequence: Group).

    .venv/bin/python -m benchmarks step-costs --concurrency 1,8 --repeats 2 --requests-per-slot 8
    .venv/bin/python -m benchmarks step-costs --attention kernel,strided --concurrency 1,8,16

Needs the SmolLM2 cache (`trtspec models fetch smollm2`).
"""

from __future__ import annotations

import argparse
import json
import statistics
import time

from benchmarks.batching import closed_loop, trtspec_contender
from benchmarks.common import dev_rows, smollm2


class StepTimer:
    """Seconds spent in the linear layers and in attention since the last reset."""

    def __init__(self) -> None:
        from trtspec.runtime.forward.attention import Layout
        from trtspec.runtime.forward.prepack import _packed_linear_class

        self.linear = self.attention = 0.0
        self._wrap(_packed_linear_class(), "forward", "linear")
        self._wrap(Layout, "attend", "attention")

    def _wrap(self, owner, name: str, bucket: str) -> None:
        inner = getattr(owner, name)

        def timed(*args, **kwargs):
            started = time.perf_counter()
            try:
                return inner(*args, **kwargs)
            finally:
                setattr(self, bucket, getattr(self, bucket) + time.perf_counter() - started)

        setattr(owner, name, timed)

    def reset(self) -> None:
        self.linear = self.attention = 0.0


ROUTES = ("kernel", "strided", "per-sequence")


def use_attention(route: str) -> None:
    """Make the next forwards attend on `route` (read by every new Layout: no reload)."""
    import os

    from trtspec.runtime.forward import attention_strided

    os.environ["TRTSPEC_CPU_ATTENTION"] = "kernel" if route == "kernel" else "torch"
    _LANES_SPACING.setdefault("spacing", attention_strided.spacing)
    attention_strided.spacing = ((lambda entries, members, kv_heads: None) if route == "per-sequence"
                                 else _LANES_SPACING["spacing"])


_LANES_SPACING: dict = {}  # attention_strided.spacing as shipped, kept while it is switched off


def heldback_engine(max_batch_size: int):
    """SmolLM2's plain engine (the shared chat start kept, nothing else) and the held-back dev
    prompts (the last 15) as its token ids."""
    from trtspec.runtime import Engine

    engine = Engine.from_checkpoints(smollm2(), mode="none",
                                     max_batch_size=max_batch_size, kv_cache_reuse_mib=0)
    rows = dev_rows(held_back=True)
    return engine, [engine.encode(row["prompt"]) for row in rows]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--concurrency", default="1,8", help="the first is the reference (1)")
    parser.add_argument("--repeats", type=int, default=2)
    parser.add_argument("--requests-per-slot", type=int, default=8)
    parser.add_argument("--max-tokens", type=int, default=64)
    parser.add_argument("--attention", default="kernel", help=f"routes to compare, of {', '.join(ROUTES)}")
    parser.add_argument("--json", action="store_true", help="print the cells as JSON too")
    args = parser.parse_args()

    from trtspec.runtime.cores.threads import release_idle_openmp_team

    concurrencies = [int(c) for c in args.concurrency.split(",")]
    variants = args.attention.split(",")
    if not set(variants) <= set(ROUTES):
        parser.error(f"--attention: routes are {', '.join(ROUTES)} (got {args.attention})")
    engine, prompts = heldback_engine(max(16, max(concurrencies)))
    timer = StepTimer()
    release_idle_openmp_team()  # this thread loaded the model; the engine loop does the work
    run_one = trtspec_contender(engine, args.max_tokens, speculative=False)
    closed_loop(run_one, prompts[:2], 2)  # warm-up
    cells: dict[tuple[str, int], list[dict]] = {}
    for repeat in range(args.repeats):
        for route in variants if repeat % 2 == 0 else variants[::-1]:
            use_attention(route)
            for concurrency in concurrencies:
                work = [prompts[i % len(prompts)] for i in range(concurrency * args.requests_per_slot)]
                timer.reset()
                steps_before = engine.scheduler.stats.num_steps
                wall, records = closed_loop(run_one, work, concurrency)
                cells.setdefault((route, concurrency), []).append(
                    {"tokens_per_s": sum(r["tokens"] for r in records) / wall, "wall_s": wall,
                     "linear_s": timer.linear, "attention_s": timer.attention,
                     "steps": engine.scheduler.stats.num_steps - steps_before})
    engine.close()
    _report(cells, concurrencies, variants, args.repeats)
    if args.json:
        print(json.dumps({f"{k[0]} c{k[1]}": v for k, v in cells.items()}))


def _report(cells, concurrencies, variants, repeats) -> None:
    first = concurrencies[0]
    for route in variants:
        print(f"## {route} attention")
        print("| conc | tokens/s (repeats) | steps | linear ms/step | attention ms/step | rest ms/step | "
              f"c / c{first} (repeats) | if attention and rest cost as at c{first} |")
        print("|---:|---|---:|---:|---:|---:|---|---|")
        for concurrency in concurrencies:
            runs = cells[(route, concurrency)]
            refs = cells[(route, first)]
            parts = []
            for run, ref in zip(runs, refs, strict=True):
                steps, ref_steps = run["steps"], ref["steps"]
                rest, ref_rest = _rest(run), _rest(ref)
                # the wall time c would take with attention and the rest at c1's per-step cost
                wall = run["wall_s"] - (run["attention_s"] - steps * ref["attention_s"] / ref_steps) \
                    - (rest - steps * ref_rest / ref_steps)
                parts.append((run["tokens_per_s"] / ref["tokens_per_s"],
                              run["tokens_per_s"] * run["wall_s"] / wall / ref["tokens_per_s"]))
            per_step = {key: statistics.median(1000 * value(r) / r["steps"] for r in runs)
                        for key, value in (("linear", lambda r: r["linear_s"]),
                                           ("attention", lambda r: r["attention_s"]), ("rest", _rest))}
            rates = ", ".join(f"{r['tokens_per_s']:.1f}" for r in runs)
            print(f"| {concurrency} | {rates} | {statistics.median(r['steps'] for r in runs):.0f} | "
                  f"{per_step['linear']:.1f} | {per_step['attention']:.1f} | {per_step['rest']:.1f} | "
                  f"{', '.join(f'{a:.2f}' for a, _ in parts)} | {', '.join(f'{b:.2f}' for _, b in parts)} |")
    for other in variants[1:]:
        for concurrency in concurrencies:
            ratios = [a["tokens_per_s"] / b["tokens_per_s"]
                      for a, b in zip(cells[(variants[0], concurrency)], cells[(other, concurrency)], strict=True)]
            print(f"{variants[0]} / {other} at {concurrency}: {statistics.median(ratios):.3f} "
                  f"({', '.join(f'{r:.3f}' for r in ratios)})")
    print(f"{repeats} repeats")


def _rest(run: dict) -> float:
    return run["wall_s"] - run["linear_s"] - run["attention_s"]


if __name__ == "__main__":
    main()
