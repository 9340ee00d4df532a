"""llama_forward: transformers' Llama forward without its plumbing, bit for bit the same numbers.

The engine runs every Llama target (and Llama draft model) through trtspec.runtime.forward.llama_forward
instead of the transformers module tree. That is only allowed because the results are identical,
so this compares the two paths on the same weights, feed for feed, with torch.equal.
"""

from __future__ import annotations

import pytest
import torch

from trtspec.runtime.cache.paged import BlockAllocator, BlockTable, KVPool, SeqKV
from trtspec.runtime.checkpoints.parts import load_causal_lm
from trtspec.runtime.forward import batch, llama_forward
from trtspec.runtime.forward.attention import use_paged_attention
from trtspec.runtime.forward.batch import Feed
from trtspec.runtime.forward.linear_choice import ROWDOT
from trtspec.runtime.forward.prepack import prepack_linears
from trtspec.runtime.kernels import native
from trtspec.runtime.verify.tree import Tree, tree_inputs

AUX_IDS = (1, 2)  # hidden_states indices: the outputs of layers 0 and 1


@pytest.fixture(scope="module")
def stackable_llama(tmp_path_factory):
    """A tiny Llama whose q, k, v and gate, up row counts are multiples of the row kernel's group,
    so prepack stacks them (trtspec.runtime.forward.fused_linears) and the lean path makes one call each."""
    from trtspec.testing.tiny import make_tiny_llama

    return make_tiny_llama(tmp_path_factory.mktemp("stackable"), seed=3, hidden_size=96, intermediate_size=192)


def _target(path, packed: bool, kernels: tuple[str, ...] | None = None):
    """`kernels`: the linear kernels prepack may choose from (default: all, the fastest here)."""
    model = load_causal_lm(path)
    if packed:
        prepack_linears(model, *([kernels] if kernels else []))
    use_paged_attention(model)
    return model


def _hooked(model, store: dict):
    """Forward hooks as the Engine sets them, for the transformers path's auxiliary outputs."""
    for index in AUX_IDS:
        model.model.layers[index - 1].register_forward_hook(
            lambda module, args, output, index=index: store.__setitem__(index, output))


def _sequences(model, allocator, blocks_each=(8, 8, 8)):
    pool = KVPool.for_model(model.config, allocator.num_blocks * allocator.block_size)
    kvs = []
    for i, blocks in enumerate(blocks_each):
        ids = allocator.allocate(2 * blocks if i == 1 else blocks)
        if i == 1:  # scattered blocks: the gather path
            allocator.free(ids[1::2])
            ids = ids[::2]
        table = BlockTable(ids, allocator.block_size)
        pool.zero_blocks(table)
        kvs.append(SeqKV(pool, table))
    return kvs


def _script(kvs):
    """The feeds of a few engine steps: chunked prompts, verify passes, a tree; built lazily
    because positions depend on each cache's length at the time."""
    tree = Tree([[0], [1], [0, 0], [0, 1], [1, 0]])
    yield [Feed(kvs[0], list(range(10, 40)), num_logits=1), Feed(kvs[1], [5, 6, 7, 8] * 3, num_logits=0),
           Feed(kvs[2], [42], num_logits=1)]
    yield [Feed(kvs[1], [9, 10, 11], num_logits=1), Feed(kvs[2], [3, 4, 5, 6, 7], num_logits=5)]
    positions, mask = tree_inputs(tree, kvs[0].length)
    yield [Feed(kvs[0], [7, 8, 9, 10, 11, 12], positions=positions[0].tolist(), mask=mask, num_logits=6),
           Feed(kvs[1], [13], num_logits=1), Feed(kvs[2], [14, 15], num_logits=2)]
    for _ in range(3):
        yield [Feed(kv, [20 + kv.length % 50], num_logits=1) for kv in kvs]


@pytest.mark.parametrize(("checkpoint", "packed"), [("tiny_llama", True), ("tiny_llama", False),
                                                    ("stackable_llama", True)],
                         ids=["prepacked", "nn.Linear", "prepacked-stacked"])
def test_llama_forward_equals_transformers_bit_for_bit(request, checkpoint, monkeypatch, packed):
    """Logits and auxiliary layer outputs of every feed, every step: identical on both paths
    (the stacked projections' one call included: transformers calls each layer alone)."""
    path = request.getfixturevalue(checkpoint)
    stacking = checkpoint == "stackable_llama"
    if stacking and not native.available():
        pytest.skip(f"the row kernel cannot run here: {native.unavailable()}")
    kernels = (ROWDOT,) if stacking else None  # tiny layers may time faster on MKL: the row kernel is what stacks
    lean_model, plain_model = _target(path, packed, kernels), _target(path, packed, kernels)
    assert llama_forward.supports(lean_model)
    if stacking:
        for layer in lean_model.model.layers:
            assert layer.self_attn.q_proj.fused.usable() and layer.mlp.gate_proj.fused.usable()
    store: dict = {}
    _hooked(plain_model, store)
    lean_kvs = _sequences(lean_model, BlockAllocator(64, 8))
    plain_kvs = _sequences(plain_model, BlockAllocator(64, 8))
    with torch.inference_mode():
        for lean_feeds, plain_feeds in zip(_script(lean_kvs), _script(plain_kvs), strict=True):
            lean_aux: dict = {}
            lean = batch.forward(lean_model, lean_feeds, lean_aux, AUX_IDS)
            with monkeypatch.context() as patch:
                patch.setattr(batch, "_lean", lambda model: False)
                plain = batch.forward(plain_model, plain_feeds, store, AUX_IDS)
            for mine, theirs in zip(lean[0] + lean[1], plain[0] + plain[1], strict=True):
                assert torch.equal(mine, theirs)
            assert set(lean_aux) == set(AUX_IDS)


def test_only_the_mirrored_llama_takes_the_lean_path(tiny_llama, tmp_path):
    """A float32 Llama does; the same Llama in bfloat16 (RMSNorm's casts are not no-ops then),
    in training mode, or a model of another family goes through transformers."""
    from transformers import Qwen2Config, Qwen2ForCausalLM

    model = _target(tiny_llama, packed=True)
    assert llama_forward.supports(model) and batch._lean(model)
    model.train()
    assert not batch._lean(model)
    assert not llama_forward.supports(load_causal_lm(tiny_llama).to(torch.bfloat16))
    qwen = Qwen2ForCausalLM(Qwen2Config(vocab_size=64, hidden_size=32, intermediate_size=64, num_hidden_layers=1,
                                        num_attention_heads=2, num_key_value_heads=1)).eval()
    assert not llama_forward.supports(qwen)
