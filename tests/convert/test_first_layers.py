"""The first-layers copy (trtspec.convert.first_layers): the target's first N layers, exactly,
read out through its final norm and lm_head; tensors copied as stored; cached; a lossless draft
for the engine; refused in one line where the layers are not under model.layers."""

from __future__ import annotations

import pytest

from tests.runtime.conftest import TINY_PROMPTS
from trtspec.convert.first_layers import first_layers
from trtspec.errors import ModelSourceError


@pytest.fixture(scope="module")
def truncated(tiny_llama, tmp_path_factory):

    return first_layers(tiny_llama, tmp_path_factory.mktemp("first2") / "draft", 2)


@pytest.mark.parametrize("tied", [False, True])
def test_truncated_model_is_the_first_layers_of_the_full_one(tmp_path, tied):
    import torch

    from trtspec.runtime.checkpoints.parts import load_causal_lm
    from trtspec.testing.tiny import make_tiny_llama

    source = make_tiny_llama(tmp_path / "full", seed=3, tie_word_embeddings=tied)
    full, short = load_causal_lm(source), load_causal_lm(first_layers(source, tmp_path / "first2", 2))
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

    weights = truncated / "model.safetensors"
    before = weights.stat().st_mtime_ns
    assert first_layers(tiny_llama, truncated, 2) == truncated
    assert weights.stat().st_mtime_ns == before
    assert artifacts.read_manifest(truncated)["inputs"]["num_layers"] == 2
    assert (truncated / "tokenizer.json").read_bytes() == (tiny_llama / "tokenizer.json").read_bytes()
    with pytest.raises(ModelSourceError, match="cannot keep 5 of its 4"):
        first_layers(tiny_llama, truncated.parent / "first5", 5)


@pytest.mark.parametrize("prompt", TINY_PROMPTS)
def test_engine_with_the_truncated_draft_is_lossless(tiny_llama, truncated, prompt):
    from trtspec.runtime import Engine

    engine = Engine.from_checkpoints(tiny_llama, mode="draft-target", draft_dir=truncated, max_draft_len=3)
    spec = engine.generate(prompt, max_new_tokens=40)
    assert spec.token_ids == engine.generate(prompt, max_new_tokens=40, speculative=False).token_ids
    assert spec.stats.num_drafts > 0


def test_deepseek_v3_copy_drops_the_mtp_module_and_keeps_the_first_layers(tmp_path):
    import json

    import torch
    from safetensors import safe_open

    from trtspec.runtime.checkpoints.parts import load_causal_lm
    from trtspec.testing.tiny import make_tiny_causal_lm

    # 4 layers (the first dense, then MoE) and one MTP module stored as model.layers.4.*
    source = make_tiny_causal_lm(tmp_path / "dsv3", "deepseek_v3", mtp=True, num_hidden_layers=4)
    short_dir = first_layers(source, tmp_path / "first2", 2)
    config = json.loads((short_dir / "config.json").read_text())
    assert (config["num_hidden_layers"], config["num_nextn_predict_layers"]) == (2, 0)
    with safe_open(str(short_dir / "model.safetensors"), "pt") as handle:
        assert {int(n.split(".")[2]) for n in handle.keys() if n.startswith("model.layers.")} == {0, 1}
    full, short = load_causal_lm(source), load_causal_lm(short_dir)
    ids = torch.tensor([TINY_PROMPTS[0]])
    with torch.inference_mode():
        hidden = full(input_ids=ids, output_hidden_states=True).hidden_states[2]  # after layer 2 (a MoE layer)
        torch.testing.assert_close(short(input_ids=ids).logits, full.lm_head(full.model.norm(hidden)),
                                   rtol=1e-5, atol=1e-5)


def test_sharded_bfloat16_copy_keeps_dtype_and_writes_an_index(tmp_path):
    import json

    import torch
    from safetensors import safe_open
    from transformers import AutoModelForCausalLM

    from trtspec.testing.tiny import make_tiny_llama

    source = make_tiny_llama(tmp_path / "full", seed=1)
    model = AutoModelForCausalLM.from_pretrained(source, dtype=torch.bfloat16)
    sharded = tmp_path / "sharded"
    model.save_pretrained(sharded, safe_serialization=True, max_shard_size="100KB")
    for name in ("tokenizer.json", "tokenizer_config.json"):
        (sharded / name).write_bytes((source / name).read_bytes())
    assert len(list(sharded.glob("*.safetensors"))) > 2
    short = first_layers(sharded, tmp_path / "first1", 1)
    index = json.loads((short / "model.safetensors.index.json").read_text())["weight_map"]
    assert not any(n.startswith("model.layers.") and not n.startswith("model.layers.0.") for n in index)
    assert {p.name for p in short.glob("*.safetensors")} == set(index.values())
    for name, shard in index.items():
        with safe_open(str(short / shard), "pt") as copy, safe_open(str(sharded / shard), "pt") as original:
            assert torch.equal(copy.get_tensor(name), original.get_tensor(name))
            assert copy.get_tensor(name).dtype == torch.bfloat16
    assert (short / "tokenizer.json").is_file()


def test_an_architecture_the_cpu_engine_does_not_run_is_refused_in_one_line(tmp_path, tiny_llama):
    import json
    import shutil

    from trtspec.errors import IncompatibleArtifactError

    other = tmp_path / "other"
    shutil.copytree(tiny_llama, other)
    config = json.loads((other / "config.json").read_text())
    (other / "config.json").write_text(json.dumps({**config, "model_type": "gpt2"}))
    with pytest.raises(IncompatibleArtifactError) as caught:
        first_layers(other, tmp_path / "first2", 2)
    assert "model_type 'gpt2'" in str(caught.value) and len(str(caught.value).splitlines()) == 1
