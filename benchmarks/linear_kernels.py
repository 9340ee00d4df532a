"""SmolLM2's linear layers on oneDNN's prepacked weights (what the engine uses) and on F.linear
(MKL, what HF uses), at several thread counts: microseconds a call at 1, 2 and 8 rows, and the
fewest rows from which every row rounds as in a 32-row call (the engine's batch-invariance probe,
trtspec.runtime.forward.gemm_rows.fewest_rows_alike; "-": none of 1, 2, 4, 8).

Why: on a 16-core Xeon the engine's decode forward at 16 threads took 2x as long with its linear
layers on oneDNN as on F.linear (docs/BENCHMARKS-log.md, "A 16-core Xeon"), and F.linear's rows round
alike on no row count at 2 threads on the AVX2 EPYC: choosing a kernel and a thread count per
layer needs both columns on the machine at hand. Random weights; one process, calls in this
thread; medians of 5 batches of calls.

    .venv/bin/python -m benchmarks linear-kernels --threads 1,2
"""

from __future__ import annotations

import argparse
import statistics
import time

SHAPES = ((576, 576), (576, 192), (576, 1536), (1536, 576), (576, 49152))  # q/o, k/v, gate/up, down, lm_head


def kernels(weight):
    """{name: rows -> output} for the two kernels over the same weight."""
    import torch

    packed = torch.ops.mkldnn._reorder_linear_weight(weight, 8)  # as trtspec.runtime.forward.prepack packs it
    return {"onednn": lambda x: torch.ops.mkldnn._linear_pointwise(x, packed, None, "none", [], ""),
            "mkl": lambda x: torch.nn.functional.linear(x, weight)}


def microseconds(call, rows, repeats: int) -> float:
    for _ in range(3):
        call(rows)
    batches = []
    for _ in range(5):
        start = time.perf_counter()
        for _ in range(repeats):
            call(rows)
        batches.append((time.perf_counter() - start) / repeats)
    return statistics.median(batches) * 1e6


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--threads", default="1,2", help="thread counts, one after another in this process")
    args = parser.parse_args()

    import torch

    from trtspec.runtime.forward.gemm_rows import fewest_rows_alike

    generator = torch.Generator().manual_seed(0)
    print("| in x out | threads | kernel | us at 1 row | 2 rows | 8 rows | rows alike from |")
    print("|---|---:|---|---:|---:|---:|---:|")
    for in_features, out_features in SHAPES:
        weight = torch.randn(out_features, in_features, generator=generator) * 0.02
        rows = torch.randn(32, in_features, generator=generator)
        repeats = 5 if out_features >= 8192 else 100
        for threads in (int(t) for t in args.threads.split(",")):
            torch.set_num_threads(threads)
            with torch.inference_mode():
                for name, call in kernels(weight).items():
                    alike = fewest_rows_alike(lambda count, call=call, rows=rows: call(rows[:count]), (1, 2, 4, 8), 32)
                    times = [microseconds(call, rows[:count], repeats) for count in (1, 2, 8)]
                    print(f"| {in_features} x {out_features} | {threads} | {name} | "
                          + " | ".join(f"{t:.0f}" for t in times) + f" | {alike or '-'} |", flush=True)


if __name__ == "__main__":
    main()
