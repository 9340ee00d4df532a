"""Batch invariance, measured on this machine: a sequence's numbers do not depend on its batch.

The engine promises every request exactly what it gets alone. That holds only if a token's
logits are bit-for-bit the same whether it is computed alone, next to other sequences, inside a
multi-token verify pass or in a prompt chunk. Float sums round differently when a kernel changes
its blocking, so this is checked, not assumed: for the two places where the batch shape enters
(the linear layers' row count, attention's key length and row count) and end to end.
"""

from __future__ import annotations

from contextlib import contextmanager

import pytest
import torch

from trtspec.runtime.forward.linear_choice import KERNELS, ROWDOT_BF16
from trtspec.runtime.forward.prepack import available, prepack_linears
from trtspec.runtime.kernels import native, rowdot

pytestmark = pytest.mark.skipif(not available(), reason="oneDNN prepacking is not available in this torch build")


@contextmanager
def _threads(count: int):
    before = torch.get_num_threads()
    torch.set_num_threads(count)
    try:
        yield
    finally:
        torch.set_num_threads(before)


def _mkl_rows_alike(in_features: int, out_features: int) -> int | None:
    """What the load-time probe answers for MKL's F.linear on a layer of this shape here."""
    from trtspec.runtime.forward.linear_choice import fewest_rows

    weight = torch.randn(out_features, in_features)
    return fewest_rows(lambda x: torch.nn.functional.linear(x, weight), in_features)


@pytest.mark.parametrize("kernels", [KERNELS, ("onednn",), ("rowdot",), ("mkl",)], ids=["chosen", "onednn", "rowdot", "mkl"])
@pytest.mark.parametrize("threads", [1, 2])
@pytest.mark.parametrize("shape", [(64, 128), (576, 1536), (1536, 576), (576, 4096), (576, 16384)])
def test_a_packed_linear_row_is_the_same_at_any_row_count(shape, threads, kernels):
    """One row alone (the decode of a lone sequence) equals the same row among 2..600 others,
    on the kernel chosen at load and on each kernel forced (MKL only where its probe admits it,
    the row kernel where it builds).
    1536 inputs (SmolLM2's down projection) are where a single oneDNN row would round differently;
    the layers whose lone rows are not paired (probed at load) must be exact too."""
    torch.manual_seed(0)
    with _threads(threads):
        if kernels == ("mkl",) and _mkl_rows_alike(*shape) is None:
            pytest.skip(f"MKL's rows round alike at no row count up to 8 at {threads} threads here")
        if kernels == ("rowdot",) and not native.available():
            pytest.skip(f"the row kernel is not available here: {native.unavailable()}")
        model = torch.nn.Sequential(torch.nn.Linear(*shape, bias=False))
        prepack_linears(model, kernels)
        assert model[0].kernel in kernels
        _assert_rows_alike(model, shape)


def _assert_rows_alike(model, shape):
    x = torch.randn(600, shape[0])
    with torch.inference_mode():
        alone = [model(x[r:r + 1]) for r in (0, 1, 299)]
        for rows in (2, 3, 9, 64, 300, 600):
            batch = model(x[:rows])
            for index, r in enumerate((0, 1, 299)):
                if r < rows:
                    assert torch.equal(batch[r:r + 1], alone[index]), (rows, r)


def _attend_alone_and_in_passes(heads, kv_heads, head_dim):
    """Query rows attended alone and inside passes of 2..200 rows; yields (where, alone, in a pass)."""
    from trtspec.runtime.cache.paged import BlockAllocator, BlockTable, KVPool, SeqKV
    from trtspec.runtime.forward.attention import Layout

    allocator = BlockAllocator(16, 64)
    pool = KVPool(1, kv_heads, head_dim, 16 * 64)
    table = BlockTable(allocator.allocate(16), 64)
    pool.zero_blocks(table)
    queries = torch.randn(1, heads, 1000, head_dim)
    keys, values = torch.randn(1, kv_heads, 1000, head_dim), torch.randn(1, kv_heads, 1000, head_dim)

    def run(past, rows):
        layout = Layout.build([SeqKV(pool, table, past)], [rows], [None])
        window = slice(past, past + rows)
        return layout.attend(0, queries[:, :, window], keys[:, :, window], values[:, :, window], 0.125)[0]

    run(0, 1000)  # every position's keys into the pool
    for past in (0, 1, 12, 60, 63, 300, 700):
        for rows in (2, 5, 9, 70, 200):
            chunk = run(past, rows)
            for row in range(0, rows, max(1, rows // 7)):
                yield (heads, past, rows, row), run(past + row, 1)[0], chunk[row]


ROUTES = ["kernel", "torch"]  # attention compiled (trtspec.runtime.forward.attention_kernel) or torch's products


def _route(monkeypatch, route: str) -> None:
    if route == "kernel" and not native.available():
        pytest.skip(f"the compiled attention is not available here: {native.unavailable()}")
    monkeypatch.setenv("TRTSPEC_CPU_ATTENTION", route)


@pytest.mark.parametrize("route", ROUTES)
@pytest.mark.parametrize("threads", [1, 2])
def test_an_attention_row_is_the_same_at_any_width_and_key_length(threads, route, monkeypatch):
    """A query row at position p: alone (one row) equals the same row among 2..200 rows of one
    pass (a chain to verify, a prompt chunk), crossing key windows, for grouped (3 and 2 query
    heads per key head) and plain heads, head sizes 16 and 64; on both attention routes."""
    _route(monkeypatch, route)
    torch.manual_seed(0)
    with _threads(threads):
        for shape in ((9, 3, 64), (4, 2, 16), (4, 4, 16)):
            for where, alone, in_pass in _attend_alone_and_in_passes(*shape):
                assert torch.equal(in_pass, alone), where


def _paged_target(path, kernels=KERNELS):
    from trtspec.runtime.cache.paged import BlockAllocator, KVPool
    from trtspec.runtime.checkpoints.parts import load_causal_lm
    from trtspec.runtime.forward.attention import use_paged_attention

    model = load_causal_lm(path)
    prepack_linears(model, kernels)
    use_paged_attention(model)
    allocator = BlockAllocator(64, 8)
    return model, allocator, KVPool.for_model(model.config, 64 * 8)


def _kv(allocator, pool, blocks, scattered=False):
    from trtspec.runtime.cache.paged import BlockTable, SeqKV

    ids = allocator.allocate(2 * blocks if scattered else blocks)
    if scattered:  # every other block: the gather path
        allocator.free(ids[1::2])
        ids = ids[::2]
    table = BlockTable(ids, allocator.block_size)
    assert (table.base is None) == scattered
    pool.zero_blocks(table)
    return SeqKV(pool, table)


def _alone(model, allocator, pool, prompt, steps):
    """Greedy, the plainest way: the whole prompt, then one token per forward. Returns the logits rows."""
    from trtspec.runtime.forward.batch import Feed, forward

    kv = _kv(allocator, pool, 8)
    (logits,), _ = forward(model, [Feed(kv, prompt)])
    rows = [logits[-1]]
    for _ in range(steps):
        (logits,), _ = forward(model, [Feed(kv, [int(rows[-1].argmax())])])
        rows.append(logits[-1])
    allocator.free(kv.table.blocks)
    return torch.stack(rows)


@pytest.mark.parametrize("kernels,threads,route", [(KERNELS, None, "kernel"), (("onednn",), None, "torch"),
                                                  (KERNELS, None, "torch"), (("mkl",), 1, "kernel"),
                                                  ((ROWDOT_BF16,), 2, "kernel")],
                         ids=["chosen", "onednn-torch-attention", "torch-attention", "mkl-1-thread", "bfloat16"])
def test_a_sequence_is_bitwise_the_same_alone_and_batched(tiny_llama, kernels, threads, route, monkeypatch):
    """Three sequences together, prompts in chunks of 5, then verify passes of 4 tokens (their own
    greedy continuation, so all accepted), one of them on scattered blocks: every logits row
    equals the row the sequence gets alone decoding one token at a time. Also with every linear
    layer on oneDNN and attention on torch's products (where the compiled kernels cannot be
    built), attention alone on torch's products, every linear layer on MKL at one thread (where this machine's probe admits MKL: 4 rows a call on the AVX2 EPYC), and every linear layer on the bfloat16 row kernel at 2 threads (model.dtype bfloat16)."""
    _route(monkeypatch, route)
    if ROWDOT_BF16 in kernels and rowdot.bfloat16_unavailable():
        pytest.skip(rowdot.bfloat16_unavailable())
    with _threads(threads or torch.get_num_threads()):
        model, allocator, pool = _paged_target(tiny_llama, kernels)
        linears = [m for m in model.modules() if type(m).__name__ == "PackedLinear"]
        if kernels != KERNELS and not all(layer.rows_alike for layer in linears):  # the chosen ones must hold
            pytest.skip(f"{kernels}: some layer's rows round alike at no row count up to 8 here")
        _check_alone_and_batched(model, allocator, pool)


def _check_alone_and_batched(model, allocator, pool):
    from trtspec.runtime.forward.batch import Feed, forward

    prompts = [list(range(10, 40)), [5, 6, 7, 8] * 4, [42, 7]]
    with torch.inference_mode():
        reference = [_alone(model, allocator, pool, p, 12) for p in prompts]
        greedy = [[int(row.argmax()) for row in rows] for rows in reference]
        kvs = [_kv(allocator, pool, 8), _kv(allocator, pool, 8, scattered=True), _kv(allocator, pool, 8)]
        done, first = [0, 0, 0], [None] * 3
        while any(d < len(p) for d, p in zip(done, prompts, strict=True)):
            feeds, who = [], []
            for i, prompt in enumerate(prompts):
                if done[i] < len(prompt):
                    feeds.append(Feed(kvs[i], prompt[done[i]:done[i] + 5]))
                    who.append(i)
                    done[i] = min(len(prompt), done[i] + 5)
            for i, logits in zip(who, forward(model, feeds)[0], strict=True):
                if done[i] == len(prompts[i]):
                    first[i] = logits[-1]
        for i in range(3):
            assert torch.equal(first[i], reference[i][0])
        for step in range(3):
            feeds = [Feed(kvs[i], greedy[i][4 * step:4 * step + 4], num_logits=4) for i in range(3)]
            for i, logits in enumerate(forward(model, feeds)[0]):
                assert torch.equal(logits, reference[i][4 * step + 1:4 * step + 5]), (i, step)


def test_the_probed_row_minimum_is_the_smallest_that_holds_here():
    """gemm_rows.min_rows(): products of that many rows or more round each row as one large
    product does, and (when above 2) one candidate fewer does not: the padding attention pays
    for a lone decode row is what this machine's kernels need, not a guess."""
    from trtspec.runtime.forward.gemm_rows import CANDIDATES, min_rows, probe

    rows = min_rows()
    assert rows in CANDIDATES and probe((rows,)) == rows
    if rows > CANDIDATES[0]:
        assert probe((CANDIDATES[CANDIDATES.index(rows) - 1],)) is None
