"""Kept prompts as stored/removed KV block events (trtspec.runtime.cache.block_events), pure."""

from __future__ import annotations

from trtspec.runtime.cache.block_events import BlockEvents, chained_hashes


def _recorder():
    stored, removed = [], []
    events = BlockEvents(4, lambda tokens, sizes, hashes, parent: stored.append((tokens, sizes, hashes, parent)),
                         removed.append)
    return events, stored, removed


def test_whole_blocks_only_chained_and_shared_blocks_announced_once():
    events, stored, removed = _recorder()
    a = list(range(10))                  # two whole blocks, two tokens left over
    events.kept(a)
    hashes = chained_hashes(a, 4)
    assert stored == [(a[:8], [4, 4], hashes, None)]
    b = list(range(8)) + [50, 51, 52, 53, 54]  # shares a's two blocks, adds one
    events.kept(b)
    assert stored[1] == ([50, 51, 52, 53], [4], chained_hashes(b, 4)[2:], hashes[1])
    assert events.blocks == 3
    events.dropped(a)                     # b still holds the shared blocks: nothing removed
    assert removed == []
    events.dropped(b)
    assert sorted(removed[0]) == sorted(chained_hashes(b, 4)) and events.blocks == 0


def test_hashes_chain_on_everything_before():
    assert chained_hashes([1, 2, 3, 4, 5, 6, 7, 8], 4)[1] != chained_hashes([9, 2, 3, 4, 5, 6, 7, 8], 4)[1]
    assert chained_hashes([1, 2, 3], 4) == []
