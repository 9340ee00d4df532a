"""One trained head in each tool's layout: read, canonical, and drafted by the cpu engine exactly as
that tool computes it (plain-PyTorch references of each tool's forward decide; ModelOpt itself for
ModelOpt's layouts), greedy lossless."""

from __future__ import annotations

import pytest
import torch

from tests.convert.heads import reference

LAYOUTS = ("eagle", "specforge", "modelopt-0.42", "modelopt", "speculators")
PROMPTS = ([5, 6, 7, 8, 5, 6, 7, 8, 5, 6], [100, 200, 300, 100, 200, 300, 100])


def engine_for(target, head_dir):
    from trtspec.runtime import Engine

    return Engine.from_checkpoints(target, mode="eagle3", draft_dir=head_dir, max_draft_len=4)


def record_drafts(engine, prompt, max_new_tokens=20):
    """(result, [(tokens, draft)]) of a greedy speculative generation."""
    recorded, original = [], engine.drafter.propose_batch

    def spy(sessions, tokens, max_lens):
        drafts = original(sessions, tokens, max_lens)
        recorded.extend((list(seq), d.token_ids.tolist()) for seq, d in zip(tokens, drafts, strict=True))
        return drafts

    engine.drafter.propose_batch = spy
    try:
        return engine.generate(prompt, max_new_tokens=max_new_tokens), recorded
    finally:
        del engine.drafter.propose_batch


def tool_reference(name, tool_heads, modelopt_head, target_model):
    """draft(tokens, steps) as the tool that wrote layout `name` computes it."""
    import json

    if name.startswith("modelopt"):
        model = modelopt_head[0]
        return lambda tokens, steps: model.pseudo_speculative_generate(torch.tensor([tokens[:-1]]),
                                                                       steps=steps)[1][0].tolist()
    directory = tool_heads[name]
    config = json.loads((directory / "config.json").read_text())
    if name == "eagle":  # the tool's own files and names, not trtspec's canonical ones
        raw = torch.load(directory / "pytorch_model.bin", weights_only=True)
    else:
        from safetensors.torch import load_file

        raw = load_file(str(directory / "model.safetensors"))
    if name == "speculators":
        from tests.convert.heads.tool_layouts import LLAMA_CONFIG_DEFAULTS

        layer_config = {**LLAMA_CONFIG_DEFAULTS, **config["transformer_layer_config"]}
        return lambda tokens, steps: reference.draft(
            raw, layer_config, target_model, tokens, steps, layer="layers.0",
            layer_ids_input=config["eagle_aux_hidden_state_layer_ids"],
            norm_before_residual=config["norm_before_residual"])
    # EAGLE's code captures hidden_states[2, N//2, N-3]; SpecForge's ids count outputs (SGLang adds 1)
    n = target_model.config.num_hidden_layers
    inputs = [2, n // 2, n - 3] if name == "eagle" else [i + 1 for i in config["eagle_config"][
        "eagle_aux_hidden_state_layer_ids"]]
    return lambda tokens, steps: reference.draft(raw, config, target_model, tokens, steps, layer="midlayer",
                                                 layer_ids_input=inputs)


def test_every_layout_is_recognised_and_reads_the_same_physical_layers(imported):
    expected_forward = {"eagle": "eagle", "specforge": "eagle", "modelopt-0.42": "modelopt", "modelopt": "modelopt",
                        "speculators": "norm_before_residual"}
    for name in LAYOUTS:
        report = imported[name][1]
        assert report["layout"] == name
        assert report["layer_ids"] == [1, 3, 4], name          # outputs of layers 1, 3, 4
        assert report["layer_ids_input_of_layer"] == [2, 4, 5]
        assert report["forward"] == expected_forward[name]
    assert "default of the EAGLE code" in imported["eagle"][1]["layer_ids_from"]
    assert any("embed_tokens" in note for note in imported["specforge"][1]["notes"])


def test_canonical_tensors_are_the_tools_tensors_bit_for_bit(imported, modelopt_head):
    from trtspec.convert.eagle3.heads.canonical import read_canonical

    _, original = read_canonical(modelopt_head[1])
    for name in LAYOUTS:
        config, tensors = read_canonical(imported[name][0])
        assert set(tensors) == set(original), name
        for key, tensor in original.items():
            expected = tensor if key == "d2t" or name != "eagle" else tensor.to(torch.bfloat16)
            assert tensors[key].dtype == expected.dtype and torch.equal(tensors[key], expected), (name, key)
        assert config["architectures"] == ["LlamaForCausalLMEagle3"]
        assert config["eagle_config"]["eagle_aux_hidden_state_layer_ids"] == [1, 3, 4]


@pytest.mark.parametrize("name", LAYOUTS)
def test_cpu_engine_drafts_exactly_as_the_heads_own_tool(name, imported, tool_heads, modelopt_head, target8,
                                                         target_model, one_torch_thread):
    engine = engine_for(target8, imported[name][0])
    assert engine.drafter.aux_layer_ids == (2, 4, 5)           # hidden_states indices: outputs of 1, 3, 4
    own_tool = tool_reference(name, tool_heads, modelopt_head, target_model)
    for prompt in PROMPTS:
        result, recorded = record_drafts(engine, prompt)
        assert len(recorded) >= 4
        for tokens, draft in recorded[:: max(1, len(recorded) // 4)]:
            assert draft == own_tool(tokens, 4), (name, tokens)
        plain = engine.generate(prompt, max_new_tokens=20, speculative=False)
        assert result.token_ids == plain.token_ids           # greedy lossless
        assert result.stats.num_drafts > 0


def test_the_same_tensors_are_not_the_same_function(imported, target8, one_torch_thread):
    """ModelOpt's hidden_norm(input_layernorm(h)) and EAGLE's hidden_norm(h) on the same tensors
    draft differently: the layout decides the function, so the import must record it."""
    drafts = {}
    for name in ("modelopt", "eagle", "speculators"):
        _, recorded = record_drafts(engine_for(target8, imported[name][0]), PROMPTS[0])
        drafts[name] = [draft for _, draft in recorded]
    assert drafts["modelopt"] != drafts["eagle"] and drafts["eagle"] != drafts["speculators"]


@pytest.fixture(scope="session")
def smollm2_heads(smollm2, tmp_path_factory):
    """A SmolLM2-sized ModelOpt head (perturbed, draft vocabulary 2048) written as each tool writes it."""
    import json

    from tests.convert.heads import tool_layouts
    from trtspec.convert.eagle3.train import eagle3_architecture

    config = json.loads((smollm2 / "config.json").read_text())
    architecture = {**eagle3_architecture(config, draft_vocab_size=2048), "hidden_size": config["hidden_size"],
                    "max_position_embeddings": config["max_position_embeddings"]}
    root = tmp_path_factory.mktemp("smollm2-heads")
    model, source = tool_layouts.trained_modelopt_head(smollm2, root / "modelopt", draft_vocab=2048,
                                                       architecture=architecture)
    ids = json.loads((source / "config.json").read_text())["eagle_config"]["eagle_aux_hidden_state_layer_ids"]
    assert ids == [1, 14, 26]
    return model, {"modelopt": source, "eagle": tool_layouts.write_eagle_authors(source, root / "eagle"),
                   "speculators": tool_layouts.write_speculators(source, root / "speculators", norm_before_residual=True,
                                                                 layer_ids=[i + 1 for i in ids])}


@pytest.mark.slow
@pytest.mark.parametrize("name", ["eagle", "speculators", "modelopt"])
def test_a_smollm2_head_in_each_layout_drafts_as_its_tool(name, smollm2, smollm2_heads, tmp_path, one_torch_thread):
    from tests.convert.heads.conftest import import_into

    model, heads = smollm2_heads
    report = import_into(tmp_path / "canonical", heads[name], smollm2)
    assert report["layer_ids"] == [1, 14, 26]
    engine = engine_for(smollm2, tmp_path / "canonical")
    own_tool = tool_reference(name, heads, (model, heads["modelopt"]), model if name == "modelopt" else _target(smollm2))
    prompt = engine.tokenizer("The capital of France is")["input_ids"]
    result, recorded = record_drafts(engine, prompt, max_new_tokens=12)
    for tokens, draft in recorded[:3]:
        assert draft == own_tool(tokens, 4), (name, tokens)
    assert result.token_ids == engine.generate(prompt, max_new_tokens=12, speculative=False).token_ids


def _target(path):
    from transformers import AutoModelForCausalLM

    return AutoModelForCausalLM.from_pretrained(path, dtype=torch.float32).eval()
