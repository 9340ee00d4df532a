"""oneDNN-prepacked linear layers: same numbers as F.linear, same parameters, lossless engine."""

from __future__ import annotations

import pytest

from tests.runtime.conftest import TINY_PROMPTS

prepack = pytest.importorskip("trtspec.runtime.forward.prepack")
pytestmark = pytest.mark.skipif(not prepack.available(), reason="torch built without oneDNN")


def test_prepacked_model_matches_plain_linear_at_every_width(tiny_llama):
    import torch

    from trtspec.runtime.checkpoints.parts import load_causal_lm

    plain, packed = load_causal_lm(tiny_llama), load_causal_lm(tiny_llama)
    keys = list(packed.state_dict())
    swapped = prepack.prepack_linears(packed)
    # Every linear (7 per layer + lm_head) is swapped; parameters and their names are untouched.
    assert swapped == sum(isinstance(m, torch.nn.Linear) for m in plain.modules())
    assert list(packed.state_dict()) == keys
    assert not any(type(m) is torch.nn.Linear for m in packed.modules())
    ids = torch.tensor([TINY_PROMPTS[3]])
    with torch.inference_mode():
        for width in (1, 2, 3, 9, 50):  # 1: plain decode step; 2-9: verify passes; 50: prefill
            expected = plain(input_ids=ids[:, :width]).logits
            got = packed(input_ids=ids[:, :width]).logits
            torch.testing.assert_close(got, expected, rtol=1e-4, atol=1e-4)


def test_tied_embedding_stays_tied(tiny_llama):
    from trtspec.runtime.checkpoints.parts import load_causal_lm

    model = load_causal_lm(tiny_llama)
    tied = model.lm_head.weight is model.get_input_embeddings().weight
    prepack.prepack_linears(model)
    assert (model.lm_head.weight is model.get_input_embeddings().weight) == tied


@pytest.fixture(scope="module")
def packed_and_unpacked(tiny_llama):
    from trtspec.runtime import Engine

    return tuple(Engine.from_checkpoints(tiny_llama, mode="ngram", max_draft_len=4, ngram_min=1, ngram_max=3,
                                         prepack=flag) for flag in (True, False))


@pytest.mark.parametrize("prompt", TINY_PROMPTS)
def test_prepacked_engine_speculative_greedy_equals_unpacked_plain(packed_and_unpacked, prompt):
    """Prepacking changes float rounding only: the prepacked engine (speculative and plain)
    gives the unpacked engine's greedy tokens on the tiny model."""
    packed, unpacked = packed_and_unpacked
    reference = unpacked.generate(prompt, max_new_tokens=24, speculative=False).token_ids
    assert packed.generate(prompt, max_new_tokens=24, speculative=False).token_ids == reference
    assert packed.generate(prompt, max_new_tokens=24).token_ids == reference


@pytest.mark.parametrize("kernel", ["onednn", "mkl", "rowdot"])
def test_a_kernel_is_timed_on_copies_of_the_layer_in_turn(kernel, monkeypatch):
    """The call choose() times runs the kernel on the next of IN_TURN_BYTES of random weights of
    the layer's shape each time (each a different weight: other outputs; the cycle comes back to
    the first), and is the layer's own call where one weight of the shape is that big."""
    import torch

    from trtspec.runtime.kernels import native

    if kernel == "rowdot" and not native.available():
        pytest.skip(f"the row kernel cannot run here: {native.unavailable()}")
    layer = torch.nn.Linear(64, 48, bias=True)
    monkeypatch.setattr(prepack, "IN_TURN_BYTES", 3 * 64 * 48 * 4)  # three copies
    own = lambda x: x  # noqa: E731 (a stand-in: never called when copies are made)
    timed = prepack._in_turn(kernel, layer, own)
    x = torch.randn(2, 64)
    global_state = torch.random.get_rng_state()
    with torch.inference_mode():
        outputs = [timed(x) for _ in range(4)]
    assert torch.equal(torch.random.get_rng_state(), global_state)  # the copies drew from their own generator
    assert all(out.shape == (2, 48) for out in outputs)
    assert not torch.equal(outputs[0], outputs[1]) and not torch.equal(outputs[1], outputs[2])
    torch.testing.assert_close(outputs[3], outputs[0])  # the fourth call is the first copy again
    monkeypatch.setattr(prepack, "IN_TURN_BYTES", 64 * 48 * 4)
    assert prepack._in_turn(kernel, layer, own) is own
