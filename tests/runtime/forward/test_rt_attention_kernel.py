"""The compiled attention (trtspec.runtime.forward.attention_kernel, paged_attend.cpp): torch's attention
to float rounding, and every row bit for bit the same alone and in any batch, at any thread count.

The end-to-end checks (a sequence alone and batched through the model, speculative greedy against
the target alone) run on it too: it is the engine's route wherever the library builds.
"""

from __future__ import annotations

import pytest
import torch

from trtspec.runtime.cache.paged import BlockAllocator, BlockTable, KVPool, SeqKV
from trtspec.runtime.forward.attention import Layout
from trtspec.runtime.kernels import native

pytestmark = pytest.mark.skipif(not native.available(), reason=f"compiled kernels unavailable: {native.unavailable()}")

BLOCK = 16


def _sequences(lengths, kv_heads, head_dim, scattered=(), seed=0):
    """A one-layer pool with random keys and values and a sequence per length, 16 blocks each
    (those in `scattered` on every other block: read through a gather)."""
    generator = torch.Generator().manual_seed(seed)
    allocator = BlockAllocator(64 * len(lengths), BLOCK)
    pool = KVPool(1, kv_heads, head_dim, 64 * len(lengths) * BLOCK)
    pool.keys[0].copy_(torch.randn(pool.keys[0].shape, generator=generator))
    pool.values[0].copy_(torch.randn(pool.values[0].shape, generator=generator))
    kvs = []
    for index, length in enumerate(lengths):
        blocks = allocator.allocate(32)
        blocks = blocks[::2] if index in scattered else blocks[:16]
        kvs.append(SeqKV(pool, BlockTable(blocks, BLOCK), length))
    return pool, kvs


def _attend(monkeypatch, route, kvs, rows, masks, new, threads=None):
    monkeypatch.setenv("TRTSPEC_CPU_ATTENTION", route)
    before = torch.get_num_threads()
    torch.set_num_threads(threads or before)
    try:
        layout = Layout.build(kvs, rows, masks)
        out = layout.attend(0, *new, 0.125)[0]
    finally:
        torch.set_num_threads(before)
    assert (layout.kernel_rows is not False) == (route == "kernel")
    return out


def _new_rows(total, heads, kv_heads, head_dim, seed=1):
    generator = torch.Generator().manual_seed(seed)
    return (torch.randn(1, heads, total, head_dim, generator=generator),
            torch.randn(1, kv_heads, total, head_dim, generator=generator),
            torch.randn(1, kv_heads, total, head_dim, generator=generator))


@pytest.mark.parametrize("shape", [(9, 3, 64), (4, 2, 16), (4, 4, 8), (8, 1, 32), (5, 1, 8)],
                         ids=lambda s: "x".join(map(str, s)))
def test_it_equals_torch_attention_to_rounding(monkeypatch, shape):
    """Decode rows, a 5-token verify pass, a 40-row prompt chunk crossing a key window and a fresh
    prompt, one sequence on scattered blocks; query heads per key head 3, 2, 1, 8 (two passes of
    4) and 5 (4 + 1)."""
    lengths, rows = [70, 10, 130, 60, 0], [1, 5, 1, 40, 7]
    total = sum(rows)
    new = _new_rows(total, *shape)
    results = {}
    for route in ("torch", "kernel"):
        pool, kvs = _sequences(lengths, *shape[1:], scattered=(2,))
        results[route] = _attend(monkeypatch, route, kvs, rows, [None] * len(rows), new)
    torch.testing.assert_close(results["kernel"], results["torch"], rtol=1e-5, atol=1e-5)


def test_tree_masks_equal_torch_attention(monkeypatch):
    """Rows that see keys with holes (a static draft tree's verify pass): the bias carries the
    mask, as on torch's route."""
    past, rows = 50, 4
    mask = torch.zeros(rows, past + rows, dtype=torch.bool)
    mask[:, :past] = True
    for row, ancestors in enumerate(([0], [0, 1], [0, 2], [0, 2, 3])):
        mask[row, [past + a for a in ancestors]] = True
    new = _new_rows(rows, 9, 3, 64)
    results = {}
    for route in ("torch", "kernel"):
        pool, kvs = _sequences([past], 3, 64)
        results[route] = _attend(monkeypatch, route, kvs, [rows], [mask], new)
    torch.testing.assert_close(results["kernel"], results["torch"], rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("threads", [1, 2, 3, 64])
def test_a_row_is_the_same_alone_and_in_any_batch(monkeypatch, threads):
    """Each sequence's rows alone (one sequence, at one thread) equal the same rows among five
    sequences of mixed row counts (a chunk crossing a window, a verify pass, decode rows, a
    scattered table) at 1, 2, 3 and 64 threads (each thread's share of the keys then holds only
    one to six of the 144 work items): bit for bit, so every item ran exactly once."""
    shape = (9, 3, 64)
    lengths, rows = [70, 10, 130, 60, 100], [1, 5, 1, 40, 1]
    new = _new_rows(sum(rows), *shape)
    pool, kvs = _sequences(lengths, *shape[1:], scattered=(4,))
    snapshot = [pool.keys[0].clone(), pool.values[0].clone()]
    batched = _attend(monkeypatch, "kernel", kvs, rows, [None] * len(rows), new, threads)
    start = 0
    for kv, count, length in zip(kvs, rows, lengths, strict=True):
        pool.keys[0].copy_(snapshot[0])
        pool.values[0].copy_(snapshot[1])
        part = slice(start, start + count)
        alone = _attend(monkeypatch, "kernel", [SeqKV(pool, kv.table, length)], [count], [None],
                        tuple(t[:, :, part] for t in new), 1)
        assert torch.equal(batched[part], alone), (length, count)
        start += count


def test_reading_only_to_the_last_seen_key_gives_the_whole_windows_bits(monkeypatch):
    """A row reads its keys through its last visible one (rounded up to 8), not its whole window:
    the same numbers, bit for bit, as reading the window (the keys left out weigh exactly 0), for
    decode rows, a verify pass, a chunk crossing a window and a tree's rows with holes."""
    monkeypatch.setenv("TRTSPEC_CPU_ATTENTION", "kernel")
    lengths, rows = [70, 10, 130, 60, 3], [1, 5, 1, 40, 4]
    tree = torch.zeros(4, 7, dtype=torch.bool)
    tree[:, :3] = True
    for row, ancestors in enumerate(([0], [0, 1], [0, 2], [0, 2, 3])):
        tree[row, [3 + a for a in ancestors]] = True
    new = _new_rows(sum(rows), 9, 3, 64)
    outputs = []
    for whole_window in (False, True):
        pool, kvs = _sequences(lengths, 3, 64, scattered=(2,))
        layout = Layout.build(kvs, rows, [None] * 4 + [tree])
        layout.attend(0, *new, 0.125)  # builds the kernel's rows
        counts = layout.kernel_rows.key_counts
        if whole_window:
            windows = torch.tensor([segment.keys for entry in layout.entries for segment in entry.segments
                                    for _ in range(segment.last - segment.first)])
            assert (counts < windows).sum() >= 45  # most rows read fewer keys than their window
            counts.copy_(windows)
        outputs.append(layout.attend(0, *new, 0.125))
    assert torch.equal(outputs[0], outputs[1])


def test_masked_keys_get_exactly_zero_weight(monkeypatch):
    """Keys past a row's position (the rest of its window) weigh nothing: values there as large
    as 1e30 leave the output exactly as zeros there do (a weight of e^-88 instead of 0 would not)."""
    new = _new_rows(1, 9, 3, 64)
    outputs = []
    for filler in (0.0, 1e30):
        pool, kvs = _sequences([20], 3, 64)
        slots = kvs[0].table.slots(21, 64)  # after the new row's slot (position 20), to the window's end
        pool.values[0][:, slots] = filler
        outputs.append(_attend(monkeypatch, "kernel", kvs, [1], [None], new))
    assert torch.equal(outputs[0], outputs[1])


def test_torch_route_where_the_kernel_does_not_apply(monkeypatch):
    """TRTSPEC_CPU_ATTENTION=torch, a float64 batch or one that needs gradients: torch's products."""
    from trtspec.runtime.forward.attention_kernel import KernelRows

    pool, kvs = _sequences([10], 3, 64)
    layout = Layout.build(kvs, [1], [None])
    query = torch.randn(1, 9, 1, 64)
    monkeypatch.setenv("TRTSPEC_CPU_ATTENTION", "kernel")
    assert KernelRows.build(layout, query) is not None
    assert KernelRows.build(layout, query.double()) is None
    assert KernelRows.build(layout, query.clone().requires_grad_()) is None
    monkeypatch.setenv("TRTSPEC_CPU_ATTENTION", "torch")
    assert KernelRows.build(layout, query) is None


@pytest.mark.parametrize("shape", [(9, 3, 64), (4, 2, 16)], ids=lambda s: "x".join(map(str, s)))
def test_rotating_in_the_kernel_gives_torch_rotations_bits(monkeypatch, shape):
    """attend_unrotated (rope_write.cpp, then the kernel) equals torch's rotate-half rotation and
    attend, bit for bit: outputs and the keys and values written to the cache (a scattered table
    among them; the inputs as one stacked projection's strided views, as the lean forward has them)."""
    heads, kv_heads, head_dim = shape
    lengths, rows = [70, 10, 130, 0], [1, 5, 1, 7]
    total = sum(rows)
    generator = torch.Generator().manual_seed(4)
    stacked = torch.randn(1, total, (heads + 2 * kv_heads) * head_dim, generator=generator)
    query, key, value = stacked.split([heads * head_dim, kv_heads * head_dim, kv_heads * head_dim], dim=-1)
    angles = torch.rand(1, total, head_dim // 2, generator=generator) * 6.0
    cos, sin = torch.cat([angles.cos()] * 2, dim=-1), torch.cat([angles.sin()] * 2, dim=-1)
    monkeypatch.setenv("TRTSPEC_CPU_ATTENTION", "kernel")
    results = {}
    for route in ("torch rotation", "kernel rotation"):
        pool, kvs = _sequences(lengths, kv_heads, head_dim, scattered=(1,))
        layout = Layout.build(kvs, rows, [None] * len(rows))
        if route == "kernel rotation":
            out = layout.attend_unrotated(0, query, key, value, cos, sin, head_dim, 0.125)
        else:
            q, k, v = (x.reshape(1, total, -1, head_dim).transpose(1, 2) for x in (query, key, value))
            c, s = cos.unsqueeze(1), sin.unsqueeze(1)
            half = head_dim // 2
            q = (q * c) + (torch.cat((-q[..., half:], q[..., :half]), dim=-1) * s)
            k = (k * c) + (torch.cat((-k[..., half:], k[..., :half]), dim=-1) * s)
            out = layout.attend(0, q, k, v, 0.125)
        results[route] = (out, pool.keys[0].clone(), pool.values[0].clone())
    for mine, theirs in zip(results["kernel rotation"], results["torch rotation"], strict=True):
        assert torch.equal(mine, theirs)
