"""The row kernel (rowdot.cpp): a batch-invariant linear layer for AVX2 + FMA CPUs, in the cpu
engine's compiled library (trtspec.runtime.native).

Why: on a 2-core AVX2 AMD EPYC it ran SmolLM2's linear layers in sequence in 0.61-0.71 of oneDNN's
time at one row and 0.59-0.64 at 8 rows (slower from about 64 rows: 1.23-1.30x at 256;
docs/BENCHMARKS.md, "A row kernel"), and every row of a call rounds as it would alone, at any
thread count, by construction. trtspec.runtime.linear_choice makes it the default kernel where
the library builds; oneDNN or MKL take a layer from it only where they measure clearly faster.

Contract: `linear(x, weight, bias)` equals `F.linear` up to float32 rounding for float32 CPU
tensors whose weight is contiguous; inference only (no gradient). Callers check
`native.available()` first.
"""

from __future__ import annotations

from typing import Any

from trtspec.runtime import native


def linear(x: Any, weight: Any, bias: Any = None) -> Any:
    """F.linear on the row kernel. # x: [..., in_features]; weight: [out_features, in_features]
    Returns [..., out_features]."""
    import torch

    rows = x.reshape(-1, x.shape[-1])
    if not rows.is_contiguous():
        rows = rows.contiguous()
    out = torch.empty(rows.shape[0], weight.shape[0], dtype=x.dtype)
    native.library().rowdot_linear(rows.data_ptr(), rows.shape[0], rows.shape[1], weight.data_ptr(),
                                   weight.shape[0], None if bias is None else bias.data_ptr(), out.data_ptr(),
                                   torch.get_num_threads())
    return out.view(*x.shape[:-1], weight.shape[0])
