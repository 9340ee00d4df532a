"""Grouped attention (trtspec.runtime.forward.attention.Group, trtspec.runtime.forward.attention_strided.StridedGroup)
gives every sequence exactly what it gets alone.

A decode batch's sequences whose rows share a key window are attended together: the same
per-sequence matrix products, with padding, scale, bias, softmax and the scatter back done once
for the group; members evenly spaced in the pool (lanes) share one product per key head.
Bit-for-bit equality with each sequence's own one-entry layout is the contract; the end-to-end
invariance tests (test_rt_batch_invariance.py) check it through the model. This is torch's
attention route (TRTSPEC_CPU_ATTENTION=torch, or where the compiled kernels cannot be built).
"""

from __future__ import annotations

import pytest
import torch

from trtspec.runtime.cache.paged import BlockAllocator, BlockTable, KVPool, SeqKV
from trtspec.runtime.forward.attention import Group, Layout
from trtspec.runtime.forward.attention_strided import StridedGroup

HEADS, KV_HEADS, HEAD_DIM = 9, 3, 64


@pytest.fixture(autouse=True)
def _torch_products(monkeypatch):
    """Groups are torch's route; the compiled attention (test_rt_attention_kernel.py) takes none."""
    monkeypatch.setenv("TRTSPEC_CPU_ATTENTION", "torch")


def _pool_with_sequences(lengths, scattered=(), gaps=None):
    """A one-layer pool with random keys/values and a SeqKV per length, 8 blocks each, one after
    the other (indices in `scattered` get a non-contiguous block table, read through a gather;
    `gaps`: index -> blocks left free after that sequence's)."""
    generator = torch.Generator().manual_seed(0)
    allocator = BlockAllocator(64, 32)
    pool = KVPool(1, KV_HEADS, HEAD_DIM, 64 * 32)
    pool.keys[0].copy_(torch.randn(pool.keys[0].shape, generator=generator))
    pool.values[0].copy_(torch.randn(pool.values[0].shape, generator=generator))
    kvs = []
    for index, length in enumerate(lengths):
        blocks = allocator.allocate(8)
        if index in scattered:
            blocks = blocks[::-1]
        if (gaps or {}).get(index):
            allocator.allocate(gaps[index])
        kvs.append(SeqKV(pool, BlockTable(blocks, 32), length))
    return pool, kvs


def _attend(kvs, rows, masks, queries, keys, values):
    layout = Layout.build(kvs, rows, masks)
    return layout, layout.attend(0, queries, keys, values, 0.125)[0]


@pytest.mark.parametrize("placement", ["one gathered", "strided", "strided with a free place"])
@pytest.mark.parametrize("rows", [1, 5])
def test_grouped_rows_equal_each_sequence_alone(rows, placement):
    """Decode rows (1: 3 real rows padded to the probed minimum) and verify passes (5: 15 rows):
    sequences at 70-110 share the 128-key window and form a group, 10 and 200 stay single. One
    group member reads its keys through a gather (per-sequence products), or the members start
    256 slots apart (one strided product per key head), or with a free place after the third
    (computed and dropped). Every row equals its sequence alone."""
    lengths = [70, 80, 100, 90, 110, 10, 200]
    generator = torch.Generator().manual_seed(1)
    total = rows * len(lengths)
    queries = torch.randn(1, HEADS, total, HEAD_DIM, generator=generator)
    keys = torch.randn(1, KV_HEADS, total, HEAD_DIM, generator=generator)
    values = torch.randn(1, KV_HEADS, total, HEAD_DIM, generator=generator)
    pool, kvs = _pool_with_sequences(lengths, scattered=(2,) if placement == "one gathered" else (),
                                     gaps={2: 8} if placement == "strided with a free place" else None)
    snapshot = [tensor.clone() for tensor in (pool.keys[0], pool.values[0])]
    layout, batched = _attend(kvs, [rows] * len(lengths), [None] * len(lengths), queries, keys, values)
    assert [sorted(group.members) for group in layout.groups] == [[0, 1, 2, 3, 4]]
    kind = Group if placement == "one gathered" else StridedGroup
    assert type(layout.groups[0]) is kind
    for index, kv in enumerate(kvs):
        pool.keys[0].copy_(snapshot[0])
        pool.values[0].copy_(snapshot[1])
        kv_alone = SeqKV(pool, kv.table, lengths[index])
        part = slice(index * rows, (index + 1) * rows)
        _, alone = _attend([kv_alone], [rows], [None], queries[:, :, part], keys[:, :, part], values[:, :, part])
        assert torch.equal(batched[part], alone), index


def test_tree_masks_are_applied_per_member():
    """Two sequences verifying 3-node trees with different masks side by side: each row sees only
    its own ancestors (a shared bias would give the second sequence the first one's mask)."""
    lengths = [40, 41]
    generator = torch.Generator().manual_seed(2)
    queries = torch.randn(1, HEADS, 6, HEAD_DIM, generator=generator)
    keys = torch.randn(1, KV_HEADS, 6, HEAD_DIM, generator=generator)
    values = torch.randn(1, KV_HEADS, 6, HEAD_DIM, generator=generator)
    masks = []
    for past, siblings in zip(lengths, (True, False), strict=True):
        mask = torch.zeros(3, past + 3, dtype=torch.bool)
        mask[:, :past] = True
        mask[0, past] = mask[1, past + 1] = mask[2, past + 2] = True
        if not siblings:  # a chain: node 2 under node 1 under node 0
            mask[1, past] = mask[2, past] = mask[2, past + 1] = True
        masks.append(mask)
    pool, kvs = _pool_with_sequences(lengths)
    snapshot = [tensor.clone() for tensor in (pool.keys[0], pool.values[0])]
    layout, batched = _attend(kvs, [3, 3], masks, queries, keys, values)
    assert len(layout.groups) == 1
    for index, (kv, mask) in enumerate(zip(kvs, masks, strict=True)):
        pool.keys[0].copy_(snapshot[0])
        pool.values[0].copy_(snapshot[1])
        part = slice(3 * index, 3 * index + 3)
        _, alone = _attend([SeqKV(pool, kv.table, lengths[index])], [3], [mask], queries[:, :, part],
                           keys[:, :, part], values[:, :, part])
        assert torch.equal(batched[part], alone), index


def test_a_lone_window_forms_no_group():
    """Groups need two members: entries with nothing alike keep the single-sequence path."""
    _, kvs = _pool_with_sequences([10, 100, 200])
    layout = Layout.build(kvs, [1, 1, 1], [None] * 3)
    assert Group.plan(layout.entries, HEADS, KV_HEADS, HEAD_DIM, layout.min_rows, torch.float32) == []


def test_with_autograd_on_every_sequence_takes_the_single_path():
    """A forward that records gradients (outside inference mode, queries requiring grad) cannot
    write products into the group's buffers; it gets the per-sequence path and the same numbers."""
    lengths = [70, 80]
    generator = torch.Generator().manual_seed(3)
    queries = torch.randn(1, HEADS, 2, HEAD_DIM, generator=generator)
    keys = torch.randn(1, KV_HEADS, 2, HEAD_DIM, generator=generator)
    values = torch.randn(1, KV_HEADS, 2, HEAD_DIM, generator=generator)
    pool, kvs = _pool_with_sequences(lengths)
    snapshot = [tensor.clone() for tensor in (pool.keys[0], pool.values[0])]
    _, grouped = _attend(kvs, [1, 1], [None, None], queries, keys, values)
    pool.keys[0].copy_(snapshot[0])
    pool.values[0].copy_(snapshot[1])
    for kv, length in zip(kvs, lengths, strict=True):
        kv.length = length
    layout, recorded = _attend(kvs, [1, 1], [None, None], queries.clone().requires_grad_(), keys, values)
    assert layout.groups == [] and recorded.requires_grad
    assert torch.equal(recorded.detach(), grouped)


def test_strided_products_only_where_they_are_fewer_calls_than_per_sequence():
    """With 3 key heads, one product per key head (over every place) pays off from 4 evenly spaced
    members; 3 members, or 4 spread over 7 places, keep two products per member."""
    from trtspec.runtime.forward.attention_strided import spacing

    _, kvs = _pool_with_sequences([70, 80, 100, 90, 110, 120, 75])
    entries = Layout.build(kvs, [1] * 7, [None] * 7).entries
    assert spacing(entries, [0, 1, 2], KV_HEADS) is None
    assert spacing(entries, [0, 1, 2, 3], KV_HEADS) == 256
    assert spacing(entries, [0, 2, 4, 6], KV_HEADS) == 512
    assert spacing(entries, [0, 1, 5, 6], KV_HEADS) is None
