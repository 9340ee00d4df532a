"""The EAGLE-3 head's layout (trtspec.runtime.drafters.head_layout) gives the compiled attention what
Layout.build then KernelRows.build give it: the same arrays, the same bias at every key a row reads,
bit-identical outputs and cache writes, for causal rows and tree levels; and it steps aside where
the kernel would not run or a mask is not a tree level's."""

from __future__ import annotations

import pytest
import torch

from trtspec.runtime.cache.paged import BlockAllocator, BlockTable, KVPool, SeqKV
from trtspec.runtime.drafters.head_layout import FIRST_SIZE, causal_bias, head_layout
from trtspec.runtime.forward.attention import Layout
from trtspec.runtime.kernels import native

pytestmark = pytest.mark.skipif(not native.available(), reason=f"compiled kernels unavailable: {native.unavailable()}")

BLOCK, HEADS, KV_HEADS, HEAD_DIM = 16, 4, 2, 16


def _sequences(lengths, scattered=(), seed=0, blocks_each=16):
    """A one-layer pool of random keys and values and a cache per length (those in `scattered` on
    every other block: the kernel reads them through a gather)."""
    generator = torch.Generator().manual_seed(seed)
    allocator = BlockAllocator(4 * blocks_each * len(lengths), BLOCK)
    pool = KVPool(1, KV_HEADS, HEAD_DIM, 4 * blocks_each * len(lengths) * BLOCK)
    pool.keys[0].copy_(torch.randn(pool.keys[0].shape, generator=generator))
    pool.values[0].copy_(torch.randn(pool.values[0].shape, generator=generator))
    kvs = []
    for index, length in enumerate(lengths):
        blocks = allocator.allocate(2 * blocks_each)
        blocks = blocks[::2] if index in scattered else blocks[:blocks_each]
        kvs.append(SeqKV(pool, BlockTable(blocks, BLOCK), length))
    return pool, kvs


def _tree_level(past, rows, seed):
    """A tree level's mask: a committed prefix, some nodes fed before (random ancestors), itself."""
    generator = torch.Generator().manual_seed(seed)
    committed = past - 3
    mask = torch.zeros(rows, past + rows, dtype=torch.bool)
    mask[:, :committed] = True
    mask[:, committed:past] = torch.rand(rows, 3, generator=generator) < 0.5
    mask[:, past:] = torch.eye(rows, dtype=torch.bool)
    return mask


# (cached lengths, new rows, tree-level rows per sequence or None, scattered tables): decode rows,
# catch-ups crossing a 64-key window edge, an empty cache, a row at a window's last key; tree levels
# beside causal rows and alone, one crossing a window edge
CASES = {"mixed": ([70, 10, 130, 0, 63], [1, 5, 1, 7, 1], [None] * 5, (1, 4)),
         "one-row": ([200], [1], [None], ()),
         "window-edge": ([61, 5], [6, 3], [None, None], (0,)),
         "tree-levels": ([40, 62, 90], [2, 4, 3], [True, True, None], (1,)),
         "tree-only": ([130], [4], [True], (0,))}


def _case(name):
    lengths, rows, trees, scattered = CASES[name]
    masks = [None if tree is None else _tree_level(past, count, seed)
             for seed, (past, count, tree) in enumerate(zip(lengths, rows, trees, strict=True))]
    return lengths, rows, masks, scattered


@pytest.mark.parametrize("name", CASES)
def test_the_arrays_and_biases_are_layout_builds(monkeypatch, name):
    from trtspec.runtime.forward.attention_kernel import KernelRows

    lengths, rows, masks, scattered = _case(name)
    monkeypatch.setenv("TRTSPEC_CPU_ATTENTION", "kernel")
    _, kvs = _sequences(lengths, scattered)
    total = sum(rows)
    with torch.inference_mode():
        mine = head_layout(kvs, rows, masks, HEADS, HEAD_DIM)
        reference = Layout.build(kvs, rows, masks)
        theirs = KernelRows.build(reference, torch.zeros(1, HEADS, total, HEAD_DIM))
    assert mine is not None and theirs is not None
    assert torch.equal(mine.write_slots, reference.write_slots)
    ours = mine.kernel_rows
    for field in ("base", "gather", "gather_at", "key_counts"):
        assert torch.equal(getattr(ours, field), getattr(theirs, field)), field
    for row in range(total):  # what the kernel reads: key_counts[row] biases from bias_at[row]
        count = int(ours.key_counts[row])
        at, their_at = int(ours.bias_at[row]), int(theirs.bias_at[row])
        assert torch.equal(ours.bias[at:at + count], theirs.bias[their_at:their_at + count]), row


@pytest.mark.parametrize("name", CASES)
def test_attention_and_cache_writes_are_bit_identical(monkeypatch, name):
    lengths, rows, masks, scattered = _case(name)
    monkeypatch.setenv("TRTSPEC_CPU_ATTENTION", "kernel")
    total = sum(rows)
    generator = torch.Generator().manual_seed(3)
    stacked = torch.randn(1, total, (HEADS + 2 * KV_HEADS) * HEAD_DIM, generator=generator)
    query, key, value = stacked.split([HEADS * HEAD_DIM, KV_HEADS * HEAD_DIM, KV_HEADS * HEAD_DIM], dim=-1)
    angles = torch.rand(1, total, HEAD_DIM // 2, generator=generator) * 6.0
    cos, sin = torch.cat([angles.cos()] * 2, dim=-1), torch.cat([angles.sin()] * 2, dim=-1)
    results = []
    for build in (lambda kvs: head_layout(kvs, rows, masks, HEADS, HEAD_DIM),
                  lambda kvs: Layout.build(kvs, rows, masks)):
        pool, kvs = _sequences(lengths, scattered)
        with torch.inference_mode():
            out = build(kvs).attend_unrotated(0, query, key, value, cos, sin, HEAD_DIM, 0.25)
        results.append((out, pool.keys[0].clone(), pool.values[0].clone()))
    for mine, theirs in zip(*results, strict=True):
        assert torch.equal(mine, theirs)


def test_it_steps_aside_where_the_kernel_would_not_run_or_the_mask_is_not_a_tree_level(monkeypatch):
    _, kvs = _sequences([10, 20])
    causal = [None, None]
    with torch.inference_mode():
        monkeypatch.setenv("TRTSPEC_CPU_ATTENTION", "torch")
        assert head_layout(kvs, [1, 1], causal, HEADS, HEAD_DIM) is None
        monkeypatch.setenv("TRTSPEC_CPU_ATTENTION", "kernel")
        assert head_layout(kvs, [1, 1], causal, HEADS, 12) is None  # a head size not a multiple of 8
        assert head_layout(kvs, [1, 1], causal, 3, HEAD_DIM) is None  # query heads not grouped on key heads
        sees_its_sibling = _tree_level(10, 2, seed=0)
        sees_its_sibling[1, 10] = True
        assert head_layout(kvs, [2, 1], [sees_its_sibling, None], HEADS, HEAD_DIM) is None
        assert head_layout(kvs, [2, 1], [_tree_level(10, 2, seed=0), None], HEADS, HEAD_DIM) is not None
        _, short = _sequences([60], blocks_each=4)  # 64 slots: a row at 64 has its key window past them
        assert head_layout(short, [1], [None], HEADS, HEAD_DIM) is not None
        short[0].length = 64
        assert head_layout(short, [1], [None], HEADS, HEAD_DIM) is None
    assert head_layout(kvs, [1, 1], causal, HEADS, HEAD_DIM) is None  # gradients: autograd's route


def test_the_causal_bias_grows_past_its_first_size():
    bias, size = causal_bias(FIRST_SIZE + 5)
    assert size >= FIRST_SIZE + 5 and bias.shape == (size + 8,)
    assert bool((bias[:size] == 0).all()) and bool((bias[size:] == float("-inf")).all())
    assert causal_bias(10)[1] == size  # a smaller need keeps the grown one
