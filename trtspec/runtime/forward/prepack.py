"""Cheap multi-token verify passes on CPU: linear layers on oneDNN-prepacked weights.

Why (measured on SmolLM2-135M, float32, one thread; docs/BENCHMARKS-engine.md): a forward pass
is ~80% matrix multiplies. `F.linear` on 1 row is MKL's GEMV, but on 2-9 rows it is MKL's
SGEMM, which repacks each weight matrix on every call; a 9-token verify then cost 1.8-2.4x a
1-token step, and a 2-3-token one about as much. oneDNN's inner product on weights reordered
once at load (`torch.ops.mkldnn._reorder_linear_weight`) streams them as they are: the same
9-token verify costs about 1.2-1.4x a plain step, and the 1-token step itself gets ~10% faster.

Batch invariance (what lets a batched engine promise each request exactly what it gets alone):
on this oneDNN build a row's result does not depend on how many rows share the call, for every
row count from 2 to thousands, but a single row takes another kernel whose sums round
differently when the input is wide (1536, the MLP's down projection). So for such a layer a
one-row input is padded with a zero row and only its own row kept: every row then rounds the same way
whatever the batch (tests/runtime/forward/test_rt_batch_invariance.py measures it on the machine it runs
on). Which layers need it, and how many rows (another CPU may switch kernels at more than one),
is probed once at load, on this machine's kernels: pairing every layer
cost a lone sequence's step ~3% (SmolLM2's lm_head, 576 x 49152: 6.9 ms for one row, 8.7 ms for
two, 1 thread) where the one-row kernel already rounds like the others.

Which kernel runs a layer is chosen at load too (trtspec.runtime.forward.linear_choice): the row kernel
(trtspec.runtime.kernels.rowdot: every row one fixed-order dot product, batch-invariant by construction)
where it can be built, else oneDNN on the packed copy; another kernel (oneDNN, MKL's F.linear)
replaces it only where its rows also round alike (padded likewise) and its calls cost clearly
less. On a 2-core AVX2 AMD EPYC the row kernel runs every SmolLM2 layer (a decode forward
0.81-0.87 of oneDNN's time); on a 16-core Xeon F.linear halved the oneDNN decode forward at 16 threads.
Where the row kernel cannot be built, one line on stderr says why. With `kernels=(ROWDOT_BF16,)`
(the engine's model.dtype bfloat16) every layer runs on the bfloat16 row kernel and nothing else:
no kernel of other numbers takes a layer from it, and where it cannot run the call fails.

Contract: `prepack_linears(model)` replaces every float32 `nn.Linear` of `model` with a
`PackedLinear` that shares the original weight and bias Parameters (state_dict, tied embeddings
and anything reading `.weight` are unchanged) and keeps one packed copy in the layout of the
kernel that runs it, oneDNN's or the row kernel's (so those linear weights take twice the memory).
Results equal `F.linear` up to float32 rounding (logits differ by ~1e-5). Inference only: the
packed copy does not follow later changes to the weight and gets no gradient. Where oneDNN is missing it changes nothing and returns 0.
"""

from __future__ import annotations

import itertools
from collections.abc import Iterator
from contextlib import contextmanager
from functools import cache
from typing import Any

from trtspec.runtime.forward.linear_choice import KERNELS, ONEDNN, ROW_COUNTS, ROW_KERNELS, ROWDOT, ROWDOT_BF16, choose

# oneDNN picks its blocking for this many rows; 8 covers verify passes of 1 + up to 8 drafts.
PACKED_FOR_ROWS = 8
# A kernel's timing calls it on copies of the layer's shape in turn, this many bytes of weights
# (more than the caches hold), as a forward meets each layer's weight after all the others' (`_in_turn`)
IN_TURN_BYTES = 64 << 20
IN_TURN_MOST = 256  # ... in at most this many copies: a tiny model's layers sit in the caches in its forward too


def available() -> bool:
    import torch

    return bool(torch.backends.mkldnn.is_available()) and hasattr(torch.ops.mkldnn, "_reorder_linear_weight")


def prepack_linears(model: Any, kernels: tuple[str, ...] = KERNELS) -> int:
    """Swap each float32 CPU nn.Linear in `model` for a PackedLinear running on the fastest of
    `kernels` whose rows round alike here (the first is the default); returns how many."""
    return len(_swap_in(model, kernels))


@contextmanager
def prepacked(model: Any) -> Iterator[int]:
    """prepack_linears for the duration of a `with` block (yields how many): the model's own
    nn.Linear modules are put back on exit, so a model borrowed by an engine (convert's target
    making its training answers) leaves it as it came, trainable and convertible."""
    swaps = _swap_in(model)
    try:
        yield len(swaps)
    finally:
        for parent, name, child in swaps:
            setattr(parent, name, child)


def _swap_in(model: Any, kernels: tuple[str, ...] = KERNELS) -> list[tuple[Any, str, Any]]:
    """(parent, name, original nn.Linear) for every linear layer swapped for a PackedLinear; sibling
    projections are then stacked (trtspec.runtime.forward.fused_linears)."""
    import torch

    from trtspec.runtime.forward.fused_linears import fuse_siblings

    if not available():
        return []
    swaps = [(parent, name, child) for parent in model.modules() for name, child in parent.named_children()
             if type(child) is torch.nn.Linear and child.weight.dtype == torch.float32
             and child.weight.device.type == "cpu"]
    packed_linear = _packed_linear_class()
    for parent, name, child in swaps:
        setattr(parent, name, packed_linear(child, kernels))
    fuse_siblings(model)
    return swaps


_CLASS: list = []


@cache
def _without_missing_row_kernel(kernels: tuple[str, ...]) -> tuple[str, ...]:
    """`kernels` as given where the row kernel runs here (or is not asked for); else without it,
    said once on stderr (decoding is slower), and an error when nothing is left. The bfloat16 row
    kernel runs alone and has no stand-in (any other kernel computes other numbers)."""
    import sys

    from trtspec.runtime.kernels import native, rowdot

    if ROWDOT_BF16 in kernels:
        if len(kernels) > 1:
            raise ValueError(f"the bfloat16 row kernel runs alone, not among {kernels}")
        why = rowdot.bfloat16_unavailable()
        if why is not None:
            raise ValueError(f"bfloat16 linear layers cannot run here: {why}")
        return kernels
    why = native.unavailable() if ROWDOT in kernels else None
    if why is None:
        return kernels
    left = tuple(name for name in kernels if name != ROWDOT)
    if not left:
        raise ValueError(f"the row kernel was the only kernel asked for and cannot run here: {why}")
    print(f"trtspec: linear layers run on oneDNN, not the row kernel, and attention on torch's products: {why} "
          "(install g++ for faster cpu decoding)", file=sys.stderr)
    return left


def _packed_linear_class():
    """PackedLinear, built on first use so importing this module does not import torch."""
    if _CLASS:
        return _CLASS[0]
    import torch

    from trtspec.runtime.kernels import rowdot

    class PackedLinear(torch.nn.Module):
        """nn.Linear's forward on the kernel chosen for this layer on this CPU (linear_choice.py):
        oneDNN or the row kernel (rowdot.py) on its own packed copy of the same weight, or MKL's
        F.linear on the weight itself."""

        def __init__(self, linear: torch.nn.Linear, kernels: tuple[str, ...] = KERNELS):
            super().__init__()
            self.in_features, self.out_features = linear.in_features, linear.out_features
            self.weight = linear.weight
            self.bias = linear.bias
            self.packed = None  # oneDNN's copy of the weight, while oneDNN runs the layer
            self.rowdot_weight = None  # the row kernel's copy (rowdot.pack), while the row kernel runs it
            self.choose(kernels)

        def choose(self, kernels: tuple[str, ...]) -> str:
            """Pick this layer's kernel among `kernels` (the first is the default) and the rows its
            calls need; returns the kernel. The packed copy is kept only while oneDNN runs the layer."""
            kernels = _without_missing_row_kernel(tuple(kernels))
            with torch.no_grad():
                if ONEDNN in kernels and self.packed is None:
                    self.packed = torch.ops.mkldnn._reorder_linear_weight(self.weight.detach(), PACKED_FOR_ROWS)
                if ROWDOT in kernels and self.rowdot_weight is None:
                    self.rowdot_weight = rowdot.pack(self.weight)
                if ROWDOT_BF16 in kernels and self.rowdot_weight is None:
                    self.rowdot_weight = rowdot.pack(self.weight, bfloat16=True)
                calls = {name: (lambda x, name=name: self._call(name, x)) for name in kernels}
                shape = (self.in_features, self.out_features, self.bias is not None)
                timed = {name: _in_turn(name, self, calls[name]) for name in kernels}
                self.kernel, fewest = choose(calls, self.in_features, shape, timed)
            # no count rounds alike: the most rows probed (batch invariance is then not promised,
            # and tests/runtime/forward/test_rt_batch_invariance.py fails here)
            self.rows_alike = fewest is not None
            self.min_rows = fewest or ROW_COUNTS[-1]
            if self.kernel != ONEDNN:
                self.packed = None
            if self.kernel not in ROW_KERNELS:
                self.rowdot_weight = None
            return self.kernel

        def _call(self, kernel: str, x):
            return _run(kernel, x, self.weight, self.packed, self.rowdot_weight, self.bias)

        def forward(self, x):
            # x: [..., in_features] -> [..., out_features]
            count = x.numel() // x.shape[-1]
            if 0 < count < self.min_rows:  # too few rows round apart: pad with zero rows, drop them
                padded = x.new_zeros(self.min_rows, x.shape[-1])
                padded[:count] = x.reshape(count, -1)
                return self._call(self.kernel, padded)[:count].reshape(*x.shape[:-1], -1)
            return self._call(self.kernel, x)

        def extra_repr(self) -> str:
            return f"in_features={self.in_features}, out_features={self.out_features}, kernel={self.kernel}"

    _CLASS.append(PackedLinear)
    return PackedLinear


def _run(kernel: str, x: Any, weight: Any, packed: Any, rowdot_weight: Any, bias: Any) -> Any:
    """`kernel` on its own copy of a weight: oneDNN's `packed`, the row kernel's `rowdot_weight`
    (float32 or bfloat16, as it was packed) or, for MKL, the `weight` itself."""
    import torch

    from trtspec.runtime.kernels import rowdot

    if kernel == ONEDNN:
        return torch.ops.mkldnn._linear_pointwise(x, packed, bias, "none", [], "")
    if kernel in ROW_KERNELS:
        return rowdot.linear(x, rowdot_weight, bias)
    return torch.nn.functional.linear(x, weight, bias)


def _in_turn(kernel: str, layer: Any, call: Any) -> Any:
    """A call of `kernel` for timing it (linear_choice.choose): on the next of enough random weights
    of `layer`'s shape each time, IN_TURN_BYTES of them (at most IN_TURN_MOST), built on first use
    and gone with the call; `call` itself where one weight of the shape is that big already (lm_head).

    Why (2-core AVX-512 EPYC, docs/BENCHMARKS-log.md, "Kernel timings over copies in turn"): called again
    and again on one weight in the caches, oneDNN over the row kernel read 1.17-1.82 per SmolLM2
    layer shape (gate and up 1.19-1.29: near the margin a challenger needs); in turn over 64 MB of
    copies 1.44-1.86 (gate and up 1.55-1.58), steadier, and nearer a whole forward's 2x."""
    import torch

    count = min(IN_TURN_MOST, IN_TURN_BYTES // (layer.in_features * layer.out_features * 4))
    if count <= 1:
        return call
    cycle: list[Any] = []  # the copies, over and over: made on the first call

    def in_turn(x):
        if not cycle:
            generator = torch.Generator().manual_seed(2)  # its own: a load must not move torch's global one
            weights = (torch.randn(layer.out_features, layer.in_features, generator=generator) for _ in range(count))
            cycle.append(itertools.cycle([_copy_for(kernel, weight) for weight in weights]))
        return _run(kernel, x, *next(cycle[0]), layer.bias)

    return in_turn


def _copy_for(kernel: str, weight: Any) -> tuple[Any, Any, Any]:
    """(weight, packed, rowdot_weight) for `_run`: only what `kernel` reads."""
    import torch

    from trtspec.runtime.kernels import rowdot

    if kernel == ONEDNN:
        return None, torch.ops.mkldnn._reorder_linear_weight(weight, PACKED_FOR_ROWS), None
    if kernel in ROW_KERNELS:
        return None, None, rowdot.pack(weight, bfloat16=kernel == ROWDOT_BF16)
    return weight, None, None
