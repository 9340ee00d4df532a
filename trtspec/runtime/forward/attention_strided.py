"""Attention of a group of sequences that sit evenly spaced in the KV pool: one product per key
head for the whole group, instead of two per sequence.

Why (measured on SmolLM2, 2 threads, an AVX2 AMD EPYC; docs/BENCHMARKS-log.md "Attention in lanes"):
at 8 decoding sequences attention took ~33 ms of a ~160 ms engine step against ~10 ms at one, and
most of that was two small matrix products per sequence per layer (480 calls a step, each
~20 us of call overhead and scattered key reads), not the arithmetic. The scheduler's allocator
starts every sequence at a lane (a multiple of the longest sequence's blocks; trtspec.runtime.cache.paged),
so the decode batch's keys lie one lane apart: a strided view over the pool then holds every
member's [head_dim, keys] matrix of one key head, and one batched product multiplies them all.

Same numbers as Group (trtspec.runtime.forward.attention) and as each sequence alone: every member's
product is the same matrix product (rows, keys, head_dim and leading dimensions all equal), and a
batched product computes each matrix of its batch by itself; scale, bias and softmax are the same
elementwise and per-row operations. tests/runtime/forward/test_rt_attention_groups.py checks each member
against its one-entry layout bit for bit, tests/runtime/forward/test_rt_batch_invariance.py through the
model. Places between members (a free lane) are computed too, from zero queries over whatever
the pool holds there, and dropped; `spacing` takes this path only where its products cost less.
"""

from __future__ import annotations

from typing import Any

from trtspec.runtime.forward.products import allocate_products

# A product call costs about as much as this many of attention's small matrices (per-sequence
# calls of 3 matrices ~48 us, strided calls of 8 ~75 us: ~32 us a call, ~5.4 us a matrix; SmolLM2,
# 128 keys, 2 threads, the AVX2 EPYC): strided pays off only with more members than key heads.
CALL_IN_MATRICES = 6


def spacing(entries: list[Any], members: list[int], kv_heads: int) -> int | None:
    """The pool slots between neighbouring members when every member reads a contiguous run, they
    sit at multiples of one spacing from the first (free places between them allowed), and one
    product per key head over all places costs less than two per member; None otherwise (then
    Group multiplies per sequence)."""
    tables = [entries[i].kv.table for i in members]
    if any(entries[i].gather is not None or table.base is None for i, table in zip(members, tables, strict=True)):
        return None
    bases = sorted(table.base for table in tables)
    step = min(later - earlier for earlier, later in zip(bases, bases[1:], strict=False))
    if step <= 0 or any((base - bases[0]) % step for base in bases):
        return None
    places = (bases[-1] - bases[0]) // step + 1
    cheaper = kv_heads * (CALL_IN_MATRICES + places) < len(bases) * (CALL_IN_MATRICES + kv_heads)
    return step if cheaper else None


class StridedGroup:
    """Group's job (same members, same `attend`) for members `step` pool slots apart."""

    def __init__(self, entries: list[Any], members: list[int], heads: int, kv_heads: int, head_dim: int,
                 min_rows: int, dtype: Any, step: int):
        import torch

        self.members = sorted(members, key=lambda i: entries[i].kv.table.base)
        self.entries = [entries[i] for i in self.members]
        first = self.entries[0].segments[0]
        self.rows, self.keys = first.last - first.first, first.keys
        self.heads, self.kv_heads, self.head_dim = heads, kv_heads, head_dim
        self.group = heads // kv_heads
        self.first_slot, self.step = self.entries[0].kv.table.base, step
        places = [(e.kv.table.base - self.first_slot) // step for e in self.entries]
        span = places[-1] + 1
        self.places = torch.tensor(places)
        self.dense = span == len(places)  # no free place between members: plain copies, no index ops
        width = max(self.group * self.rows, min_rows)  # attend_rows' padding
        # [n * rows] long: the packed rows of every member, in pool order
        self.row_index = torch.tensor([row for e in self.entries for row in range(e.segments[0].first, e.segments[0].last)])
        # [span, 1, rows, keys]: each member's bias at its place (0 elsewhere), broadcast over key and query heads
        self.bias = torch.zeros(span, 1, self.rows, self.keys, dtype=dtype)
        self.bias[self.places] = torch.stack([e.segments[0].bias for e in self.entries])[:, None].to(dtype)
        # per key head, per place: [kv_heads, span, width, ...]; the queries of free places stay zero
        allocate_products(self, (kv_heads, span), width, head_dim, dtype)

    def attend(self, pool: Any, layer: int, query: Any, scaling: float, out: Any) -> None:
        """Write the group's rows of `out`. # query: [heads, T, head_dim]; out: [T, heads, head_dim]"""
        import torch

        n, span = len(self.entries), self.queries.shape[1]
        picked = query.index_select(1, self.row_index).view(self.kv_heads, self.group, n, self.rows, -1)
        if self.dense:
            self.real_queries.copy_(picked.transpose(1, 2))
        else:
            self.real_queries.index_copy_(1, self.places, picked.transpose(1, 2))
        keys, values = pool.keys[layer], pool.values[layer]  # [kv_heads, head_dim, slots], [kv_heads, slots, head_dim]
        for head in range(self.kv_heads):
            head_keys = keys[head]
            lanes = head_keys.as_strided((span, self.head_dim, self.keys), (self.step, head_keys.stride(0), 1),
                                         head_keys.storage_offset() + self.first_slot)
            torch.bmm(self.queries[head], lanes, out=self.scores[head])  # [span, width, keys]
        self.scores.mul_(scaling)
        self.real_scores.add_(self.bias)
        torch._softmax(self.scores, -1, False, out=self.weights)
        for head in range(self.kv_heads):
            head_values = values[head]
            row = head_values.stride(0)
            lanes = head_values.as_strided((span, self.keys, self.head_dim), (self.step * row, row, 1),
                                           head_values.storage_offset() + self.first_slot * row)
            torch.bmm(self.weights[head], lanes, out=self.outputs[head])  # [span, width, head_dim]
        real = self.real_outputs if self.dense else self.real_outputs.index_select(1, self.places)
        rows = real.permute(1, 3, 0, 2, 4).reshape(n * self.rows, self.heads, self.head_dim)
        out.index_copy_(0, self.row_index, rows)
