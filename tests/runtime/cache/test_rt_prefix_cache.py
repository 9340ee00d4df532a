"""The chat template's shared prompt start, prefilled once and copied into every request (prefix_cache).

What must hold: the copied keys and values are bit for bit those a whole prompt's prefill writes,
so generation is the same token for token with and without reuse, under concurrency, with every
drafter; an EAGLE-3 head gets the copied start's layer outputs and drafts exactly as without reuse.
"""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor

import pytest

TEXTS = ["Count to five.", "Repeat after me: red green red green red green",
         "What is 2 + 2?", "Write a short poem about the sea."]


def test_the_shared_start_is_the_templates_fixed_part(ngram_engine):
    from trtspec.runtime.cache.shared_prefix import shared_start

    tokens = shared_start(ngram_engine.tokenizer)
    prompts = [ngram_engine.encode(text) for text in TEXTS]
    assert len(tokens) >= 2 and all(p[:len(tokens)] == tokens for p in prompts)
    assert len({p[len(tokens)] for p in prompts}) > 1      # the first token after it already differs


def test_copied_keys_and_values_equal_a_whole_prompt_prefill(ngram_engine):
    import torch

    from trtspec.runtime.cache.shared_prefix import SharedPrefix, shared_start

    scheduler = ngram_engine.scheduler
    start = shared_start(ngram_engine.tokenizer)
    alone = SharedPrefix.prefill(ngram_engine, scheduler.pool, scheduler.allocator, start)
    prompt = ngram_engine.encode(TEXTS[3])
    whole = SharedPrefix.prefill(ngram_engine, scheduler.pool, scheduler.allocator, prompt)
    count = len(start)
    assert alone.reusable(prompt) == count
    for layer in range(len(alone.keys)):
        assert torch.equal(alone.keys[layer], whole.keys[layer][:, :, :count])
        assert torch.equal(alone.values[layer], whole.values[layer][:, :count])
    # a prompt that is only the shared start keeps its last token to prefill (its logits)
    assert alone.reusable(start) == count - 1


def test_the_prefill_owns_its_whole_key_window(ngram_engine):
    """Attention reads 64-key windows: slots past the shared start that belong to nobody (torch.empty
    garbage, NaN here) must not reach its keys (0 x NaN is NaN)."""
    import torch

    from trtspec.runtime.cache.shared_prefix import SharedPrefix, shared_start

    engine = ngram_engine.variant(tokens_per_block=4)
    try:
        scheduler = engine.scheduler
        for keys, values in zip(scheduler.pool.keys, scheduler.pool.values, strict=True):
            keys.fill_(float("nan"))
            values.fill_(float("nan"))
        prefix = SharedPrefix.prefill(engine, scheduler.pool, scheduler.allocator, shared_start(engine.tokenizer))
        assert all(torch.isfinite(k).all() and torch.isfinite(v).all() for k, v in zip(prefix.keys, prefix.values,
                                                                                         strict=True))
        assert scheduler.allocator.num_used == 0               # the borrowed blocks went back
    finally:
        engine.close()


def _cache_after_prefill(engine, text, draft_pool=False):
    """Keys and values of a lone request's prompt positions, read once it is done from the target's
    pool (one new token: the prefill's) or the EAGLE-3 head's (three: the head caught up on the prompt)."""
    import queue

    results = queue.SimpleQueue()
    ids = engine.encode(text)
    sequence = engine.submit(ids, max_new_tokens=3 if draft_pool else 1, sink=results.put)
    while results.get(timeout=60).finish_reason is None:
        pass
    pool, table = engine.scheduler.draft_pool if draft_pool else engine.scheduler.pool, sequence.table
    return [pool.read(layer, table, len(ids), None if table.base is not None else _slots(table, len(ids)))
            for layer in range(len(pool.keys))]


def _slots(table, count):
    import torch

    return torch.tensor(table.slots(0, count))


def test_a_requests_whole_cache_is_bit_for_bit_the_same(ngram_engine):
    """Not only the copied start: the rows prefilled after it attend over copied keys."""
    import torch

    with_reuse = ngram_engine.variant(kv_cache_reuse=True)
    without = ngram_engine.variant(kv_cache_reuse=False)
    try:
        for text in TEXTS:
            reused, computed = _cache_after_prefill(with_reuse, text), _cache_after_prefill(without, text)
            for (k1, v1), (k2, v2) in zip(reused, computed, strict=True):
                assert torch.equal(k1, k2) and torch.equal(v1, v2)
        assert with_reuse.scheduler.snapshot().prefix_cache_hits > 0
    finally:
        with_reuse.close()
        without.close()


def _generate_all(engine, texts, speculative=True, concurrency=4):
    """`concurrency` texts at a time, a wave after the one before has finished: in one pool a
    thread freed early could start a text's second request while its first still runs, and then
    the hits counted would depend on the order threads reach the engine."""
    results = []
    for wave in range(0, len(texts), concurrency):
        with ThreadPoolExecutor(concurrency) as pool:
            results += pool.map(lambda text: engine.generate(text, max_new_tokens=12, speculative=speculative),
                                texts[wave:wave + concurrency])
    return [r.token_ids for r in results]


@pytest.mark.parametrize("fixture", ["ngram_engine", "draft_engine"])
def test_generation_is_unchanged_token_for_token(fixture, request):
    engine = request.getfixturevalue(fixture)
    with_reuse = engine.variant(kv_cache_reuse=True)
    without = engine.variant(kv_cache_reuse=False)
    try:
        for speculative in (True, False):
            assert _generate_all(with_reuse, TEXTS * 2, speculative) == _generate_all(without, TEXTS * 2, speculative)
        stats, plain = with_reuse.scheduler.snapshot(), without.scheduler.snapshot()
        start = len(with_reuse.scheduler.reuse.shared.tokens)
        # 16 requests, each text 4 times: its first copies the shared start, the 3 later ones the
        # kept prompt, all of it but the last token (prompt_cache; in waves of the 4 texts: a text's
        # second request starts once its first has finished)
        lengths = [len(engine.encode(t)) for t in TEXTS]
        assert stats.prefix_cache_hits == sum(start + 3 * (n - 1) for n in lengths)
        assert stats.prefix_cache_queries == sum(len(engine.encode(t)) for t in TEXTS) * 4
        assert plain.prefix_cache_hits == plain.prefix_cache_queries == 0
    finally:
        with_reuse.close()
        without.close()


def test_eagle3_heads_get_the_shared_starts_layer_outputs(eagle_engine):
    """The head is fed the target's layer outputs of every prompt position: with reuse it gets the
    copied start's (the same rows), so it drafts exactly what it drafts without reuse."""
    import torch

    with_reuse = eagle_engine.variant(kv_cache_reuse=True)
    without = eagle_engine.variant(kv_cache_reuse=False)
    try:
        runs = {}
        for name, engine in (("reuse", with_reuse), ("none", without)):
            results = [engine.generate(text, max_new_tokens=12) for text in TEXTS]   # one at a time: comparable
            runs[name] = ([r.token_ids for r in results],
                          [(r.stats.num_drafts, r.stats.num_accepted_tokens, r.stats.accepted_per_position)
                           for r in results])
        assert runs["reuse"] == runs["none"]
        assert sum(drafts for drafts, _, _ in runs["reuse"][1]) > 0
        for text in TEXTS:  # the head's own cache of the prompt, bit for bit (drafts alone are a weak witness)
            reused = _cache_after_prefill(with_reuse, text, draft_pool=True)
            computed = _cache_after_prefill(without, text, draft_pool=True)
            for (k1, v1), (k2, v2) in zip(reused, computed, strict=True):
                assert torch.equal(k1, k2) and torch.equal(v1, v2)
        start = len(with_reuse.scheduler.reuse.shared.tokens)
        # the first round copied the shared start; the second the prompts kept (with their layer
        # outputs) by the first, all but their last token: the head's cache above is still bit for bit
        lengths = [len(with_reuse.encode(t)) for t in TEXTS]
        assert with_reuse.scheduler.snapshot().prefix_cache_hits == sum(start + n - 1 for n in lengths)
        assert with_reuse.scheduler.reuse.shared.aux is not None
        plain = [with_reuse.generate(text, max_new_tokens=12, speculative=False).token_ids for text in TEXTS]
        assert plain == runs["reuse"][0]                                          # greedy speculation lossless
    finally:
        with_reuse.close()
        without.close()


def test_a_prompt_kept_by_a_plain_request_serves_a_speculative_one(eagle_engine):
    """Issue 69: a prompt first prefilled without speculation (a --baseline request on the same
    engine) is kept with the target's layer outputs too, so a later speculative request copies all
    of it but its last token, and the head drafts exactly what it drafts on a fresh prompt (chains
    of 4 at every step, so measured times never pick the drafts)."""
    import torch

    with_reuse = eagle_engine.variant(kv_cache_reuse=True, draft_len_schedule=((1, 4),))
    without = eagle_engine.variant(kv_cache_reuse=False, draft_len_schedule=((1, 4),))
    try:
        for text in TEXTS:
            assert (with_reuse.generate(text, max_new_tokens=4, speculative=False).token_ids
                    == without.generate(text, max_new_tokens=4, speculative=False).token_ids)
            before = with_reuse.scheduler.snapshot().prefix_cache_hits
            reused, fresh = with_reuse.generate(text, max_new_tokens=12), without.generate(text, max_new_tokens=12)
            assert with_reuse.scheduler.snapshot().prefix_cache_hits - before == len(with_reuse.encode(text)) - 1
            assert reused.token_ids == fresh.token_ids
            assert ((reused.stats.num_drafts, reused.stats.num_accepted_tokens, reused.stats.accepted_per_position)
                    == (fresh.stats.num_drafts, fresh.stats.num_accepted_tokens, fresh.stats.accepted_per_position))
            assert reused.stats.num_drafts > 0
            for (k1, v1), (k2, v2) in zip(_cache_after_prefill(with_reuse, text, draft_pool=True),
                                          _cache_after_prefill(without, text, draft_pool=True), strict=True):
                assert torch.equal(k1, k2) and torch.equal(v1, v2)   # the head's own cache of the prompt
    finally:
        with_reuse.close()
        without.close()


def test_a_tokenizer_without_a_template_shares_nothing(ngram_engine):
    import copy

    from trtspec.runtime.cache.shared_prefix import shared_start

    plain = copy.copy(ngram_engine.tokenizer)
    plain.chat_template = None
    assert shared_start(plain) == []


SYSTEM = "You are a careful assistant. Answer in one short sentence, then stop. Question: "


def test_a_prompt_sharing_a_kept_prompts_start_copies_it_bit_for_bit(ngram_engine):
    """Past the template's start: a later prompt that begins like a kept one (a user's own system
    prompt, a few-shot preamble) copies all they share, and its whole cache and tokens are what a
    prefill of its own gives (prompt_cache)."""
    import torch

    with_reuse = ngram_engine.variant(kv_cache_reuse=True)
    without = ngram_engine.variant(kv_cache_reuse=False)
    try:
        first, second = (with_reuse.encode(SYSTEM + q) for q in ("Count to five.", "What is 2 + 2?"))
        shared = next(i for i, (a, b) in enumerate(zip(first, second, strict=False)) if a != b)
        assert shared > len(with_reuse.scheduler.reuse._shared().tokens) + 16   # well past the template's start
        _cache_after_prefill(with_reuse, SYSTEM + "Count to five.")
        before = with_reuse.scheduler.snapshot().prefix_cache_hits
        reused = _cache_after_prefill(with_reuse, SYSTEM + "What is 2 + 2?")
        assert with_reuse.scheduler.snapshot().prefix_cache_hits - before == shared
        computed = _cache_after_prefill(without, SYSTEM + "What is 2 + 2?")
        for (k1, v1), (k2, v2) in zip(reused, computed, strict=True):
            assert torch.equal(k1, k2) and torch.equal(v1, v2)
        texts = [SYSTEM + t for t in TEXTS]
        for speculative in (True, False):   # 4 at a time, each text twice: kept prompts copied under load
            assert _generate_all(with_reuse, texts * 2, speculative) == _generate_all(without, texts * 2, speculative)
    finally:
        with_reuse.close()
        without.close()


def test_no_memory_for_kept_prompts_leaves_the_shared_start_only(ngram_engine):
    engine = ngram_engine.variant(kv_cache_reuse=True, kv_cache_reuse_mib=0)
    try:
        for _ in range(2):
            engine.generate(SYSTEM + TEXTS[0], max_new_tokens=4)
        assert engine.scheduler.reuse.kept is None
        assert engine.scheduler.snapshot().prefix_cache_hits == 2 * len(engine.scheduler.reuse.shared.tokens)
    finally:
        engine.close()
