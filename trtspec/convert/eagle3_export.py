"""Export the trained head with ModelOpt's `export_speculative_decoding`, and check the result.

The directory is exactly what TensorRT-LLM's PyTorch backend (Eagle3 draft loader), vLLM
(`LlamaForCausalLMEagle3`, vllm/model_executor/models/llama_eagle3.py) and SGLang read:
config.json with architectures ["LlamaForCausalLMEagle3"] and model.safetensors holding
`fc.weight`, `layers.0.*` (with `hidden_norm`), `norm.weight`, `lm_head.weight` and, with a
reduced vocabulary, `d2t`. `check_eagle3_export` verifies those names and shapes so a format
drift in a future ModelOpt fails here, not on a GPU server.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from trtspec.errors import IncompatibleArtifactError

# Tensor names every EAGLE-3 reader needs (layer 0 of a one-layer Llama head). Source: vLLM
# vllm/model_executor/models/llama_eagle3.py (vllm-project/vllm@00bd1493): Eagle3LlamaForCausalLM
# loads `fc` with input 3 * hidden_size (exactly three auxiliary layers), `layers.0.*` whose
# q/k/v take 2 * hidden_size (embeddings ++ hidden) and which has `hidden_norm`, `norm`,
# `lm_head` with draft_vocab_size rows, and optional `d2t` (draft id -> target id offset);
# every name but lm_head gets a "model." prefix on load, so the file must not carry one. The
# same layout is ModelOpt's LLAMA_EAGLE_SINGLE_LAYER (hf_spec_export.py), which the
# TensorRT-LLM ModelOpt EAGLE-3 examples consume.
REQUIRED_TENSORS = (
    "fc.weight", "norm.weight", "lm_head.weight",
    "layers.0.hidden_norm.weight", "layers.0.input_layernorm.weight", "layers.0.post_attention_layernorm.weight",
    "layers.0.self_attn.q_proj.weight", "layers.0.self_attn.k_proj.weight", "layers.0.self_attn.v_proj.weight",
    "layers.0.self_attn.o_proj.weight",
    "layers.0.mlp.gate_proj.weight", "layers.0.mlp.up_proj.weight", "layers.0.mlp.down_proj.weight",
)
REQUIRED_CONFIG = ("architectures", "hidden_size", "num_attention_heads", "num_key_value_heads",
                   "intermediate_size", "vocab_size", "draft_vocab_size", "num_hidden_layers")


def export_eagle3(model, export_dir: Path) -> None:
    """Write ModelOpt's EAGLE-3 export of `model` into `export_dir`."""
    from modelopt.torch.export import export_speculative_decoding

    export_speculative_decoding(model, export_dir=export_dir)


def check_eagle3_export(export_dir: Path, target_config: dict[str, Any]) -> dict[str, Any]:
    """Check names, shapes and config of an EAGLE-3 export against the target; return a summary."""
    from safetensors import safe_open

    export_dir = Path(export_dir)
    config = json.loads((export_dir / "config.json").read_text())
    missing_config = [key for key in REQUIRED_CONFIG if key not in config]
    if config.get("architectures") != ["LlamaForCausalLMEagle3"] or missing_config:
        raise IncompatibleArtifactError(
            f"{export_dir}: not an EAGLE-3 export (architectures {config.get('architectures')}, "
            f"missing {missing_config})", fix="re-run trtspec convert --mode eagle3")
    with safe_open(str(export_dir / "model.safetensors"), "pt") as handle:
        shapes = {name: list(handle.get_slice(name).get_shape()) for name in handle.keys()}
    missing = [name for name in REQUIRED_TENSORS if name not in shapes]
    aux_layers = (config.get("eagle_config") or {}).get("eagle_aux_hidden_state_layer_ids") or []
    if len(aux_layers) != 3:  # vLLM sizes fc for exactly three auxiliary layers
        missing.append("eagle_config.eagle_aux_hidden_state_layer_ids (3 layers)")
    hidden, vocab = target_config["hidden_size"], target_config["vocab_size"]
    draft_vocab = config["draft_vocab_size"]
    expected = {"fc.weight": [hidden, 3 * hidden], "lm_head.weight": [draft_vocab, hidden], "norm.weight": [hidden]}
    wrong = {name: shapes[name] for name, shape in expected.items() if name in shapes and shapes[name] != shape}
    if draft_vocab != vocab and shapes.get("d2t") != [draft_vocab]:
        wrong["d2t"] = shapes.get("d2t")
    if config["vocab_size"] != vocab:
        wrong["config.vocab_size"] = config["vocab_size"]
    if missing or wrong:
        raise IncompatibleArtifactError(f"{export_dir}: EAGLE-3 export has missing tensors {missing} or wrong "
                                        f"shapes {wrong}", fix="re-run trtspec convert --mode eagle3")
    return {"tensors": len(shapes), "draft_vocab_size": draft_vocab, "vocab_size": vocab,
            "aux_layers": aux_layers}
