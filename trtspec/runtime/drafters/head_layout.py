"""The EAGLE-3 head's attention layout, written straight into the compiled kernel's arrays.

Why (docs/BENCHMARKS-log.md, "The head's attention layout without per-row tensors"): a head forward
is one decoder layer over a few rows (one a session in a chain step, the verified rows in a
catch-up, a tree level's nodes), and `Layout.build` then `KernelRows.build` made ~30 small torch
operations a forward to say what those rows see (a [rows, window] bias per segment built with
zeros, arange, compare and masked_fill, its last seen key found with flip and argmax, the arrays
concatenated). Here it is known from each row's cache index q (kv.length + its row):
- a causal row reads keys [0, round8(q + 1)) (what `_seen_keys` computes for it) with bias 0 on
  keys <= q and -inf after. One constant vector, `size` zeros then eight -inf, gives that bias to
  every causal row from offset size - q - 1: key j reads 0 for j <= q and -inf for the at most
  seven keys past q that it reads;
- a tree level's row (a mask whose new columns are the identity: each node sees the cached
  positions its mask allows and itself, no other node of its level; eagle3_tree and
  dynamic_tree feed these) also reads through round8(q + 1), its bias the mask's 0 / -inf, one
  [rows, round8(kv.length + rows)] block a session.
The long arrays go into one tensor, sliced.

Contract: `head_layout` returns a Layout whose kernel rows give the compiled attention the same
numbers `Layout.build` then `KernelRows.build` give it (the same base, gather, gather_at,
key_counts and write slots, and the same bias value at every key a row reads;
tests/runtime/drafters/test_rt_head_layout.py checks both, and test_rt_eagle3_forward compares the
head's forward through it with the module route's through Layout.build bit for bit), or None
where the kernel route would not take the batch or a mask is not a tree level's (the caller
builds a Layout). It reads the caches and masks and writes nothing.
"""

from __future__ import annotations

from typing import Any

_BIAS: list = []  # [(bias, size)]: size zeros then 8 x -inf, grown (doubled) when a position passes size
FIRST_SIZE = 4096


def causal_bias(top: int) -> tuple[Any, int]:
    """(bias, size) with size >= top: the causal row at cache index q reads its keys' bias from
    bias[size - q - 1:]. # bias: [size + 8] float32"""
    import torch

    known = _BIAS[0] if _BIAS else None
    if known is None or known[1] < top:
        size = max(top, FIRST_SIZE if known is None else 2 * known[1])
        bias = torch.zeros(size + 8, dtype=torch.float32)
        bias[size:] = float("-inf")
        known = (bias, size)
        _BIAS[:] = [known]  # one assignment: a thread still reading the older one keeps its own
    return known


def head_layout(kvs: list[Any], lengths: list[int], masks: list[Any], heads: int, head_dim: int) -> Any:
    """The Layout of `lengths[i]` new rows after each cache `kvs[i]` (at kv.length on), causal where
    `masks[i]` is None, else a tree level's ([rows, kv.length + rows] bool), its kernel rows filled
    in; or None (module docstring). `heads`, `head_dim`: the attention's query heads and head size."""
    import torch

    from trtspec.runtime.forward import attention_kernel
    from trtspec.runtime.forward.attention import Layout, window_end

    pool = kvs[0].pool if kvs else None
    if (pool is None or torch.is_grad_enabled() or pool.keys[0].dtype != torch.float32 or head_dim % 8
            or heads % pool.keys[0].shape[0] or not attention_kernel.wanted()):
        return None
    pieces: list[Any] = []  # the bias: the causal vector (where a row is causal), then each tree level's block
    causal = 0  # the causal vector's size, once it is the first piece
    if any(mask is None for mask in masks):
        vector, causal = causal_bias(max(kv.length + rows for kv, rows in zip(kvs, lengths, strict=True)))
        pieces.append(vector)
    offset = sum(piece.numel() for piece in pieces)
    slots: list[int] = []
    base: list[int] = []
    gather_at: list[int] = []
    counts: list[int] = []
    bias_at: list[int] = []
    gather: list[int] = []
    for kv, rows, mask in zip(kvs, lengths, masks, strict=True):
        past, table = kv.length, kv.table
        end = window_end(past + rows - 1)  # the last row's key window: Layout.build's last segment
        if end > table.capacity:
            return None  # KernelRows.build refuses it too (and Layout.build says why if past the slots)
        if table.base is None:
            start = len(gather)
            gather += table.slots(0, end)
            slots += gather[start + past:start + past + rows]
            base += [-1] * rows
            gather_at += [start] * rows
        else:
            slots += range(table.base + past, table.base + past + rows)
            base += [table.base] * rows
            gather_at += [0] * rows
        counts += [(q + 8) // 8 * 8 for q in range(past, past + rows)]  # through key q, rounded up to 8
        if mask is None:
            bias_at += [causal - q - 1 for q in range(past, past + rows)]
            continue
        if (tuple(mask.shape) != (rows, past + rows)
                or not torch.equal(mask[:, past:], torch.eye(rows, dtype=torch.bool))):
            return None  # not a tree level's mask: Layout.build reads it
        width = (past + rows + 7) // 8 * 8
        block = torch.full((rows, width), float("-inf"), dtype=torch.float32)
        block[:, :past + rows].masked_fill_(mask, 0.0)
        pieces.append(block.view(-1))
        bias_at += range(offset, offset + rows * width, width)
        offset += rows * width
    total = len(slots)
    packed = torch.tensor(slots + base + gather_at + counts + bias_at + (gather or [0]), dtype=torch.long)
    rows_of = attention_kernel.KernelRows(
        base=packed[total:2 * total], gather=packed[5 * total:], gather_at=packed[2 * total:3 * total],
        key_counts=packed[3 * total:4 * total], bias=pieces[0] if len(pieces) == 1 else torch.cat(pieces),
        bias_at=packed[4 * total:5 * total])
    return Layout(entries=[], write_slots=packed[:total], pool=pool, kernel_rows=rows_of)
