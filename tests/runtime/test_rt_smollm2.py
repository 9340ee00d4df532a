"""SmolLM2-135M on the dev prompts: speculative greedy under load == plain greedy alone, exactly.

Slow (a few minutes on 2 cores): 30 prompts x 32 new tokens, each alone without speculation, then
all 30 sent at once with n-gram speculation (8 run together, the rest queue and join as others
finish). Batch invariance (test_rt_batch_invariance.py) makes the two identical token for token;
no near-tie allowance is needed, and none is given. The plain runs alone also prefill every prompt
token themselves, where the batched ones copy the chat template's shared start (prefix_cache).
"""

from __future__ import annotations

import pytest

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def smollm2_engine(smollm2):
    from trtspec.runtime import Engine

    # drafting pinned on at every batch size: the load policy may switch it off at 8 (it did once the
    # row kernel made a lone step cheaper), which would leave no verify pass to check
    return Engine.from_checkpoints(smollm2, mode="ngram", max_draft_len=6, ngram_min=1, ngram_max=3,
                                   max_batch_size=8, draft_len_schedule=((1, 6),))


@pytest.mark.parametrize("threads", [1, 2])
def test_smollm2_speculative_batched_equals_plain_alone(smollm2_engine, dev_prompts, threads):
    import threading

    import torch

    saved = torch.get_num_threads()
    torch.set_num_threads(threads)
    try:
        prompts = [smollm2_engine.encode(row["prompt"]) for row in dev_prompts]
        alone = smollm2_engine.variant(kv_cache_reuse=False)
        try:
            plain = [alone.generate(ids, max_new_tokens=32, speculative=False).token_ids for ids in prompts]
        finally:
            alone.close()
        steps, done = [], threading.Semaphore(0)
        smollm2_engine.scheduler.on_step = steps.append

        def sink(item):
            if isinstance(item, BaseException) or item.finish_reason is not None:
                done.release()

        sequences = [smollm2_engine.submit(ids, max_new_tokens=32, sink=sink) for ids in prompts]
        for _ in sequences:
            assert done.acquire(timeout=900)
    finally:
        torch.set_num_threads(saved)
        smollm2_engine.scheduler.on_step = None
    batched = [s.output.token_ids for s in sequences]
    for row, want, got in zip(dev_prompts, plain, batched, strict=True):
        assert got == want, f"{row['category']} prompt {row['prompt'][:40]!r} differs under load"
    assert max(s.last_batch_size for s in steps) == 8
    assert sum(s.stats.num_accepted_tokens for s in sequences) > 0, "n-gram drafts were never accepted"
    assert smollm2_engine.scheduler.snapshot().prefix_cache_hits >= 24 * len(prompts)   # SmolLM2's shared start
