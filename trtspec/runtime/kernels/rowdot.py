"""The row kernel (rowdot.cpp): a batch-invariant linear layer for AVX2 + FMA CPUs, in the cpu
engine's compiled library (trtspec.runtime.kernels.native).

Why: decoding's linear layers take 1 to 16 rows, where the time is reading the weights. Packed once
at load (`pack`: a few weight rows interleaved, read as one prefetched stream), SmolLM2's 211
layers in sequence took on a 2-core AVX-512 AMD EPYC about the same time at 8 rows as at one,
0.65 of the unpacked row kernel's time at 8 rows and 0.84 at one (docs/BENCHMARKS-log.md, "Packed weights").
Every row of a call rounds as it would alone, at any thread count, by construction.
trtspec.runtime.forward.linear_choice makes it the default kernel where the library builds; oneDNN or MKL
take a layer from it only where they measure clearly faster.

bfloat16 (`pack(weight, bfloat16=True)`, rowdot_bf16.cpp, CPUs with AVX512_BF16): the weight is
rounded to bfloat16 at pack time and each input row at every call, products summed in float32
in one fixed order as above (so still batch-invariant); half the bytes of weights to read and twice
the pairs an instruction multiplies: SmolLM2's linear layers in sequence took 0.55x the float32
kernel's time at 1 row, 0.56x at 8, 0.58x at 16 (2-core AVX-512 AMD EPYC, docs/BENCHMARKS-log.md).

Contract: `linear(x, pack(weight), bias)` equals `F.linear(x, weight, bias)` up to float32
rounding for float32 CPU tensors; with a bfloat16 pack it equals F.linear of the bfloat16-rounded
input and weight up to float32 rounding. Inference only (no gradient; the packed copy does not
follow later changes to the weight). Callers check `native.available()` first, and
`bfloat16_unavailable()` before a bfloat16 pack.
"""

from __future__ import annotations

from typing import Any, NamedTuple

from trtspec.runtime.kernels import native


class Packed(NamedTuple):
    """A weight in the row kernel's layout: `data` [out_features rounded up to the group, in_features],
    float32, or bfloat16 for the bfloat16 kernel."""

    data: Any
    out_features: int


def bfloat16_unavailable() -> str | None:
    """Why the bfloat16 kernel cannot run here, or None when it can."""
    why = native.unavailable()
    if why is None and not native.library().rowdot_bf16_available():
        why = "the CPU lacks AVX512_BF16 (with AVX-512 VL)"
    return why


def pack(weight: Any, bfloat16: bool = False) -> Packed:
    """The row kernel's copy of `weight` [out_features, in_features] (float32): float32, or rounded
    to bfloat16 (round to nearest even) for the bfloat16 kernel."""
    import torch

    weight, library = weight.detach().contiguous(), native.library()
    if bfloat16:
        weight = weight.to(torch.bfloat16)
    group = library.rowdot_group()
    data = torch.empty(-(-weight.shape[0] // group) * group, weight.shape[1], dtype=weight.dtype)
    packer = library.rowdot_bf16_pack if bfloat16 else library.rowdot_pack
    packer(weight.data_ptr(), weight.shape[0], weight.shape[1], data.data_ptr())
    return Packed(data, weight.shape[0])


def linear(x: Any, weight: Packed, bias: Any = None) -> Any:
    """F.linear on the row kernel. # x: [..., in_features]; weight: pack()'s copy of [out_features, in_features]
    Returns [..., out_features]."""
    import torch

    # the rows as they lie, no reshape and view round trip: this wrapper ran 8.2 us a call against
    # 2.5 for the foreign call itself, 4.8 without them; a SmolLM2 decode step makes 121 calls
    if not x.is_contiguous():
        x = x.contiguous()
    out = torch.empty(*x.shape[:-1], weight.out_features, dtype=x.dtype)
    library = native.library()
    kernel = library.rowdot_bf16_linear if weight.data.dtype == torch.bfloat16 else library.rowdot_linear
    kernel(x.data_ptr(), x.numel() // x.shape[-1], x.shape[-1], weight.data.data_ptr(), weight.out_features,
           None if bias is None else bias.data_ptr(), out.data_ptr(), torch.get_num_threads())
    return out
