"""The paged KV cache: a bounded pool of `tokens_per_block`-token blocks, and per-sequence views.

Vocabulary (as TensorRT-LLM's KV cache manager uses it): the *pool* holds `num_blocks` blocks of
`block_size` token slots for every layer; a sequence owns a *block table* (its block ids, in
order); its token i lives in slot `table[i // block_size] * block_size + i % block_size`.

- `BlockAllocator` hands out and takes back block ids; it never touches tensors. It prefers a
  contiguous run of blocks: then the sequence's keys are one slice of the pool and attention reads
  them in place; a scattered table still works, read through a gather. Given a lane size (the
  blocks of the longest sequence the engine admits), a run starts at a lane when one is free, so
  the sequences of a batch sit a whole number of lanes apart and attention multiplies all their
  keys in one strided product (trtspec.runtime.forward.attention_strided); else first fit.
- `KVPool` is the storage of one model (the target, or a draft model / EAGLE head): per layer
  keys stored transposed, [num_kv_heads, head_dim, slots], and values [num_kv_heads, slots,
  head_dim], so attention multiplies plain (untransposed) operands: MKL gives a row the same
  result at any row count only then (trtspec.runtime.forward.attention). Several pools share one
  allocator and every sequence's block table: a draft model's cache of a sequence covers the same
  positions as the target's. Blocks are zeroed when handed out, so the masked tail of a
  sequence's last window never holds NaN garbage (0 x NaN would leak through attention).
  Multi-head latent attention (DeepSeek-V3) hands attention keys of qk_nope + qk_rope and
  values of v_head_dim per query head: the pool holds what transformers' attention interface
  receives, the values zero-padded to the keys' head size, so that every attention route (torch's
  products, the compiled kernel) runs unchanged and the output's padded columns, exactly zero, are
  dropped (Layout.attend). It costs (qk - v) / qk of the values' memory (a third for DeepSeek-V3),
  and the decompressed keys cost more than the latent DeepSeek's own cache keeps: fine at the cpu
  engine's sizes.
- `SeqKV` is one sequence's view of one pool: its table and how many tokens are valid. Rolling
  back rejected draft tokens is `length = n`; the slots beyond are overwritten by the next step.

Nothing here knows about tokens, drafts or requests.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import torch


class BlockAllocator:
    """Block ids 0..num_blocks-1: allocate (contiguous at a free lane's start, else first fit, else
    scattered) and free. `lane_blocks` 0: no lanes."""

    def __init__(self, num_blocks: int, block_size: int, lane_blocks: int = 0):
        if num_blocks < 1 or block_size < 1:
            raise ValueError(f"need at least one block of one token (got {num_blocks} x {block_size})")
        self.num_blocks = num_blocks
        self.block_size = block_size
        self.lane_blocks = lane_blocks
        self._free = bytearray(b"\x01") * num_blocks
        self.num_free = num_blocks

    @property
    def num_used(self) -> int:
        return self.num_blocks - self.num_free

    def blocks_for(self, num_tokens: int) -> int:
        return -(-num_tokens // self.block_size)

    def allocate(self, count: int) -> list[int] | None:
        """`count` block ids, contiguous when a run that long is free; None when fewer are free."""
        if count > self.num_free:
            return None
        run = self._lane_start(count)
        if run < 0:
            run = self._free.find(b"\x01" * count) if count else 0
        if run >= 0:
            blocks = list(range(run, run + count))
        else:
            blocks = [i for i, free in enumerate(self._free) if free][:count]
        for block in blocks:
            self._free[block] = 0
        self.num_free -= count
        return blocks

    def _lane_start(self, count: int) -> int:
        """The first lane whose first `count` blocks are free; -1 when none is (or no lanes)."""
        if not 0 < count <= self.lane_blocks:
            return -1
        wanted = b"\x01" * count
        for start in range(0, self.num_blocks - count + 1, self.lane_blocks):
            if self._free[start:start + count] == wanted:
                return start
        return -1

    def free(self, blocks: list[int]) -> None:
        for block in blocks:
            if self._free[block]:
                raise AssertionError(f"block {block} freed twice")
            self._free[block] = 1
        self.num_free += len(blocks)


class BlockTable:
    """One sequence's blocks, in order, and where its slots are."""

    def __init__(self, blocks: list[int], block_size: int):
        self.blocks = blocks
        self.block_size = block_size
        contiguous = blocks == list(range(blocks[0], blocks[0] + len(blocks))) if blocks else True
        # first slot when the blocks form one run (attention then reads a slice), else None
        self.base = blocks[0] * block_size if contiguous and blocks else (0 if not blocks else None)

    @property
    def capacity(self) -> int:
        return len(self.blocks) * self.block_size

    def slots(self, start: int, stop: int) -> list[int]:
        """Pool slots of token positions [start, stop)."""
        if stop > self.capacity:
            raise AssertionError(f"token {stop - 1} is past this sequence's {self.capacity} reserved slots")
        if self.base is not None:
            return list(range(self.base + start, self.base + stop))
        size = self.block_size
        return [self.blocks[i // size] * size + i % size for i in range(start, stop)]


class KVPool:
    """Keys and values of one model for every block: per layer [num_kv_heads, slots, head_dim]."""

    def __init__(self, num_layers: int, num_kv_heads: int, head_dim: int, num_slots: int, dtype: Any = None):
        import torch

        dtype = dtype or torch.float32
        # torch.empty: pages are committed as sequences first write them (zero_blocks), not at start;
        # keys rows are padded past the slots (never read): see padded_row
        row = padded_row(num_slots, dtype.itemsize)
        self.keys = [torch.empty(num_kv_heads, head_dim, row, dtype=dtype)[:, :, :num_slots] for _ in range(num_layers)]
        self.values = [torch.empty(num_kv_heads, num_slots, head_dim, dtype=dtype) for _ in range(num_layers)]

    @classmethod
    def for_model(cls, config: Any, num_slots: int) -> KVPool:
        """A pool shaped for a transformers (Llama-like or MLA) config."""
        heads = config.num_attention_heads
        if getattr(config, "qk_nope_head_dim", None) and getattr(config, "v_head_dim", None):
            # MLA: every query head has its own key and value head (the latent is decompressed per
            # head); its config's head_dim is the rotary part only
            return cls(config.num_hidden_layers, heads, config.qk_nope_head_dim + config.qk_rope_head_dim, num_slots)
        head_dim = getattr(config, "head_dim", None) or config.hidden_size // heads
        kv_heads = getattr(config, "num_key_value_heads", None) or heads
        return cls(config.num_hidden_layers, kv_heads, head_dim, num_slots)

    def write(self, layer: int, slots: torch.Tensor, keys: torch.Tensor, values: torch.Tensor) -> None:
        """# slots: [T] long; keys: [num_kv_heads, T, head_dim]; values: the same, or narrower
        (MLA's v_head_dim: zero-padded to head_dim, see the module docstring)"""
        import torch

        if values.shape[-1] != keys.shape[-1]:
            values = torch.nn.functional.pad(values, (0, keys.shape[-1] - values.shape[-1]))
        self.keys[layer].index_copy_(2, slots, keys.transpose(1, 2))
        self.values[layer].index_copy_(1, slots, values)

    def read(self, layer: int, table: BlockTable, length: int, gather: torch.Tensor | None = None):
        """Keys (transposed) and values of positions [0, length): a slice of the pool when the
        table is one run, else gathered through `gather` (the table's first `length` slots).
        Returns (keys [num_kv_heads, head_dim, length], values [num_kv_heads, length, head_dim])."""
        if table.base is not None:
            return (self.keys[layer][:, :, table.base:table.base + length],
                    self.values[layer][:, table.base:table.base + length])
        return self.keys[layer].index_select(2, gather), self.values[layer].index_select(1, gather)

    def zero_blocks(self, table: BlockTable) -> None:
        """Zero every slot of a newly handed-out table, in every layer."""
        import torch

        slots = None if table.base is not None else torch.tensor(table.slots(0, table.capacity))
        for keys, values in zip(self.keys, self.values, strict=True):
            if slots is None:
                keys[:, :, table.base:table.base + table.capacity].zero_()
                values[:, table.base:table.base + table.capacity].zero_()
            else:
                keys.index_fill_(2, slots, 0.0)
                values.index_fill_(1, slots, 0.0)

    def move(self, table: BlockTable, sources: list[int], destinations: list[int]) -> None:
        """Copy the cached tokens at positions `sources` to positions `destinations`, every
        layer (a verified tree keeps its accepted path contiguous after the pending token)."""
        import torch

        src = torch.tensor([table.slots(p, p + 1)[0] for p in sources])
        dst = torch.tensor([table.slots(p, p + 1)[0] for p in destinations])
        for layer in range(len(self.keys)):
            self.keys[layer].index_copy_(2, dst, self.keys[layer].index_select(2, src))
            self.values[layer].index_copy_(1, dst, self.values[layer].index_select(1, src))


def padded_row(num_slots: int, element_size: int, page: int = 4096, line: int = 64) -> int:
    """Elements per row of a keys tensor holding `num_slots` slots: rounded up so that a row
    starts one cache line past a multiple of `page` bytes from the previous row.

    Why: attention multiplies a sequence's keys as a [head_dim, keys] slice whose rows lie a whole
    row of the pool apart. The pool's slot count is the batch size times a multiple of the 64-key
    window, so rows were often a multiple of 4 KiB apart (always at a batch size of 16) and the 64
    rows of a slice fell into the same few L1 cache sets: measured on the AMD EPYC here (torch 2.13, 2 threads), one
    [3, 4, 64] x [3, 64, 192] product took 10-12.6 us from a 33,792-slot pool and 6.7-7.3 us from
    the same pool padded by 16 slots (as fast as from a contiguous copy). The padding is never read.
    """
    row_bytes = -(-num_slots * element_size // page) * page + line
    return row_bytes // element_size


class SeqKV:
    """One sequence's cache in one pool: its block table and how many tokens are valid."""

    def __init__(self, pool: KVPool, table: BlockTable, length: int = 0):
        self.pool = pool
        self.table = table
        self.length = length
