"""Import, export in each format, import again: bit-identical tensors and identical greedy drafts;
the layer-id conventions converted at every boundary."""

from __future__ import annotations

import json

import pytest
import torch

from tests.convert.heads.conftest import import_into
from tests.convert.heads.test_heads_layouts import PROMPTS, engine_for, record_drafts


def _export(canonical, out, fmt, target8):
    from trtspec.convert.eagle3.heads.export import export_head

    out.mkdir(parents=True)
    return export_head(canonical, out, fmt, target_config=json.loads((target8 / "config.json").read_text()),
                       verifier=str(target8))


@pytest.mark.parametrize("origin", ["modelopt", "speculators", "eagle"])
@pytest.mark.parametrize("fmt", ["eagle", "modelopt", "speculators"])
def test_export_then_import_gives_the_same_head(origin, fmt, imported, target8, tmp_path, one_torch_thread):
    from trtspec.convert.eagle3.heads.canonical import read_canonical

    canonical = imported[origin][0]
    summary = _export(canonical, tmp_path / "exported", fmt, target8)
    report = import_into(tmp_path / "again", tmp_path / "exported", target8)
    assert report["layout"] == {"eagle": "specforge", "modelopt": "modelopt", "speculators": "speculators"}[fmt]
    before_config, before = read_canonical(canonical)
    after_config, after = read_canonical(tmp_path / "again")
    assert set(after) == set(before)
    for name, tensor in before.items():
        assert after[name].dtype == tensor.dtype and torch.equal(after[name], tensor), name
    for key in ("eagle_config", "trtspec_head_forward", "draft_vocab_size", "rope_theta", "head_dim"):
        assert after_config[key] == before_config[key], key
    assert summary["layer_ids"] == {"output_of_layer": [1, 3, 4], "input_of_layer": [2, 4, 5]}
    if origin == "modelopt":  # ModelOpt's function is not what the other tools compute: said, not hidden
        assert summary["notes"] and "hidden_norm(input_layernorm(h))" in summary["notes"][0]
    if origin == "modelopt" and fmt == "speculators" or origin == "eagle" and fmt == "eagle":
        for prompt in PROMPTS:
            _, first = record_drafts(engine_for(target8, canonical), prompt)
            _, second = record_drafts(engine_for(target8, tmp_path / "again"), prompt)
            assert first == second


def test_exports_write_each_readers_names_and_conventions(imported, target8, tmp_path):
    from safetensors import safe_open

    canonical = imported["speculators"][0]
    names = {}
    for fmt in ("eagle", "modelopt", "speculators"):
        _export(canonical, tmp_path / fmt, fmt, target8)
        with safe_open(str(tmp_path / fmt / "model.safetensors"), "pt") as handle:
            names[fmt] = set(handle.keys())
    eagle = json.loads((tmp_path / "eagle" / "config.json").read_text())
    assert "midlayer.hidden_norm.weight" in names["eagle"] and "t2d" in names["eagle"]  # SGLang binds these
    assert eagle["eagle_config"]["eagle_aux_hidden_state_layer_ids"] == [1, 3, 4]      # SGLang / SpecForge: outputs
    assert eagle["eagle_aux_hidden_state_layer_ids"] == [2, 4, 5]                      # vLLM reads the top level: inputs
    assert eagle["draft_vocab_size"] == 128 and eagle["architectures"] == ["LlamaForCausalLMEagle3"]
    assert "layers.0.hidden_norm.weight" in names["modelopt"] and "t2d" not in names["modelopt"]
    spec = json.loads((tmp_path / "speculators" / "config.json").read_text())
    assert spec["speculators_model_type"] == "eagle3" and spec["norm_before_residual"] is True
    assert spec["eagle_aux_hidden_state_layer_ids"] == [2, 4, 5]
    assert spec["transformer_layer_config"]["vocab_size"] == 512 and "t2d" in names["speculators"]


def test_one_head_in_both_conventions_captures_the_same_layers(modelopt_head, target8, tmp_path, one_torch_thread):
    """Non-default layers: ModelOpt's ids [0, 2, 6] (outputs) and the same head as speculators writes it,
    [1, 3, 7] (inputs): the same physical layers, the same drafts; and a converter's verbatim copy of
    the output ids into speculators' input field is read right only when the convention is said."""
    from tests.convert.heads import tool_layouts

    config = json.loads((modelopt_head[1] / "config.json").read_text())
    config["eagle_config"]["eagle_aux_hidden_state_layer_ids"] = [0, 2, 6]
    output_dir = tmp_path / "output"
    output_dir.mkdir()
    (output_dir / "model.safetensors").write_bytes((modelopt_head[1] / "model.safetensors").read_bytes())
    (output_dir / "config.json").write_text(json.dumps(config))
    input_dir = tool_layouts.write_speculators(output_dir, tmp_path / "input", norm_before_residual=False,
                                               layer_ids=[1, 3, 7])
    copied = tool_layouts.write_speculators(output_dir, tmp_path / "copied", norm_before_residual=False,
                                            layer_ids=[0, 2, 6])
    from_output = import_into(tmp_path / "a", output_dir, target8)
    from_input = import_into(tmp_path / "b", input_dir, target8)
    said = import_into(tmp_path / "c", copied, target8, convention="output")
    assert from_output["layer_ids"] == from_input["layer_ids"] == said["layer_ids"] == [0, 2, 6]
    engines = [engine_for(target8, tmp_path / name) for name in ("a", "b")]
    assert engines[0].drafter.aux_layer_ids == engines[1].drafter.aux_layer_ids == (1, 3, 7)
    from trtspec.errors import IncompatibleArtifactError

    with pytest.raises(IncompatibleArtifactError, match=r"outputs of layers \[-1, 1, 5\]"):  # input 0: the embeddings
        import_into(tmp_path / "d", copied, target8)


def test_a_scaled_rope_is_kept_and_extends_the_heads_reach(tool_heads, target8, tmp_path):
    """Llama-3.1's rope (llama3 scaling) passes the rope check and its reach counts against max_seq_len."""
    import shutil

    head = shutil.copytree(tool_heads["specforge"], tmp_path / "head")
    config = json.loads((head / "config.json").read_text())
    config.update(max_position_embeddings=1024, rope_scaling={
        "rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0, "high_freq_factor": 4.0,
        "original_max_position_embeddings": 1024})
    (head / "config.json").write_text(json.dumps(config))
    import_into(tmp_path / "canonical", head, target8, max_seq_len=8192)
    written = json.loads((tmp_path / "canonical" / "config.json").read_text())
    assert written["rope_scaling"]["rope_type"] == "llama3" and written["max_position_embeddings"] == 1024
    engine = engine_for(target8, tmp_path / "canonical")  # the cpu engine builds that rope, and stays lossless
    assert engine.generate(PROMPTS[0], max_new_tokens=12).token_ids == \
        engine.generate(PROMPTS[0], max_new_tokens=12, speculative=False).token_ids
