"""The KV pool's keys rows are padded so that a sequence's key slice does not alias in the cache.

Contract (trtspec.runtime.cache.paged.padded_row): every keys tensor keeps the shape
[kv_heads, head_dim, num_slots] callers index, its rows lie a whole number of cache lines apart
but never a multiple of 4 KiB (the layout that made attention's products ~1.5x slower here),
and the padding is invisible: writes and reads through block tables give back what was written.
"""

from __future__ import annotations

import pytest
import torch

from trtspec.runtime.cache.paged import BlockTable, KVPool, padded_row


@pytest.mark.parametrize("num_slots", [100, 1024, 2048, 16 * 2112, 8 * 2112, 4096 + 7])
def test_keys_rows_are_cache_line_aligned_but_never_a_page_multiple_apart(num_slots):
    pool = KVPool(2, 3, 64, num_slots)
    for keys, values in zip(pool.keys, pool.values, strict=True):
        assert keys.shape == (3, 64, num_slots) and values.shape == (3, num_slots, 64)
        row_bytes = keys.stride(1) * keys.element_size()
        assert row_bytes % 64 == 0 and row_bytes % 4096 != 0
        assert keys.stride(1) >= num_slots and keys.stride(0) == 64 * keys.stride(1)


def test_padded_row_leaves_a_row_past_a_page_multiple_by_one_line():
    assert padded_row(33792, 4) == 33792 + 16  # the pool of a 16-sequence SmolLM2 engine
    assert padded_row(100, 4) == 1024 + 16
    assert padded_row(1024, 2) == 2048 + 32


def test_what_is_written_through_a_table_reads_back_past_the_padding():
    generator = torch.Generator().manual_seed(0)
    pool = KVPool(1, 3, 64, 1024)
    scattered = BlockTable([30, 2, 17], 32)  # read through a gather
    run = BlockTable([4, 5, 6], 32)  # read as a slice
    for table in (scattered, run):
        keys, values = torch.randn(3, 96, 64, generator=generator), torch.randn(3, 96, 64, generator=generator)
        slots = torch.tensor(table.slots(0, 96))
        pool.write(0, slots, keys, values)
        read_keys, read_values = pool.read(0, table, 96, None if table.base is not None else slots)
        assert torch.equal(read_keys, keys.transpose(1, 2)) and torch.equal(read_values, values)
