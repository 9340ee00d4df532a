"""Attention over the paged KV cache for a packed batch of sequences, the same numbers at any batch.

A batched forward packs every sequence's new tokens into one row of T tokens (no padding in the
linear layers). A `Layout` says which rows belong to which sequence, where their keys and values
go in the pool and which cached positions each row may see. Registered with transformers as the
attention implementation `trtspec_paged`, it replaces the model's attention: each layer writes
the new keys/values into the pool, then each sequence attends to its own cache.

Batch invariance, by construction (measured in tests/runtime/forward/test_rt_batch_invariance.py): a
query row at position p is computed by the same operations on operands of the same shape whatever
else is in the batch and however many tokens its own pass verifies. Float sums round by kernel
and shape, so the shapes are made a function of p alone:
- keys are read in windows of KEY_WINDOW positions: a row at p attends over the first
  ceil((p + 1) / KEY_WINDOW) * KEY_WINDOW keys, those past p masked to -inf (exactly zero weight);
  the rows of one pass are split where they cross a window edge;
- the matmuls take untransposed operands (the pool stores keys transposed), at least the rows
  this machine's GEMM kernels need to round a row alike at any count (trtspec.runtime.forward.gemm_rows
  probes it: 2 on the Intel machines first measured, 4 on an AMD EPYC; fewer are padded with
  zero rows that are then dropped), and products big enough for MKL (tiny ones fall back
  to a naive loop that rounds differently);
- query heads sharing a key head are stacked as rows (grouped-query attention, no copy of keys).
A row's result is then the same for any row count: verified for 1 and 2 threads
with several key heads; a GEMM split across threads inside one key head (a single KV head on
several threads) was measured to differ in the last bit now and then. Static-tree rows see keys
with holes and are exact up to float rounding only.

Where the compiled kernels build (trtspec.runtime.kernels.native), a layout attends in one call per
layer instead (trtspec.runtime.forward.attention_kernel): every row one fixed order of operations, batch-
invariant by construction and several times cheaper per call; the windows above still shape each
row's bias, and it reads keys only through its last visible one (the rest would weigh exactly 0). The products described here are torch's route: TRTSPEC_CPU_ATTENTION=torch,
a float64 model or gradients, or no compiler.

Without a layout (a caller running the model as a plain transformers model) the function is
transformers' own SDPA attention.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from trtspec.runtime.forward.products import allocate_products

if TYPE_CHECKING:
    from trtspec.runtime.cache.paged import SeqKV

NAME = "trtspec_paged"
KEY_WINDOW = 64  # keys are read in windows of this many positions (a multiple of any block size up to 64)


def window_end(position: int) -> int:
    """How many keys a row at `position` reads: its window's end."""
    return (position // KEY_WINDOW + 1) * KEY_WINDOW


@dataclass
class Segment:
    """Rows [first, last) of the packed batch in one key window: they read `keys` keys."""

    first: int
    last: int
    keys: int
    bias: Any  # [last - first, keys] float: 0 where the row sees the key, -inf where it does not


@dataclass
class Entry:
    """One sequence of the batch: its cache, its segments, its gather index if scattered."""

    kv: SeqKV
    segments: list[Segment]
    gather: Any = None  # [keys of the last segment] long pool slots, when the block table is not one run


@dataclass
class Layout:
    """Where a packed batch's rows go and what they see; built once per forward, used by every layer."""

    entries: list[Entry]
    write_slots: Any  # [T] long: pool slot of every packed row
    pool: Any = None
    min_rows: int = 2  # rows per matrix product, at least (trtspec.runtime.forward.gemm_rows)
    groups: list[Any] | None = None  # Group / StridedGroup, built by the first layer that attends (it knows the head counts)
    kernel_rows: Any = None  # attention_kernel.KernelRows, False for torch's products; set by the first layer

    @classmethod
    def build(cls, kvs: list[SeqKV], lengths: list[int], masks: list[Any]) -> Layout:
        """`masks[i]`: [rows, past + rows] bool of the keys each new row sees, or None for causal."""
        import torch

        from trtspec.runtime.forward.gemm_rows import min_rows

        entries, slots, start = [], [], 0
        for kv, rows, mask in zip(kvs, lengths, masks, strict=True):
            past = kv.length
            segments, row = [], 0
            while row < rows:
                end = window_end(past + row)
                stop = min(rows, end - past)
                seen = torch.zeros(stop - row, end, dtype=torch.bool)
                if mask is None:
                    positions = torch.arange(past + row, past + stop)
                    seen[:] = torch.arange(end)[None, :] <= positions[:, None]
                else:
                    width = min(end, past + rows)
                    seen[:, :width] = mask[row:stop, :width]
                bias = torch.zeros(stop - row, end).masked_fill_(~seen, float("-inf"))
                segments.append(Segment(start + row, start + stop, end, bias))
                row = stop
            gather = None
            if kv.table.base is None:
                gather = torch.tensor(kv.table.slots(0, segments[-1].keys))
            entries.append(Entry(kv, segments, gather))
            slots.extend(kv.table.slots(past, past + rows))
            start += rows
        pool = kvs[0].pool if kvs else None
        return cls(entries, torch.tensor(slots, dtype=torch.long), pool, min_rows())

    def attend_unrotated(self, layer: int, query, key, value, cos, sin, head_dim: int, scaling: float):
        """`attend` for a Llama layer's projections before its rotary embedding (rotate-half form),
        on the compiled kernels: the same numbers as rotating with torch and calling `attend`
        (trtspec.runtime.forward.attention_kernel). None where the kernel route does not apply: the caller
        rotates and calls `attend`.
        # query: [1, T, heads * head_dim]; key, value: [1, T, kv_heads * head_dim]; cos, sin: [1, T, head_dim]"""
        import torch

        if self.kernel_rows is None:
            from trtspec.runtime.forward.attention_kernel import KernelRows

            rows = query.shape[1]
            shaped = query.view(1, rows, -1, head_dim).transpose(1, 2)
            self.kernel_rows = KernelRows.build(self, shaped) or False
        if not self.kernel_rows or cos.dtype != torch.float32 or sin.dtype != torch.float32:
            return None
        return self.kernel_rows.attend_unrotated(self.pool, layer, self.write_slots, query, key, value, cos, sin,
                                                 head_dim, scaling)

    def attend(self, layer: int, query, key, value, scaling: float):
        """# query: [1, heads, T, head_dim]; key, value: [1, kv_heads, T, head_dim] (new rows)
        Returns [1, T, heads, head_dim], as transformers' attention functions do. Values of a
        smaller head size (multi-head latent attention's v_head_dim) are stored zero-padded
        (trtspec.runtime.cache.paged), and the output's padded columns, all zero, dropped."""
        out = self._attend(layer, query, key, value, scaling)
        return out if value.shape[-1] == out.shape[-1] else out[..., :value.shape[-1]]

    def _attend(self, layer: int, query, key, value, scaling: float):
        self.pool.write(layer, self.write_slots, key[0], value[0])
        if self.kernel_rows is None:
            from trtspec.runtime.forward.attention_kernel import KernelRows

            self.kernel_rows = KernelRows.build(self, query) or False
        if self.kernel_rows:
            return self.kernel_rows.attend(self.pool, layer, query, scaling)
        if len(self.entries) == 1 and len(self.entries[0].segments) == 1:  # one sequence, one window
            entry = self.entries[0]
            keys, values = self.pool.read(layer, entry.kv.table, entry.segments[0].keys, entry.gather)
            rows = attend_rows(query[0], keys, values, entry.segments[0].bias, scaling, self.min_rows)
            return rows.transpose(0, 1).unsqueeze(0)
        heads, total, head_dim = query.shape[1:]
        out = query.new_empty(total, heads, head_dim)
        if self.groups is None:  # products into preallocated buffers take no gradient: autograd keeps the single path
            self.groups = [] if query.requires_grad else Group.plan(self.entries, heads, self.pool.keys[0].shape[0],
                                                                    head_dim, self.min_rows, query.dtype)
        grouped = set()
        for group in self.groups:
            group.attend(self.pool, layer, query[0], scaling, out)
            grouped.update(group.members)
        for index, entry in enumerate(self.entries):
            if index in grouped:
                continue
            keys, values = self.pool.read(layer, entry.kv.table, entry.segments[-1].keys, entry.gather)
            for seg in entry.segments:
                rows = attend_rows(query[0, :, seg.first:seg.last], keys[:, :, :seg.keys], values[:, :seg.keys],
                                   seg.bias, scaling, self.min_rows)
                out[seg.first:seg.last] = rows.transpose(0, 1)
        return out.unsqueeze(0)



class Group:
    """Sequences of one batch whose new rows lie in one key window and have the same row count and
    key count (a decode batch, mostly): their attention runs as the same per-sequence matrix
    products attend_rows would run (same shapes, same kernels, so the same numbers), but the
    steps around the products (padding, scale, bias, softmax, scatter back) run once for the
    group instead of once per sequence. At batch 8 those small steps were most of attention's
    time, and attention about 40 % of a decode step (docs/BENCHMARKS-log.md, "Threads").

    Built once per forward, its buffers reused by every layer. The padding rows of `queries` are
    zero, as attend_rows pads them."""

    def __init__(self, entries: list[Entry], members: list[int], heads: int, kv_heads: int, head_dim: int,
                 min_rows: int, dtype: Any):
        import torch

        first = entries[members[0]].segments[0]
        self.members = members
        self.entries = [entries[i] for i in members]
        self.rows, self.keys = first.last - first.first, first.keys
        self.heads, self.kv_heads, self.head_dim = heads, kv_heads, head_dim
        self.group = heads // kv_heads
        width = max(self.group * self.rows, min_rows)  # attend_rows' padding
        n = len(members)
        # [n * rows] long: the packed rows of every member, member-major
        self.row_index = torch.tensor([row for e in self.entries for row in range(e.segments[0].first, e.segments[0].last)])
        # [n, 1, 1, rows, keys]: each member's bias, broadcast over the heads
        self.bias = torch.stack([e.segments[0].bias for e in self.entries])[:, None, None]
        allocate_products(self, (n, kv_heads), width, head_dim, dtype)
        # per-member views, made once: indexing them per layer was a tenth of attention's time
        self.views = list(zip(self.queries.unbind(0), self.scores.unbind(0), self.weights.unbind(0),
                              self.outputs.unbind(0), strict=True))

    @classmethod
    def plan(cls, entries: list[Entry], heads: int, kv_heads: int, head_dim: int, min_rows: int,
             dtype: Any) -> list[Any]:
        """Groups of two or more one-window entries with equal (rows, keys); the rest stay single.
        Members evenly spaced in the pool (each in its lane, trtspec.runtime.cache.paged) get a
        StridedGroup: one product per key head for all of them."""
        from trtspec.runtime.forward.attention_strided import StridedGroup, spacing

        alike: dict[tuple[int, int], list[int]] = {}
        for index, entry in enumerate(entries):
            if len(entry.segments) == 1:
                segment = entry.segments[0]
                alike.setdefault((segment.last - segment.first, segment.keys), []).append(index)
        groups: list[Any] = []
        for members in alike.values():
            if len(members) < 2:
                continue
            step = spacing(entries, members, kv_heads)
            groups.append(cls(entries, members, heads, kv_heads, head_dim, min_rows, dtype) if step is None else
                          StridedGroup(entries, members, heads, kv_heads, head_dim, min_rows, dtype, step))
        return groups

    def attend(self, pool: Any, layer: int, query: Any, scaling: float, out: Any) -> None:
        """Write the group's rows of `out`. # query: [heads, T, head_dim]; out: [T, heads, head_dim]"""
        import torch

        n = len(self.entries)
        picked = query.index_select(1, self.row_index)  # [heads, n * rows, head_dim]
        self.real_queries.copy_(picked.view(self.kv_heads, self.group, n, self.rows, -1).permute(2, 0, 1, 3, 4))
        values = []
        for entry, (queries, scores, _, _) in zip(self.entries, self.views, strict=True):
            keys_t, vals = pool.read(layer, entry.kv.table, self.keys, entry.gather)
            torch.bmm(queries, keys_t, out=scores)  # [kv_heads, width, keys]
            values.append(vals)
        self.scores.mul_(scaling)
        self.real_scores.add_(self.bias)
        torch._softmax(self.scores, -1, False, out=self.weights)
        for vals, (_, _, weights, outputs) in zip(values, self.views, strict=True):
            torch.bmm(weights, vals, out=outputs)  # [kv_heads, width, head_dim]
        rows = self.real_outputs.permute(0, 3, 1, 2, 4).reshape(n * self.rows, self.heads, self.head_dim)
        out.index_copy_(0, self.row_index, rows)


def attend_rows(query, keys_t, values, bias, scaling: float, min_rows: int):
    """Attention of some query rows of one sequence over its keys.

    # query: [heads, rows, head_dim]; keys_t: [kv_heads, head_dim, S] (transposed);
    # values: [kv_heads, S, head_dim]; bias: [rows, S] float (0: the row sees that key, -inf: not)
    Returns [heads, rows, head_dim]. Each product gets at least `min_rows` rows.

    The bias is added in place after scaling, as masked_fill would set -inf (x + 0 is x, x + -inf
    is -inf for the finite scores of zeroed or stale slots): the same numbers, fewer passes.
    """
    import torch

    heads, rows, head_dim = query.shape
    kv_heads = keys_t.shape[0]
    group = heads // kv_heads
    real = group * rows
    pad = max(0, min_rows - real)  # too few rows take a GEMM kernel that rounds differently (gemm_rows.py)
    if pad:  # zero rows below the real ones; each output row depends on its own input row only
        stacked = query.new_zeros(kv_heads, real + pad, head_dim)
        stacked[:, :real].view(kv_heads, group, rows, head_dim).copy_(query.unflatten(0, (kv_heads, group)))
    else:
        stacked = query.reshape(kv_heads, real, head_dim)  # head h reads kv head h // group
    scores = torch.bmm(stacked, keys_t).mul_(scaling)  # [kv_heads, real (+ pad), S]
    scores[:, :real].view(kv_heads, group, rows, -1).add_(bias)
    out = torch.bmm(scores.softmax(dim=-1), values)  # [kv_heads, real (+ pad), head_dim]
    if pad:
        out = out[:, :real]
    return out.reshape(heads, rows, head_dim)


def paged_attention(module, query, key, value, attention_mask, scaling=None, dropout=0.0, **kwargs):
    """transformers attention interface: the paged batch when a layout is passed, else SDPA."""
    layout = kwargs.pop("trtspec_layout", None)
    if layout is None:
        from transformers.integrations.sdpa_attention import sdpa_attention_forward

        return sdpa_attention_forward(module, query, key, value, attention_mask, scaling=scaling, dropout=dropout,
                                      **kwargs)
    scale = scaling if scaling is not None else query.shape[-1] ** -0.5
    return layout.attend(module.layer_idx, query, key, value, scale), None


_REGISTERED: list[bool] = []


def use_paged_attention(model: Any) -> None:
    """Make `model` run attention through `paged_attention`; without a layout it still behaves
    as the SDPA model it was."""
    if not _REGISTERED:
        from transformers import AttentionInterface
        from transformers.masking_utils import ALL_MASK_ATTENTION_FUNCTIONS, sdpa_mask

        AttentionInterface.register(NAME, paged_attention)
        ALL_MASK_ATTENTION_FUNCTIONS.register(NAME, sdpa_mask)
        _REGISTERED.append(True)
    config = model.config if hasattr(model, "config") else model
    config._attn_implementation = NAME
