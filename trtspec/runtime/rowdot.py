"""The row kernel (rowdot.cpp): a batch-invariant linear layer for AVX2 + FMA CPUs, in the cpu
engine's compiled library (trtspec.runtime.native).

Why: decoding's linear layers take 1 to 16 rows, where the time is reading the weights. Packed once
at load (`pack`: a few weight rows interleaved, read as one prefetched stream), SmolLM2's 211
layers in sequence took on a 2-core AVX-512 AMD EPYC about the same time at 8 rows as at one,
0.65 of the unpacked row kernel's time at 8 rows and 0.84 at one (docs/BENCHMARKS.md, "Packed weights").
Every row of a call rounds as it would alone, at any thread count, by construction.
trtspec.runtime.linear_choice makes it the default kernel where the library builds; oneDNN or MKL
take a layer from it only where they measure clearly faster.

Contract: `linear(x, pack(weight), bias)` equals `F.linear(x, weight, bias)` up to float32
rounding for float32 CPU tensors; inference only (no gradient; the packed copy does not follow
later changes to the weight). Callers check `native.available()` first.
"""

from __future__ import annotations

from typing import Any, NamedTuple

from trtspec.runtime import native


class Packed(NamedTuple):
    """A weight in the row kernel's layout: `data` [out_features rounded up to the group, in_features]."""

    data: Any
    out_features: int


def pack(weight: Any) -> Packed:
    """The row kernel's copy of `weight` [out_features, in_features] (float32)."""
    import torch

    weight, library = weight.detach().contiguous(), native.library()
    group = library.rowdot_group()
    data = torch.empty(-(-weight.shape[0] // group) * group, weight.shape[1], dtype=weight.dtype)
    library.rowdot_pack(weight.data_ptr(), weight.shape[0], weight.shape[1], data.data_ptr())
    return Packed(data, weight.shape[0])


def linear(x: Any, weight: Packed, bias: Any = None) -> Any:
    """F.linear on the row kernel. # x: [..., in_features]; weight: pack()'s copy of [out_features, in_features]
    Returns [..., out_features]."""
    import torch

    rows = x.reshape(-1, x.shape[-1])
    if not rows.is_contiguous():
        rows = rows.contiguous()
    out = torch.empty(rows.shape[0], weight.out_features, dtype=x.dtype)
    native.library().rowdot_linear(rows.data_ptr(), rows.shape[0], rows.shape[1], weight.data.data_ptr(),
                                   weight.out_features, None if bias is None else bias.data_ptr(), out.data_ptr(),
                                   torch.get_num_threads())
    return out.view(*x.shape[:-1], weight.out_features)
