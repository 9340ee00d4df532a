"""One trained head written as each tool writes it, independently of trtspec's own exporter.

The head is a ModelOpt EAGLE-3 head over an 8-layer tiny target (mtsp.convert, perturbed so every
weight matters, a reduced draft vocabulary of 128 with d2t), exported by ModelOpt 0.47 itself
(`export_speculative_decoding`: the ">= 0.43" layout). The other layouts are written here from
its tensors, with the files, names, dtypes and config fields each tool's code writes (sources:
shared/reference/heads-and-methods.md 1a-1d):

  eagle_authors  pytorch_model.bin (torch.save), bfloat16, midlayer.*, d2t + t2d, flat
                 LlamaForCausalLM config with draft_vocab_size, no layer ids (hard-coded in the code)
  specforge      model.safetensors with embed_tokens (the frozen target copy), midlayer.*, t2d (bool),
                 d2t; LlamaForCausalLMEagle3 + eagle_config.eagle_aux_hidden_state_layer_ids (outputs)
  modelopt_042   ModelOpt 0.42's exporter: midlayer.* (no t2d), flat config + eagle_config
  speculators    layers.0.*, d2t, t2d, transformer_layer_config as HF's to_diff_dict (default fields
                 absent), top-level ids counted as inputs of layers, norm_before_residual
"""

from __future__ import annotations

import copy
import json
from pathlib import Path

DRAFT_VOCAB = 128
# LlamaConfig's defaults for the fields written here: HF's to_diff_dict leaves these values out
LLAMA_CONFIG_DEFAULTS = {"hidden_act": "silu", "rope_theta": 10000.0, "rms_norm_eps": 1e-6,
                         "max_position_embeddings": 2048}


def trained_modelopt_head(target: Path, export_dir: Path, *, draft_vocab: int = DRAFT_VOCAB,
                          architecture: dict | None = None):
    """(ModelOpt model with the head, its export dir): ModelOpt's own >= 0.43 layout. `architecture`
    replaces the tiny head's shape (a SmolLM2-sized head: train.eagle3_architecture)."""
    import modelopt.torch.speculative as mtsp
    import torch
    from modelopt.torch.export import export_speculative_decoding
    from modelopt.torch.speculative.config import EAGLE3_DEFAULT_CFG
    from transformers import AutoModelForCausalLM

    model = AutoModelForCausalLM.from_pretrained(target, dtype=torch.float32)
    config = copy.deepcopy(EAGLE3_DEFAULT_CFG["config"])
    config["eagle_architecture_config"].update({
        "hidden_size": 64, "intermediate_size": 128, "num_attention_heads": 4, "num_key_value_heads": 2,
        "head_dim": 16, "torch_dtype": "float32", "max_position_embeddings": 4096, "rope_theta": 10000.0,
        "draft_vocab_size": draft_vocab, "eagle_aux_hidden_state_layer_ids": [1, 3, 4]})
    config["eagle_architecture_config"].update(architecture or {})
    config["eagle_export_rope_scaling"] = {}
    config["eagle_use_torch_compile"] = False
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(3)
        mtsp.convert(model, [("eagle", config)])
        generator = torch.Generator().manual_seed(4)
        kept = torch.sort(torch.randperm(model.config.vocab_size, generator=generator)[:draft_vocab]).values
        with torch.no_grad():
            module = model.eagle_module
            module.d2t.copy_(kept - torch.arange(draft_vocab))
            module.lm_head.weight.copy_(model.lm_head.weight[kept] / 4)
            for name, parameter in module.named_parameters():
                if name != "lm_head.weight":  # norms start at 1, projections tiny: every weight should matter
                    parameter.add_(torch.randn(parameter.shape, generator=generator) * 0.1)
    model.eval()
    export_speculative_decoding(model, export_dir=export_dir)
    return model, export_dir


def _state_and_config(modelopt_dir: Path):
    from safetensors.torch import load_file

    return load_file(str(modelopt_dir / "model.safetensors")), json.loads((modelopt_dir / "config.json").read_text())


def _midlayer(state: dict) -> dict:
    return {(f"midlayer.{k.removeprefix('layers.0.')}" if k.startswith("layers.0.") else k): v for k, v in state.items()}


def _t2d(d2t, vocab: int):
    import torch

    t2d = torch.zeros(vocab, dtype=torch.bool)
    t2d[torch.arange(d2t.shape[0]) + d2t] = True
    return t2d


def _llama(config: dict) -> dict:
    keys = ("hidden_size", "intermediate_size", "num_attention_heads", "num_key_value_heads", "head_dim",
            "num_hidden_layers", "max_position_embeddings", "rms_norm_eps", "rope_theta", "hidden_act", "vocab_size")
    return {key: config[key] for key in keys}


def write_eagle_authors(modelopt_dir: Path, out: Path) -> Path:
    import torch

    state, config = _state_and_config(modelopt_dir)
    out.mkdir(parents=True)
    tensors = {k: (v if k == "d2t" else v.to(torch.bfloat16)) for k, v in _midlayer(state).items()}
    tensors["t2d"] = _t2d(state["d2t"], config["vocab_size"])
    torch.save(tensors, out / "pytorch_model.bin")
    (out / "config.json").write_text(json.dumps({
        "architectures": ["LlamaForCausalLM"], "model_type": "llama", "bias": False, **_llama(config),
        "tie_word_embeddings": False, "torch_dtype": "bfloat16", "draft_vocab_size": config["draft_vocab_size"]}))
    return out


def write_specforge(modelopt_dir: Path, out: Path, target_embed) -> Path:
    from safetensors.torch import save_file

    state, config = _state_and_config(modelopt_dir)
    out.mkdir(parents=True)
    tensors = {**_midlayer(state), "embed_tokens.weight": target_embed.clone(),
               "t2d": _t2d(state["d2t"], config["vocab_size"])}
    save_file(tensors, str(out / "model.safetensors"))
    (out / "config.json").write_text(json.dumps({
        "architectures": ["LlamaForCausalLMEagle3"], "model_type": "llama", **_llama(config),
        "tie_word_embeddings": False, "draft_vocab_size": config["draft_vocab_size"],
        "eagle_config": {"eagle_aux_hidden_state_layer_ids": config["eagle_config"]["eagle_aux_hidden_state_layer_ids"]}}))
    return out


def write_modelopt_042(modelopt_dir: Path, out: Path) -> Path:
    from safetensors.torch import save_file

    state, config = _state_and_config(modelopt_dir)
    out.mkdir(parents=True)
    save_file(_midlayer(state), str(out / "model.safetensors"))
    (out / "config.json").write_text(json.dumps(config))
    return out


def write_speculators(modelopt_dir: Path, out: Path, *, norm_before_residual: bool, layer_ids: list[int]) -> Path:
    from safetensors.torch import save_file

    state, config = _state_and_config(modelopt_dir)
    out.mkdir(parents=True)
    save_file({**state, "t2d": _t2d(state["d2t"], config["vocab_size"])}, str(out / "model.safetensors"))
    layer = {k: v for k, v in _llama(config).items() if LLAMA_CONFIG_DEFAULTS.get(k, object()) != v}  # diff dict
    (out / "config.json").write_text(json.dumps({
        "architectures": ["Eagle3Speculator"], "speculators_model_type": "eagle3", "speculators_version": "0.3.0",
        "speculators_config": {"algorithm": "eagle3", "default_proposal_method": "greedy",
                               "proposal_methods": [{"proposal_type": "greedy", "speculative_tokens": 3}],
                               "verifier": {"name_or_path": "tiny-target", "architectures": ["LlamaForCausalLM"]}},
        "transformer_layer_config": {"model_type": "llama", **layer},
        "draft_vocab_size": config["draft_vocab_size"], "norm_before_residual": norm_before_residual,
        "target_hidden_size": None, "eagle_aux_hidden_state_layer_ids": layer_ids, "embed_requires_grad": False}))
    return out
