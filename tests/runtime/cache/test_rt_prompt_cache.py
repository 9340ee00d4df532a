"""Prompts kept for reuse (trtspec.runtime.cache.prefix_reuse): which kept prompt a new one copies from,
how much of it, and what is dropped when the memory budget is full. The engine-level guarantee
(bit for bit the same cache and tokens) is in test_rt_prefix_cache.py."""

from __future__ import annotations

import torch

from trtspec.runtime.cache.prefix_reuse import BLOCK, PromptCache, block_hashes, size_of
from trtspec.runtime.cache.shared_prefix import SharedPrefix

LAYERS, KV_HEADS, HEAD_DIM = 2, 1, 4


def _kept(tokens: list[int], aux: bool = False) -> SharedPrefix:
    """A kept prompt whose every row holds its own position (so a copy can be checked)."""
    n = len(tokens)
    positions = torch.arange(n, dtype=torch.float32)
    keys = [positions.expand(KV_HEADS, HEAD_DIM, n).clone() for _ in range(LAYERS)]
    values = [positions[:, None].expand(KV_HEADS, n, HEAD_DIM).clone() for _ in range(LAYERS)]
    return SharedPrefix(list(tokens), keys, values, torch.zeros(n, 3) if aux else None)


def test_block_hashes_cover_whole_blocks_and_chain():
    tokens = list(range(40))
    hashes = block_hashes(tokens)
    assert len(hashes) == 40 // BLOCK
    assert block_hashes(tokens[:BLOCK] + [999] * BLOCK)[0] == hashes[0]   # the first block alike
    assert block_hashes([7] + tokens[1:])[1] != hashes[1]                  # a change early changes every later hash


def test_the_longest_kept_prompt_is_matched_and_extended_token_by_token():
    cache = PromptCache(1 << 20)
    system = list(range(100, 100 + 2 * BLOCK + 5))           # a system prompt of 2 blocks and 5 tokens
    assert cache.add(_kept(system + [1, 2, 3]))
    assert cache.add(_kept(list(range(500, 500 + 3 * BLOCK))))
    prefix, count = cache.match(system + [9, 9, 9, 9])
    assert prefix.tokens[:len(system)] == system and count == len(system)  # past the blocks: the 5 tokens too
    # the same prompt again: all of it but its last token (its logits give the first output)
    assert cache.match(system + [1, 2, 3])[1] == len(system) + 2
    assert cache.match(list(range(100, 100 + BLOCK - 1)) + [0] * 20) == (None, 0)   # under a block: no match
    assert cache.match([5] * 50) == (None, 0)


def test_a_hash_collision_costs_a_shorter_match_never_a_wrong_one():
    cache = PromptCache(1 << 20)
    kept = _kept(list(range(3 * BLOCK)))
    cache.add(kept)
    forged = list(range(BLOCK)) + [0] * (2 * BLOCK)
    cache._by_hash[block_hashes(forged)[1]] = cache._by_hash[block_hashes(kept.tokens)[1]]  # as if they collided
    assert cache.match(forged)[1] == BLOCK     # checked against the kept tokens: one block really shared


def test_a_head_that_needs_layer_outputs_only_gets_prompts_kept_with_them():
    cache = PromptCache(1 << 20)
    tokens = list(range(2 * BLOCK))
    cache.add(_kept(tokens, aux=False))
    assert cache.match(tokens + [1], needs_aux=True) == (None, 0)
    assert cache.match(tokens + [1])[1] == 2 * BLOCK
    cache.add(_kept(tokens, aux=True))
    prefix, count = cache.match(tokens + [1], needs_aux=True)
    assert count == 2 * BLOCK and prefix.aux is not None


def test_the_least_recently_used_prompt_leaves_first_and_the_budget_holds():
    prompts = [list(range(base, base + 2 * BLOCK)) for base in (0, 1000, 2000)]
    one = size_of(_kept(prompts[0]))
    cache = PromptCache(2 * one)
    cache.add(_kept(prompts[0]))
    cache.add(_kept(prompts[1]))
    assert cache.match(prompts[0] + [1])[1] > 0     # used: now the most recent
    cache.add(_kept(prompts[2]))                    # over budget: the least recently used (the 2nd) leaves
    assert cache.match(prompts[1] + [1]) == (None, 0)
    assert cache.match(prompts[0] + [1])[1] > 0 and cache.match(prompts[2] + [1])[1] > 0
    assert len(cache) == 2 and cache.bytes == 2 * one
    assert not PromptCache(one - 1).add(_kept(prompts[0]))   # alone over the budget: not kept


def test_a_match_copies_the_kept_rows_into_a_sequence():
    from trtspec.runtime.cache.paged import BlockTable, KVPool, SeqKV

    cache = PromptCache(1 << 20)
    cache.add(_kept(list(range(2 * BLOCK + 3))))
    pool = KVPool(LAYERS, KV_HEADS, HEAD_DIM, 128)
    for keys, values in zip(pool.keys, pool.values, strict=True):
        keys.fill_(-1.0)
        values.fill_(-1.0)
    kv = SeqKV(pool, BlockTable([5, 2, 7], 16))     # a scattered table: the copy goes through its slots
    prefix, count = cache.match(list(range(2 * BLOCK + 3)) + [42])
    prefix.copy_into(kv, count)
    read_keys, read_values = pool.read(1, kv.table, count, torch.tensor(kv.table.slots(0, count)))
    assert kv.length == count == 2 * BLOCK + 3
    assert torch.equal(read_keys[0, 0], torch.arange(count, dtype=torch.float32))
    assert torch.equal(read_values[0, :, 0], torch.arange(count, dtype=torch.float32))
