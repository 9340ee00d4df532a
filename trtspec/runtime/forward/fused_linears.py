"""Projections that read the same input, in one row-kernel call: a Llama layer's q, k and v, and
its MLP's gate and up.

Why: a decode step of SmolLM2 makes 211 linear-layer calls; each costs a Python wrapper, a foreign
call and an OpenMP fork and join whatever its size, and the small ones split unevenly over the
threads (k and v have 64 groups of rows: 40 for one thread, 24 for the other at 2 threads). In one
call, q, k and v are 320 groups and gate and up 1024, split evenly, and a layer makes 4 calls
instead of 7 (docs/BENCHMARKS-log.md, "Fewer, larger calls").

Contract: `fuse_siblings(model)`, after prepack_linears, gives every module whose `q_proj`,
`k_proj`, `v_proj` (or `gate_proj`, `up_proj`) are PackedLinear layers on the row kernel, with
one input size, row counts that are multiples of the kernel's group (but the last's) and all or
no biases, and single rows not padded (min_rows 1), a `Fused` of them, kept on the first member (`.fused`; it goes with the member when
trtspec.runtime.forward.prepack.prepacked swaps the nn.Linear back). The stacked pack costs no memory:
each member's own row-kernel copy becomes its slice of it (the packed layout keeps a group's rows
together, so a slice at a group boundary is exactly the member's own pack). Outputs are
bit-identical to the separate calls: the row kernel computes every output alone, in one fixed
order (trtspec.runtime.kernels.rowdot), whichever other rows share the weight matrix.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from trtspec.runtime.forward.linear_choice import ROW_KERNELS

SIBLINGS = (("q_proj", "k_proj", "v_proj"), ("gate_proj", "up_proj"))


@dataclass
class Fused:
    """Linear layers of one input stacked: `packed` (rowdot.Packed) over all their rows."""

    members: tuple[Any, ...]  # the PackedLinear layers, in stacking order
    kernel: str               # the row kernel they all run on (float32 or bfloat16)
    packed: Any
    bias: Any                 # [sum of out_features] or None
    sizes: tuple[int, ...]    # out_features of each member

    def usable(self) -> bool:
        """Every member still runs on the row kernel (its kernel was not switched after fusing)."""
        return all(member.kernel == self.kernel for member in self.members)

    def __call__(self, x: Any) -> list[Any]:
        """Each member's output, as views of one [..., sum of out_features] result."""
        from trtspec.runtime.kernels import rowdot

        return list(rowdot.linear(x, self.packed, self.bias).split(self.sizes, dim=-1))


def fuse_siblings(model: Any) -> int:
    """Stack every fusable sibling set in `model` (module docstring); returns how many."""
    count = 0
    for module in model.modules():
        for names in SIBLINGS:
            members = tuple(getattr(module, name, None) for name in names)
            fused = fuse(members)
            if fused is not None:
                members[0].fused = fused
                count += 1
    return count


def fuse(members: tuple[Any, ...]) -> Fused | None:
    """`members` stacked, or None where they cannot be (module docstring)."""
    import torch

    from trtspec.runtime.kernels import native, rowdot

    kernels = {getattr(member, "kernel", None) for member in members}
    if (len(kernels) != 1 or not kernels <= set(ROW_KERNELS)
            or any(getattr(member, "rowdot_weight", None) is None for member in members)):
        return None
    group = native.library().rowdot_group()
    sizes = tuple(member.out_features for member in members)
    if (len({member.in_features for member in members}) != 1 or any(size % group for size in sizes[:-1])
            or len({member.bias is None for member in members}) != 1
            or any(member.min_rows != 1 for member in members)):  # a padded layer keeps its own calls
        return None
    stacked = torch.cat([member.rowdot_weight.data for member in members])  # only the last has padding rows
    bias = None if members[0].bias is None else torch.cat([member.bias.detach() for member in members])
    start = 0
    for member, size in zip(members, sizes, strict=True):
        rows = -(-size // group) * group
        member.rowdot_weight = rowdot.Packed(stacked[start:start + rows], size)
        start += rows
    return Fused(members, kernels.pop(), rowdot.Packed(stacked, sum(sizes)), bias, sizes)
