"""The engine's reusable KV blocks as "stored" and "removed" events, for a router that sends a prompt to
the engine already holding its start (NVIDIA Dynamo's KV router; vLLM and TensorRT-LLM publish the same
events from their block managers).

What an engine here can reuse is the prompts it kept after their prefill (prefix_reuse.PromptCache):
prompt tokens only, so committed tokens, never draft positions. `BlockEvents` is the PromptCache's
listener: a kept prompt's whole `block_size`-token blocks are announced once (`stored`, with chained
block hashes and the parent of the first new one), and a block is announced removed when the last
kept prompt holding it is dropped (two kept prompts often share their first blocks). A partial last
block is never announced. Called in the engine's loop thread; the callbacks must not block.
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable

Stored = Callable[[list[int], list[int], list[int], "int | None"], None]  # token_ids, block sizes, hashes, parent
Removed = Callable[[list[int]], None]


def chained_hashes(tokens: list[int], block_size: int) -> list[int]:
    """Signed 64-bit hashes of the whole blocks of `tokens`, each covering every token up to its end."""
    hashes, parent = [], b""
    for start in range(0, len(tokens) - block_size + 1, block_size):
        digest = hashlib.blake2b(parent + repr(tokens[start:start + block_size]).encode(), digest_size=8).digest()
        hashes.append(int.from_bytes(digest, "little", signed=True))
        parent = digest
    return hashes


class BlockEvents:
    """Reference-counted blocks of the kept prompts, turned into stored/removed calls."""

    def __init__(self, block_size: int, stored: Stored, removed: Removed):
        if block_size < 1:
            raise ValueError(f"block_size must be at least 1 (got {block_size})")
        self.block_size = block_size
        self._stored, self._removed = stored, removed
        self.counts: dict[int, int] = {}  # block hash -> kept prompts holding it

    @property
    def blocks(self) -> int:
        """Blocks announced and not yet removed."""
        return len(self.counts)

    def kept(self, tokens: list[int]) -> None:
        hashes = chained_hashes(list(tokens), self.block_size)
        first_new = next((i for i, h in enumerate(hashes) if h not in self.counts), len(hashes))
        for h in hashes:
            self.counts[h] = self.counts.get(h, 0) + 1
        if first_new < len(hashes):
            size = self.block_size
            self._stored(list(tokens[first_new * size:len(hashes) * size]), [size] * (len(hashes) - first_new),
                         hashes[first_new:], hashes[first_new - 1] if first_new else None)

    def dropped(self, tokens: list[int]) -> None:
        gone = []
        for h in chained_hashes(list(tokens), self.block_size):
            count = self.counts.get(h, 0) - 1
            if count > 0:
                self.counts[h] = count
            elif h in self.counts:
                del self.counts[h]
                gone.append(h)
        if gone:
            self._removed(gone)
