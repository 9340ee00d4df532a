"""layerskip's one cache and its verification from the exit layer: the draft writes its early
layers' keys and values in the target's pool, and a verify pass runs only the later layers for the
rows the draft fed, where that is exact (trtspec.runtime.drafters.layerskip); elsewhere it verifies
every layer and says why."""

from __future__ import annotations

import threading

import pytest

from tests.runtime.conftest import TINY_PROMPTS, spy_drafts

EXIT = 2  # of tiny_llama's 4 layers


@pytest.fixture(scope="module")
def engine(tiny_llama):
    from trtspec.runtime import Engine

    # a schedule that always drafts: the cost model might turn drafting off for this cheap target;
    # a small token budget splits long prompts into chunks that share steps with decoding sequences
    engine = Engine.from_checkpoints(tiny_llama, mode="layerskip", exit_layer=EXIT, max_draft_len=4,
                                     draft_len_schedule=[[1, 4]], max_num_tokens=24)
    yield engine
    engine.close()


def _prefilled(target, pool, allocator, prompt):
    """A sequence's SeqKV in `pool` after its prompt's prefill, and its tokens with the first
    output pending (a decoding sequence: the cache holds all but the last token)."""
    from trtspec.runtime.cache.paged import BlockTable, SeqKV
    from trtspec.runtime.forward.batch import Feed, forward

    table = BlockTable(allocator.allocate(4), allocator.block_size)
    pool.zero_blocks(table)
    kv = SeqKV(pool, table)
    logits, _ = forward(target, [Feed(kv, list(prompt))])
    return kv, list(prompt) + [int(logits[0][-1].argmax())]


def _pools(target, prompts):
    """Two pools holding the same prefilled sequences (blocks allocated alike): per pool
    (pool, its allocator with blocks to spare, [(kv, tokens)])."""
    from trtspec.runtime.cache.paged import BlockAllocator, KVPool

    made = []
    for _ in range(2):
        allocator = BlockAllocator((len(prompts) + 1) * 4, 16)
        pool = KVPool.for_model(target.config, allocator.num_blocks * 16)
        made.append((pool, allocator, [_prefilled(target, pool, allocator, p) for p in prompts]))
    return made


def test_draft_rows_are_the_targets_and_verification_from_them_changes_nothing(engine):
    """Three sequences of different lengths draft together in the target's pool, two chains and a
    dynamic tree: the draft writes nothing below a sequence's committed length nor outside its own
    blocks; (a) the layer-E rows each chain carries equal bit for bit what a full target forward
    computes at layer E for them (in another batch: beside a prompt chunk); (c) the verify pass
    starting from them gives the same logits and leaves the same keys and values in every layer as
    one that recomputes every row (the tree's rows are recomputed: they carry none)."""
    import dataclasses
    from types import SimpleNamespace

    import torch

    from trtspec.runtime.cache.paged import SeqKV
    from trtspec.runtime.forward.batch import Feed, forward
    from trtspec.runtime.loop.step import _verify_feed
    from trtspec.runtime.verify.sampling import SamplingParams
    from trtspec.runtime.verify.tree import TreeShape

    target, drafter = engine.target, engine.drafter
    (pool, _, reused), (other, allocator, full) = _pools(target, [TINY_PROMPTS[0], TINY_PROMPTS[3], TINY_PROMPTS[1]])
    sessions = [drafter.session(tokens, SamplingParams(), None, kv=SeqKV(pool, kv.table)) for kv, tokens in reused]
    sessions[2].tree = TreeShape(2, 3, 6)
    before = [(k.clone(), v.clone()) for k, v in zip(pool.keys, pool.values, strict=True)]
    drafts = drafter.propose_batch(sessions, [tokens for _, tokens in reused], [4, 3, 6])
    assert drafter.reuse_off is None
    assert all(d.tree is None and d.hidden_layer == EXIT and d.hidden.shape[0] == d.size for d in drafts[:2])
    assert drafts[2].tree is not None and drafts[2].hidden is None
    scratch = torch.zeros(pool.keys[0].shape[-1], dtype=torch.bool)  # slots a draft may write: its own, past the committed
    for kv, _ in reused:
        scratch[kv.table.slots(kv.length, kv.table.capacity)] = True
    for (k, v), (k0, v0) in zip(zip(pool.keys, pool.values, strict=True), before, strict=True):
        bits = (k.view(torch.int32), v.view(torch.int32), k0.view(torch.int32), v0.view(torch.int32))  # unused slots: any bits
        assert torch.equal(bits[0][:, :, ~scratch], bits[2][:, :, ~scratch])
        assert torch.equal(bits[1][:, ~scratch], bits[3][:, ~scratch])
    feeds = [_verify_feed(SimpleNamespace(kv=kv, tokens=tokens), d) for (kv, tokens), d in zip(reused, drafts,
                                                                                                strict=True)]
    plain = [_verify_feed(SimpleNamespace(kv=kv, tokens=tokens), dataclasses.replace(d, hidden=None))
             for (kv, tokens), d in zip(full, drafts, strict=True)]
    assert [f.hidden is not None for f in feeds] == [True, True, False] and all(f.hidden is None for f in plain)
    # (a) layer E's output for the verify rows, from a full target forward with a 30-token chunk beside them
    chunk_kv, _ = _prefilled(target, other, allocator, [3, 4])
    layer_outputs: dict = {}
    forward(target, plain + [Feed(chunk_kv, list(range(100, 130)), num_logits=0)], layer_outputs, (EXIT,))
    for (kv, _), feed in zip(full, plain, strict=True):
        kv.length -= len(feed.token_ids)  # the same pass again below, without the chunk
    start = 0
    for draft, feed in zip(drafts, plain, strict=True):
        if draft.hidden is not None:
            assert torch.equal(draft.hidden, layer_outputs[EXIT][0, start:start + draft.hidden.shape[0]])
        start += len(feed.token_ids)
    # (c) the verify pass from layer E against the full one: logits and every layer's cached rows
    logits, _ = forward(target, feeds)
    expected, _ = forward(target, plain)
    assert all(torch.equal(a, b) for a, b in zip(logits, expected, strict=True))
    for (kv, _), (full_kv, _) in zip(reused, full, strict=True):
        assert kv.length == full_kv.length
        slots = torch.tensor(kv.table.slots(0, kv.length))
        for layer in range(len(pool.keys)):
            assert torch.equal(pool.keys[layer][:, :, slots], other.keys[layer][:, :, slots])
            assert torch.equal(pool.values[layer][:, slots], other.values[layer][:, slots])


def test_greedy_in_flight_with_prompt_chunks_equals_the_target_alone(engine):
    """(b) Six requests of different lengths at once, the long prompts prefilled in chunks beside
    decoding sequences; every answer is the target's own, and the drafts were verified from layer E.
    (c) layerskip makes no pool of its own."""
    prompts = [TINY_PROMPTS[3], TINY_PROMPTS[0], list(range(200, 240)), TINY_PROMPTS[2], TINY_PROMPTS[1],
               list(range(300, 330))]
    plain = [engine.generate(p, max_new_tokens=20, speculative=False).token_ids for p in prompts]
    seen, steps, failures = spy_drafts(engine), [], []
    finished = [threading.Event() for _ in prompts]
    decoding, all_queued, first = threading.Event(), threading.Event(), []

    def on_step(stats):
        steps.append(stats)
        # (the first call may be the plain runs' last step, so ask the first two themselves)
        if first and all(s.output.token_ids for s in first) and not all_queued.is_set():
            # the loop waits here for the other four: their prompts then share steps with the first
            # two's decoding however late a busy machine runs any thread (threads started one by
            # one overlapped only by chance; all queued at once, every prompt is prefilled first)
            decoding.set()
            all_queued.wait(120)

    def sink_for(i):
        def sink(item):
            if isinstance(item, BaseException):
                failures.append(item)
            if isinstance(item, BaseException) or item.finish_reason is not None:
                finished[i].set()
        return sink

    engine.scheduler.on_step = on_step
    try:
        first += [engine.submit(p, max_new_tokens=20, sink=sink_for(i)) for i, p in enumerate(prompts[:2])]
        assert decoding.wait(300)
        sequences = list(first)
        sequences += [engine.submit(p, max_new_tokens=20, sink=sink_for(i + 2)) for i, p in enumerate(prompts[2:])]
        all_queued.set()
        assert all(event.wait(300) for event in finished)
    finally:
        all_queued.set()
        engine.scheduler.on_step = None
        del engine.drafter.propose_batch
    assert not failures
    assert [s.output.token_ids for s in sequences] == plain
    assert any(0 < s.last_num_decoding < s.last_batch_size for s in steps)  # decoding beside prompt chunks
    drafts = [d for batch in seen for d in batch if d is not None]
    assert drafts and all(d.hidden is not None for d in drafts)
    assert max(len(batch) for batch in seen) > 1
    assert engine.scheduler.draft_pool is None and engine.drafter.kv_config is None


def test_where_rows_could_round_apart_every_layer_is_verified(engine, capfd):
    """(d) An early layer whose kernel's rows round apart at some row count (as the probe marks it
    on such a CPU): no rows are reused, one line says why, the answers are still the target's, and
    the cache holds what the same engine leaves there when it reuses them."""
    import torch

    from trtspec.runtime.drafters.layerskip import reuse_problem

    prompts = TINY_PROMPTS[:2]
    reused = [_alone_with_cache(engine, p) for p in prompts]
    layer, drafter = engine.target.model.layers[1].mlp.down_proj, engine.drafter
    seen = spy_drafts(engine)
    layer.rows_alike, drafter._problems = False, {}  # what PackedLinear.choose sets where no row count rounds alike
    try:
        verified = [_alone_with_cache(engine, p) for p in prompts]
        reason = drafter.reuse_off
    finally:
        layer.rows_alike, drafter._problems = True, {}
        del engine.drafter.propose_batch
    assert reason.startswith("layer 1's down_proj runs on a kernel whose rows round apart")
    drafts = [d for batch in seen for d in batch if d is not None]
    assert drafts and all(d.hidden is None for d in drafts)
    assert capfd.readouterr().err.count("layerskip verifies every layer") == 1
    for prompt, (output, rows), (output_verified, rows_verified) in zip(prompts, reused, verified, strict=True):
        assert output == output_verified == engine.generate(prompt, max_new_tokens=24, speculative=False).token_ids
        assert all(torch.equal(a, b) for pair, other in zip(rows, rows_verified, strict=True)
                   for a, b in zip(pair, other, strict=True))
    assert reuse_problem(engine.target, EXIT) is None


def _alone_with_cache(engine, prompt):
    """One request alone: its output tokens and, per layer, the (keys, values) its cache holds at the end."""
    import torch

    done = threading.Event()

    def sink(item):
        if isinstance(item, BaseException) or item.finish_reason is not None:
            done.set()

    sequence = engine.submit(prompt, max_new_tokens=24, sink=sink)
    assert done.wait(60)
    slots, pool = torch.tensor(sequence.table.slots(0, sequence.kv.length)), engine.scheduler.pool
    return sequence.output.token_ids, [(k[:, :, slots].clone(), v[:, slots].clone())
                                       for k, v in zip(pool.keys, pool.values, strict=True)]
