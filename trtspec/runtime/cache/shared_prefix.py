"""The prompt start every chat request shares, prefilled once and copied into each new sequence.

Why: with the chat template every request's prompt begins with the same tokens (SmolLM2: its
default system message and the user turn's header, 24 tokens). Under load a short request's
prefill is a large share of the server's time: on the held-back dev prompts (60 prompt tokens,
~49 answer tokens, plain decoding, in process) steps carrying prompt rows took 6 % of the forward
time at concurrency 1 and 28-29 % at concurrency 8 (docs/BENCHMARKS-log.md, "Steady state"). Keys and
values of a position depend only on the tokens up to it, so those of the shared start are
computed once and copied into every new sequence's blocks; its prefill begins after them.
TensorRT-LLM calls this KV cache reuse (`enable_kv_cache_reuse`, which the GPU repositories set),
vLLM automatic prefix caching; this is the one prefix known before any request, found by
rendering the template around two different messages. Prompts seen since are kept by
prompt_cache.py, which copies through the same SharedPrefix.

Exactness: a row's keys and values do not depend on the rows that share its forward (the batch
invariance tests/runtime/forward/test_rt_batch_invariance.py checks, chunked prefill included), so the
copied rows are bit for bit what the sequence's own prefill would have written and generation is
unchanged token for token (tests/runtime/cache/test_rt_prefix_cache.py). A prompt is matched on its
token ids, so a request with another template or raw ids reuses only what it really shares.

An EAGLE-3 head is fed the target's layer outputs of every prompt position: the prefill keeps
those of the shared start too, and a sequence that reuses it hands them to its head session as its
own prefill would have (the same rows, bit for bit, so the same drafts).
"""

from __future__ import annotations

from typing import Any

from trtspec.chat import has_chat_template, prompt_ids

# Two messages that share no first character: the tokens before they differ are the template's.
_PROBES = ("Hello", "1 + 1")


def shared_start(tokenizer: Any) -> list[int]:
    """The token ids every chat prompt of `tokenizer` begins with ([] without a chat template)."""
    if not has_chat_template(tokenizer):
        return []  # plain text prompts share at most a BOS token
    renders = [prompt_ids(tokenizer, text) for text in _PROBES]
    return renders[0][:common_length(*renders)]


def common_length(a: list[int], b: list[int]) -> int:
    """How many leading ids two token lists share."""
    count = 0
    for x, y in zip(a, b, strict=False):
        if x != y:
            break
        count += 1
    return count


class SharedPrefix:
    """Keys and values of the shared start, every layer, ready to copy into a sequence's slots."""

    def __init__(self, tokens: list[int], keys: list[Any], values: list[Any], aux: Any = None):
        self.tokens = tokens
        self.keys = keys      # per layer [kv_heads, head_dim, len(tokens)] (transposed, as the pool)
        self.values = values  # per layer [kv_heads, len(tokens), head_dim]
        self.aux = aux        # [len(tokens), sum of hidden sizes]: the drafter's layer outputs, or None

    @classmethod
    def prefill(cls, engine: Any, pool: Any, allocator: Any, tokens: list[int]) -> SharedPrefix | None:
        """Run the target over `tokens` in borrowed blocks and keep a copy of their keys and values;
        None when the pool has no blocks free for it now."""
        import torch

        from trtspec.runtime.cache.paged import BlockTable, SeqKV
        from trtspec.runtime.forward.attention import window_end
        from trtspec.runtime.forward.batch import Feed, forward

        # attention reads whole key windows: every slot of them must be ours and zeroed (not NaN)
        blocks = allocator.allocate(allocator.blocks_for(window_end(len(tokens))))
        if blocks is None:
            return None
        try:
            table = BlockTable(blocks, allocator.block_size)
            pool.zero_blocks(table)
            aux_ids = tuple(getattr(engine.drafter, "aux_layer_ids", ()) or ())
            with torch.inference_mode():
                _, aux = forward(engine.target, [Feed(SeqKV(pool, table), list(tokens))], engine.layer_outputs(),
                                 aux_ids)
            return cls.copied_from(pool, table, tokens, aux[0].clone() if aux_ids else None)
        finally:
            allocator.free(blocks)

    @classmethod
    def copied_from(cls, pool: Any, table: Any, tokens: list[int], aux: Any = None) -> SharedPrefix:
        """A copy of the first len(tokens) rows a sequence's `table` holds in `pool`, every layer,
        with `aux` (the caller's own tensor, kept as given)."""
        gather = None if table.base is not None else _slots(table, len(tokens))
        read = [pool.read(layer, table, len(tokens), gather) for layer in range(len(pool.keys))]
        return cls(list(tokens), [k.clone() for k, _ in read], [v.clone() for _, v in read], aux)

    def reusable(self, prompt: list[int]) -> int:
        """Leading prompt positions whose keys and values this prefix holds; at least one prompt
        token is left to prefill, since the first output token needs its logits."""
        return min(common_length(self.tokens, prompt), len(prompt) - 1)

    def copy_into(self, kv: Any, count: int) -> None:
        """Write the first `count` positions into a sequence's (zeroed) cache and mark them valid."""
        pool, table = kv.pool, kv.table
        slots = None if table.base is not None else _slots(table, count)
        for layer, (keys, values) in enumerate(zip(self.keys, self.values, strict=True)):
            if slots is None:
                pool.keys[layer][:, :, table.base:table.base + count].copy_(keys[:, :, :count])
                pool.values[layer][:, table.base:table.base + count].copy_(values[:, :count])
            else:
                pool.keys[layer].index_copy_(2, slots, keys[:, :, :count])
                pool.values[layer].index_copy_(1, slots, values[:, :count])
        kv.length = count


def _slots(table: Any, count: int):
    import torch

    return torch.tensor(table.slots(0, count), dtype=torch.long)
