"""Prompts kept after their prefill, so that a later prompt beginning the same way copies their keys
and values instead of computing them again.

Why: the chat template's fixed start is prefilled once already (prefix_cache.py), but a user's own
system prompt, a few-shot preamble or the earlier turns of a conversation are as much shared, and
under load a prompt's prefill is compute that does not batch (docs/BENCHMARKS-log.md, "Steady state":
steps carrying prompt rows took a fifth to a quarter of the forward time at concurrency 8).
TensorRT-LLM calls this KV cache block reuse (`enable_block_reuse`), vLLM automatic prefix caching.
They share the cached blocks themselves; here the kept rows are copied into the new sequence's own
blocks, which keeps every sequence's block run contiguous (attention then reads a slice, where a
gather through a scattered table cost a third of a 16-sequence decode step).

Matching: a kept prompt is indexed by chained hashes of its whole BLOCK-token blocks (vLLM's block
hashes); a new prompt walks its own block hashes while they are known, and the match found is then
checked and extended token by token against the kept tokens (so a hash collision costs a shorter
match, never a wrong one). Matches shorter than one block are left to the shared start.

Exactness: the same argument as prefix_cache's: a position's keys and values depend only on the
tokens up to it, bit for bit whatever shared its forward (batch invariance), so a copied row is
what the sequence's own prefill would have written. Only prompt rows are kept (a prefill's causal
rows; decode rows of tree drafts attend with holes and are exact only up to rounding). An EAGLE-3
head needs the target's layer outputs of every prompt position: they are kept with the rows (taken
in the prefill of every prompt of such an engine, a request without speculation included, so that
a later speculative one can copy it), and a kept prompt without them is not offered to a sequence
whose head needs them.

Memory: outside the KV pool, at most `max_bytes` (EngineConfig.kv_cache_reuse_mib), the least
recently used prompt out first.
"""

from __future__ import annotations

from collections import OrderedDict
from typing import Any

from trtspec.runtime.cache.shared_prefix import SharedPrefix, common_length

BLOCK = 16  # tokens per hashed block


def block_hashes(tokens: list[int]) -> list[int]:
    """Chained hashes of the whole BLOCK-token blocks of `tokens`: the i-th covers tokens[:(i+1) BLOCK]."""
    hashes, chained = [], 0
    for start in range(0, len(tokens) - BLOCK + 1, BLOCK):
        chained = hash((chained, tuple(tokens[start:start + BLOCK])))
        hashes.append(chained)
    return hashes


def size_of(prefix: SharedPrefix) -> int:
    """Bytes a kept prompt holds."""
    tensors = [*prefix.keys, *prefix.values] + ([prefix.aux] if prefix.aux is not None else [])
    return sum(t.numel() * t.element_size() for t in tensors)


class PromptCache:
    """Kept prompts (SharedPrefix each), least recently used first."""

    def __init__(self, max_bytes: int):
        self.max_bytes = max_bytes
        self.bytes = 0
        self._kept: OrderedDict[int, tuple[SharedPrefix, list[int], int]] = OrderedDict()  # id -> (prompt, hashes, bytes)
        self._by_hash: dict[int, int] = {}  # block hash -> id of the newest kept prompt with that block chain
        self._next_id = 0
        self.listener: Any = None  # kept(tokens) / dropped(tokens) per prompt (trtspec.runtime.cache.block_events)

    def __len__(self) -> int:
        return len(self._kept)

    def match(self, prompt: list[int], needs_aux: bool = False) -> tuple[SharedPrefix | None, int]:
        """The kept prompt sharing the most leading tokens with `prompt` and how many of its rows to
        copy (at least one prompt token is left to prefill: the first output needs its logits);
        (None, 0) below one block. `needs_aux`: only prompts kept with their layer outputs."""
        found = None
        for chained in block_hashes(prompt):
            if chained not in self._by_hash:
                break
            found = self._by_hash[chained]
        if found is None:
            return None, 0
        prefix = self._kept[found][0]
        count = min(common_length(prefix.tokens, prompt), len(prompt) - 1)
        if count < BLOCK or (needs_aux and prefix.aux is None):
            return None, 0
        self._kept.move_to_end(found)
        return prefix, count

    def add(self, prefix: SharedPrefix) -> bool:
        """Keep `prefix`, making room by dropping the least recently used; False when it alone is
        over the budget or shorter than a block."""
        size = size_of(prefix)
        hashes = block_hashes(prefix.tokens)
        if size > self.max_bytes or not hashes:
            return False
        while self.bytes + size > self.max_bytes:
            self._drop_oldest()
        key, self._next_id = self._next_id, self._next_id + 1
        self._kept[key] = (prefix, hashes, size)
        self.bytes += size
        for chained in hashes:
            self._by_hash[chained] = key
        if self.listener is not None:
            self.listener.kept(prefix.tokens)
        return True

    def _drop_oldest(self) -> None:
        key, (prefix, hashes, size) = self._kept.popitem(last=False)
        self.bytes -= size
        if self.listener is not None:
            self.listener.dropped(prefix.tokens)
        for chained in hashes:
            if self._by_hash.get(chained) == key:
                del self._by_hash[chained]


class PrefixReuse:
    """A scheduler's reuse of prompt rows: the chat template's shared start (prefilled once, on
    first use) and the prompts kept after their prefill. Called in the loop thread, lock held."""

    def __init__(self, engine: Any, pool: Any, allocator: Any, stats: Any, max_bytes: int):
        self.engine, self.pool, self.allocator, self.stats = engine, pool, allocator, stats
        self.shared: Any = None   # SharedPrefix once prefilled; False: the tokenizer has none
        self.kept = PromptCache(max_bytes) if max_bytes > 0 else None
        self.needs_aux = bool(getattr(engine.drafter, "aux_layer_ids", ()) or ())

    def admit(self, sequence: Any) -> None:
        """Copy the longest reusable start of a new sequence's prompt into its (zeroed) cache, hand
        an EAGLE-3 session those positions' layer outputs, and start collecting the rest of them
        when the prompt will be kept."""
        prompt = sequence.tokens[:sequence.num_prompt]
        needs_aux = self.needs_aux and sequence.session is not None
        best, count = self._shared(), 0
        if best is not None:
            count = best.reusable(prompt)
        if self.kept is not None:
            kept, kept_count = self.kept.match(prompt, needs_aux)
            if kept_count > count:
                best, count = kept, kept_count
        self.stats.prefix_cache_queries += sequence.num_prompt
        if count > 0:
            best.copy_into(sequence.kv, count)
            if sequence.session is not None and best.aux is not None:
                sequence.session.on_verified(best.aux[:count])
            self.stats.prefix_cache_hits += count
        sequence.reused = count
        # collected for every prompt of an engine whose head needs them, speculative or not: a prompt
        # kept without them could not serve a later speculative request (issue 69: a --baseline
        # request's prompts were kept bare, and the speculative ones re-prefilled them)
        if self.kept is not None and self.needs_aux and (count == 0 or best.aux is not None):
            sequence.prompt_aux = [best.aux[:count]] if count > 0 else []

    def prefilled(self, sequence: Any) -> None:
        """A sequence's last prompt chunk went through: keep its prompt unless most of it was reused."""
        aux_rows, sequence.prompt_aux = sequence.prompt_aux, None
        if self.kept is None or sequence.num_prompt - sequence.reused < BLOCK:
            return
        aux = None
        if aux_rows is not None:
            import torch

            aux = torch.cat(aux_rows)
            if aux.shape[0] != sequence.num_prompt:  # a chunk without them: keep the rows only
                aux = None
        tokens = sequence.tokens[:sequence.num_prompt]
        self.kept.add(SharedPrefix.copied_from(self.pool, sequence.kv.table, tokens, aux))

    def _shared(self) -> SharedPrefix | None:
        """The shared start, prefilled on first use; None without one or while no blocks are free."""
        if self.shared is None:
            from trtspec.runtime.cache.shared_prefix import shared_start

            tokens = shared_start(self.engine.tokenizer)
            if len(tokens) < 2:
                self.shared = False
            else:  # None again when no blocks are free right now: a later sequence tries again
                self.shared = SharedPrefix.prefill(self.engine, self.pool, self.allocator, tokens)
        return self.shared or None
