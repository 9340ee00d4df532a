"""oneDNN-prepacked linear layers: same numbers as F.linear, same parameters, lossless engine."""

from __future__ import annotations

import pytest

from tests.runtime.conftest import TINY_PROMPTS

prepack = pytest.importorskip("trtspec.runtime.prepack")
pytestmark = pytest.mark.skipif(not prepack.available(), reason="torch built without oneDNN")


def test_prepacked_model_matches_plain_linear_at_every_width(tiny_llama):
    import torch

    from trtspec.runtime.checkpoints import load_causal_lm

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
    from trtspec.runtime.checkpoints import load_causal_lm

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
