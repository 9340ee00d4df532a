"""Attention of a packed batch in one compiled call per layer (paged_attend.cpp, in the library
trtspec.runtime.kernels.native builds): every sequence, every window, every head at once.

Why (docs/BENCHMARKS-log.md, "Attention in one call"): torch's route (trtspec.runtime.forward.attention's
products per sequence, Group and StridedGroup) spends most of attention's time on calls, not
arithmetic: ~8 ms of a decode step at one sequence and ~27 ms at eight on SmolLM2 (2-core AVX2
AMD EPYC), growing with the batch. The kernel reads each row's keys in place from the pool (a
slice, or the block table's slots) and writes the output rows directly.

Batch invariance by construction: a row's output is one fixed order of operations over its own
query, keys, values and bias (paged_attend.cpp), so it is the same alone, in any batch, in any
window split, at any thread count; tests/runtime/forward/test_rt_attention_kernel.py checks it bit for bit
and against torch's attention to float rounding. Its numbers differ from torch's products in the
last bits; the engine uses one route or the other, never both in one process.

Used where the library runs and the batch is float32 inference with a head size and key windows
of multiples of 8; TRTSPEC_CPU_ATTENTION=torch keeps torch's products (to compare the two).
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import Any


def wanted() -> bool:
    """The kernel route, unless TRTSPEC_CPU_ATTENTION=torch or the library cannot run here."""
    from trtspec.runtime.kernels import native

    return os.environ.get("TRTSPEC_CPU_ATTENTION", "kernel") != "torch" and native.available()


@dataclass
class KernelRows:
    """What every packed row of a forward reads, as the kernel's arrays; built once, used by every layer."""

    base: Any        # [T] long: first pool slot of the row's keys when its table is one run, else -1
    gather: Any      # [G] long: the slots of scattered tables, one run per such sequence (at least one element)
    gather_at: Any   # [T] long: where the row's sequence's slots start in `gather`
    key_counts: Any  # [T] long: keys the row reads (past its last visible key only to the next multiple of 8)
    bias: Any        # [B] float: every segment's [rows, keys] bias, flattened one after another
    bias_at: Any     # [T] long: where the row's [keys] bias starts in `bias`

    @classmethod
    def build(cls, layout: Any, query: Any) -> KernelRows | None:
        """The rows of `layout`, or None where the kernel does not apply (the torch route then)."""
        import torch

        heads, total, head_dim = query.shape[1:]
        pool = layout.pool
        if (query.dtype != torch.float32 or query.requires_grad or head_dim % 8 or pool is None
                or pool.keys[0].dtype != torch.float32 or heads % pool.keys[0].shape[0] or not wanted()):
            return None
        base, gather_at, key_counts, bias_at, gathers, biases = [], [], [], [], [], []
        gathered = biased = 0
        for entry in layout.entries:
            table_base, start = entry.kv.table.base, 0
            if table_base is None:
                table_base, start = -1, gathered
                gathers.append(entry.gather)
                gathered += len(entry.gather)
            for segment in entry.segments:
                if segment.keys % 8 or segment.keys > entry.kv.table.capacity:  # the kernel reads every key it is given
                    return None
                rows = segment.last - segment.first
                base += [table_base] * rows
                gather_at += [start] * rows
                key_counts += _seen_keys(segment.bias)
                bias_at += range(biased, biased + rows * segment.keys, segment.keys)
                biases.append(segment.bias.reshape(-1))
                biased += rows * segment.keys
        if len(base) != total:
            raise AssertionError(f"the layout covers {len(base)} rows of a {total}-row batch")
        longs = {"dtype": torch.long}
        return cls(torch.tensor(base, **longs), torch.cat(gathers) if gathers else torch.zeros(1, **longs),
                   torch.tensor(gather_at, **longs), torch.tensor(key_counts, **longs),
                   torch.cat(biases).to(torch.float32), torch.tensor(bias_at, **longs))

    def attend(self, pool: Any, layer: int, query: Any, scaling: float):
        """# query: [1, heads, T, head_dim] -> [1, T, heads, head_dim] (as Layout.attend)"""
        rows = query[0].transpose(0, 1)
        if not rows.is_contiguous():
            rows = rows.contiguous()
        return self._attend_rows(pool, layer, rows, scaling)

    def attend_unrotated(self, pool: Any, layer: int, slots: Any, query: Any, key: Any, value: Any, cos: Any, sin: Any,
                         head_dim: int, scaling: float):
        """Rotate the new rows' queries and keys, write keys and values into the cache, attend
        (rope_write.cpp, then paged_attend.cpp): the numbers of Layout.attend after torch's rotation.
        # query: [1, T, heads * head_dim]; key, value: [1, T, kv_heads * head_dim]; cos, sin: [1, T, head_dim];
        slots: [T] long -> [1, T, heads, head_dim]"""
        import torch

        from trtspec.runtime.kernels import native

        query, key, value = (x[0] if x[0].stride(-1) == 1 else x[0].contiguous() for x in (query, key, value))
        cos, sin = cos[0].contiguous(), sin[0].contiguous()
        total, heads = query.shape[0], query.shape[1] // head_dim
        keys, values = pool.keys[layer], pool.values[layer]
        rotated = torch.empty(total, heads, head_dim, dtype=query.dtype)
        native.library().rope_write(
            query.data_ptr(), query.stride(0), key.data_ptr(), key.stride(0), value.data_ptr(), value.stride(0), total,
            heads, keys.shape[0], head_dim, cos.data_ptr(), sin.data_ptr(), slots.data_ptr(), keys.data_ptr(),
            keys.stride(1), values.data_ptr(), values.shape[1], rotated.data_ptr())
        return self._attend_rows(pool, layer, rotated, scaling)

    def _attend_rows(self, pool: Any, layer: int, rows: Any, scaling: float):
        """# rows: [T, heads, head_dim] contiguous queries -> [1, T, heads, head_dim]"""
        import torch

        from trtspec.runtime.kernels import native

        total, heads, head_dim = rows.shape
        keys, values = pool.keys[layer], pool.values[layer]  # [kv_heads, head_dim, slots] (rows padded), [kv_heads, slots, head_dim]
        kv_heads, _, slots = keys.shape
        out = torch.empty(total, heads, head_dim, dtype=rows.dtype)
        native.library().paged_attend(
            rows.data_ptr(), total, heads, kv_heads, head_dim, keys.data_ptr(), keys.stride(1), values.data_ptr(),
            slots, self.base.data_ptr(), self.gather.data_ptr(), self.gather_at.data_ptr(),
            self.key_counts.data_ptr(), self.bias.data_ptr(), self.bias_at.data_ptr(), scaling, out.data_ptr(),
            torch.get_num_threads())
        return out.unsqueeze(0)


def _seen_keys(bias: Any) -> list[int]:
    """Keys each row of a segment needs read: through its last visible key, rounded up to 8.

    Why not its whole key window: the keys past a row's last visible one have weight exactly 0
    (bias -inf), and in paged_attend.cpp a zero weight changes nothing: the maximum ignores -inf,
    e^-inf adds +0.0 to its lane's sum and 0 x value adds 0 to every output chain, and key j stays
    in lane j mod 8 however many keys follow. So the numbers are the window's, bit for bit, for
    ~28 fewer keys a row on average (a decode row reads its window of 64 up to its position).
    # bias: [rows, keys] float, 0 where seen, -inf where not"""
    import torch

    keys = bias.shape[1]
    seen = bias > float("-inf")
    last = keys - seen.flip(-1).to(torch.int8).argmax(dim=-1)  # one past the last seen key (keys when none: no row has none)
    return torch.clamp((last + 7) // 8 * 8, max=keys).tolist()
