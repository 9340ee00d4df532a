"""Attention over the paged KV cache for a packed batch of sequences, the same numbers at any batch.

A batched forward packs every sequence's new tokens into one row of T tokens (no padding in the
linear layers). A `Layout` says which rows belong to which sequence, where their keys and values
go in the pool and which cached positions each row may see. Registered with transformers as the
attention implementation `trtspec_paged`, it replaces the model's attention: each layer writes
the new keys/values into the pool, then each sequence attends to its own cache.

Batch invariance, by construction (measured in tests/runtime/test_rt_batch_invariance.py): a
query row at position p is computed by the same operations on operands of the same shape whatever
else is in the batch and however many tokens its own pass verifies. Float sums round by kernel
and shape, so the shapes are made a function of p alone:
- keys are read in windows of KEY_WINDOW positions: a row at p attends over the first
  ceil((p + 1) / KEY_WINDOW) * KEY_WINDOW keys, those past p masked to -inf (exactly zero weight);
  the rows of one pass are split where they cross a window edge;
- the matmuls take untransposed operands (the pool stores keys transposed), at least two rows
  (a lone row is computed as two: one row takes another kernel), and products big enough for
  MKL (tiny ones fall back to a naive loop that rounds differently);
- query heads sharing a key head are stacked as rows (grouped-query attention, no copy of keys).
On this machine a row's result is then the same for any row count: verified for 1 and 2 threads
with several key heads; a GEMM split across threads inside one key head (a single KV head on
several threads) was measured to differ in the last bit now and then. Static-tree rows see keys
with holes and are exact up to float rounding only.

Without a layout (a caller running the model as a plain transformers model) the function is
transformers' own SDPA attention.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from trtspec.runtime.paged import SeqKV

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
    mask: Any  # [last - first, keys] bool


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

    @classmethod
    def build(cls, kvs: list[SeqKV], lengths: list[int], masks: list[Any]) -> Layout:
        """`masks[i]`: [rows, past + rows] bool of the keys each new row sees, or None for causal."""
        import torch

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
                segments.append(Segment(start + row, start + stop, end, seen))
                row = stop
            gather = None
            if kv.table.base is None:
                gather = torch.tensor(kv.table.slots(0, segments[-1].keys))
            entries.append(Entry(kv, segments, gather))
            slots.extend(kv.table.slots(past, past + rows))
            start += rows
        pool = kvs[0].pool if kvs else None
        return cls(entries, torch.tensor(slots, dtype=torch.long), pool)

    def attend(self, layer: int, query, key, value, scaling: float):
        """# query: [1, heads, T, head_dim]; key, value: [1, kv_heads, T, head_dim] (new rows)
        Returns [1, T, heads, head_dim], as transformers' attention functions do."""
        self.pool.write(layer, self.write_slots, key[0], value[0])
        heads, total, head_dim = query.shape[1:]
        out = query.new_empty(total, heads, head_dim)
        for entry in self.entries:
            keys, values = self.pool.read(layer, entry.kv.table, entry.segments[-1].keys, entry.gather)
            for seg in entry.segments:
                rows = attend_rows(query[0, :, seg.first:seg.last], keys[:, :, :seg.keys], values[:, :seg.keys],
                                   seg.mask, scaling)
                out[seg.first:seg.last] = rows.transpose(0, 1)
        return out.unsqueeze(0)


def attend_rows(query, keys_t, values, mask, scaling: float):
    """Attention of some query rows of one sequence over its keys.

    # query: [heads, rows, head_dim]; keys_t: [kv_heads, head_dim, S] (transposed);
    # values: [kv_heads, S, head_dim]; mask: [rows, S] bool (True: the row sees that key)
    Returns [heads, rows, head_dim].
    """
    import torch

    heads, rows, head_dim = query.shape
    kv_heads = keys_t.shape[0]
    group = heads // kv_heads
    stacked = query.reshape(kv_heads, group * rows, head_dim)  # head h reads kv head h // group
    lone = group * rows == 1
    if lone:  # a single row takes another matmul kernel that rounds differently (module docstring)
        stacked = torch.cat([stacked, stacked], dim=1)
    scores = torch.matmul(stacked, keys_t) * scaling  # [kv_heads, group * rows (or 2), S]
    if lone:
        scores = scores.masked_fill(~mask, float("-inf"))
    else:
        scores = scores.view(kv_heads, group, rows, -1).masked_fill(~mask, float("-inf")).view(kv_heads, group * rows, -1)
    out = torch.matmul(scores.softmax(dim=-1), values)  # [kv_heads, group * rows (or 2), head_dim]
    if lone:
        out = out[:, :1]
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
