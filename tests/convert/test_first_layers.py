"""The layer-truncated draft (trtspec.testing.truncate): the target's first N layers, exactly,
read out through its final norm and lm_head; cached; a lossless draft for the engine."""

from __future__ import annotations

import pytest

from tests.runtime.conftest import TINY_PROMPTS
from trtspec.errors import ModelSourceError


@pytest.fixture(scope="module")
def truncated(tiny_llama, tmp_path_factory):
    from trtspec.testing.truncate import truncate_llama

    return truncate_llama(tiny_llama, tmp_path_factory.mktemp("first2") / "draft", 2)


@pytest.mark.parametrize("tied", [False, True])
def test_truncated_model_is_the_first_layers_of_the_full_one(tmp_path, tied):
    import torch

    from trtspec.runtime.checkpoints.parts import load_causal_lm
    from trtspec.testing.tiny import make_tiny_llama
    from trtspec.testing.truncate import truncate_llama

    source = make_tiny_llama(tmp_path / "full", seed=3, tie_word_embeddings=tied)
    full, short = load_causal_lm(source), load_causal_lm(truncate_llama(source, tmp_path / "first2", 2))
    assert short.config.num_hidden_layers == 2 and len(short.model.layers) == 2
    assert short.config.tie_word_embeddings == tied
    ids = torch.tensor([TINY_PROMPTS[3]])
    with torch.inference_mode():
        want = full(input_ids=ids, output_hidden_states=True)
        got = short(input_ids=ids, output_hidden_states=True)
        # [1, seq, hidden] after layer 2 of the full model, read out as the short model's last layer does
        readout = full.lm_head(full.model.norm(want.hidden_states[2]))
    for layer in range(2):  # embeddings, then the output of layer 1
        torch.testing.assert_close(got.hidden_states[layer], want.hidden_states[layer], rtol=0, atol=1e-6)
    torch.testing.assert_close(got.logits, readout, rtol=1e-5, atol=1e-5)
    assert not torch.allclose(got.logits, want.logits, atol=1e-3)  # it really is another model


def test_truncation_is_cached_and_checks_the_layer_count(tiny_llama, truncated):
    from trtspec import artifacts
    from trtspec.testing.truncate import truncate_llama

    weights = truncated / "model.safetensors"
    before = weights.stat().st_mtime_ns
    assert truncate_llama(tiny_llama, truncated, 2) == truncated
    assert weights.stat().st_mtime_ns == before
    assert artifacts.read_manifest(truncated)["inputs"]["num_layers"] == 2
    assert (truncated / "tokenizer.json").read_bytes() == (tiny_llama / "tokenizer.json").read_bytes()
    with pytest.raises(ModelSourceError, match="cannot keep 5 of its 4"):
        truncate_llama(tiny_llama, truncated.parent / "first5", 5)


@pytest.mark.parametrize("prompt", TINY_PROMPTS)
def test_engine_with_the_truncated_draft_is_lossless(tiny_llama, truncated, prompt):
    from trtspec.runtime import Engine

    engine = Engine.from_checkpoints(tiny_llama, mode="draft-target", draft_dir=truncated, max_draft_len=3)
    spec = engine.generate(prompt, max_new_tokens=40)
    assert spec.token_ids == engine.generate(prompt, max_new_tokens=40, speculative=False).token_ids
    assert spec.stats.num_drafts > 0
