"""SmolLM2's 211 linear layers called one after another, as a forward calls them, on each kernel
the engine can run them on: milliseconds for all of them at several row counts.

Why: benchmarks/linear_kernels.py times one layer's weight again and again, so it sits in the
cache; in a decode step every layer's weights come from memory (SmolLM2's are 0.5 GB), which is
where the row kernel (trtspec.runtime.kernels.rowdot) and oneDNN differ most. Random weights with
SmolLM2's shapes (30 x q, k, v, o, gate, up, down, then lm_head); the kernels run in turn, each
round all of them at one row count; medians over rounds.

    .venv/bin/python -m benchmarks linear-sequence --threads 2 --rows 1,8,64,256 --rounds 5
"""

from __future__ import annotations

import argparse
import statistics
import time

LAYER = ((576, 576), (576, 192), (576, 192), (576, 576), (576, 1536), (576, 1536), (1536, 576))  # in x out
LM_HEAD = (576, 49152)


def packed_layers(kernel: str, weights):
    """PackedLinear modules forced onto `kernel`, sharing `weights`."""
    import torch

    from trtspec.runtime.forward.prepack import _packed_linear_class

    packed_linear = _packed_linear_class()
    layers = []
    for weight in weights:
        linear = torch.nn.Linear(weight.shape[1], weight.shape[0], bias=False)
        linear.weight = torch.nn.Parameter(weight, requires_grad=False)
        layers.append(packed_linear(linear, (kernel,)))
    return layers


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--rows", default="1,8,64")
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--kernels", default="rowdot,onednn", help="of rowdot, onednn, mkl")
    parser.add_argument("--layers", type=int, default=30, help="decoder layers (SmolLM2 has 30)")
    args = parser.parse_args()

    import torch

    from trtspec.runtime.kernels import native

    torch.set_num_threads(args.threads)
    kernels = args.kernels.split(",")
    if "rowdot" in kernels and not native.available():
        raise SystemExit(f"the row kernel is not available here: {native.unavailable()}")
    generator = torch.Generator().manual_seed(0)
    weights = [torch.randn(out, inp, generator=generator) * 0.02 for _ in range(args.layers) for inp, out in LAYER]
    weights.append(torch.randn(LM_HEAD[1], LM_HEAD[0], generator=generator) * 0.02)
    layers = {kernel: packed_layers(kernel, weights) for kernel in kernels}
    row_counts = [int(r) for r in args.rows.split(",")]
    times: dict[tuple[int, str], list[float]] = {}
    with torch.inference_mode():
        for _ in range(args.rounds):
            for rows in row_counts:
                inputs = {width: torch.randn(rows, width, generator=generator) for width in (576, 1536)}
                for kernel in kernels:
                    start = time.perf_counter()
                    for layer in layers[kernel]:
                        layer(inputs[layer.in_features])
                    times.setdefault((rows, kernel), []).append((time.perf_counter() - start) * 1e3)
    first = kernels[0]
    print(f"| rows | {' | '.join(f'{k} ms' for k in kernels)} | " + " | ".join(f"{k} / {first}" for k in kernels[1:])
          + " |")
    print("|---:|" + "---:|" * (2 * len(kernels) - 1))
    for rows in row_counts:
        medians = [statistics.median(times[(rows, kernel)]) for kernel in kernels]
        print(f"| {rows} | " + " | ".join(f"{m:.1f}" for m in medians) + " | "
              + " | ".join(f"{m / medians[0]:.2f}" for m in medians[1:]) + " |")
    print(f"threads {args.threads}, {args.rounds} rounds, {len(weights)} layers")


if __name__ == "__main__":
    main()
