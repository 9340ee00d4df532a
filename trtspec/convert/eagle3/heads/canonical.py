"""The canonical head: what trtspec's own trained heads are, so every reader takes it unchanged.

ModelOpt >= 0.43's `export_speculative_decoding` layout (what trtspec.convert.eagle3.export
writes and check_eagle3_export verifies): config.json with architectures
["LlamaForCausalLMEagle3"], the flat Llama fields, draft_vocab_size and eagle_config (its
eagle_aux_hidden_state_layer_ids the canonical OUTPUT ids); model.safetensors with fc,
layers.<i>.*, norm, lm_head and, with a reduced vocabulary, d2t (int64 offsets). Tensors keep
the dtype they were read in (bit for bit). One key is trtspec's own: `trtspec_head_forward`
(layouts.FORWARDS), the function the head's tool computes, read by the cpu engine; absent, as in
trtspec's own heads, it is "modelopt". Writes into a directory the caller made (a staging dir).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from trtspec.convert.eagle3.heads.layouts import FORWARD_KEY, LLAMA_KEYS

WEIGHTS = "model.safetensors"
# ModelOpt's llama_eagle_template_config eagle_config (hf_spec_configs.py), the ids filled in
EAGLE_CONFIG = {"use_aux_hidden_state": True, "use_input_layernorm_in_first_layer": True, "use_last_layernorm": True,
                "use_mtp_layernorm": False, "next_layer_regular": True, "parallel_draft_step": 1,
                "parallel_draft_heads_num_layers": 1}


def canonical_config(llama: dict[str, Any], *, draft_vocab_size: int, layer_ids: list[int], forward: str,
                     dtype: str) -> dict[str, Any]:
    """config.json of the canonical head."""
    flat = {key: llama[key] for key in LLAMA_KEYS if key in llama}
    if llama.get("target_hidden_size") and llama["target_hidden_size"] != llama["hidden_size"]:
        flat["target_hidden_size"] = llama["target_hidden_size"]
    return {"architectures": ["LlamaForCausalLMEagle3"], "model_type": "llama", **flat,
            "draft_vocab_size": int(draft_vocab_size), "torch_dtype": dtype, "tie_word_embeddings": False,
            "eagle_config": {"eagle_aux_hidden_state_layer_ids": [int(i) for i in layer_ids], **EAGLE_CONFIG},
            FORWARD_KEY: forward}


def write_canonical(directory: Path, config: dict[str, Any], tensors: dict[str, Any]) -> None:
    """config.json + model.safetensors (names sorted, d2t int64, contiguous) into `directory`."""
    from safetensors.torch import save_file

    directory = Path(directory)
    out = {name: (tensor.long() if name == "d2t" else tensor).contiguous() for name, tensor in sorted(tensors.items())}
    save_file(out, str(directory / WEIGHTS), metadata={"format": "pt"})
    (directory / "config.json").write_text(json.dumps(config, indent=2) + "\n")


def read_canonical(directory: Path) -> tuple[dict[str, Any], dict[str, Any]]:
    """(config, tensors) of a canonical head directory (trtspec's own heads included)."""
    from safetensors.torch import load_file

    directory = Path(directory)
    config = json.loads((directory / "config.json").read_text())
    tensors: dict[str, Any] = {}
    for file in sorted(directory.glob("*.safetensors")):
        tensors.update(load_file(str(file)))
    return config, tensors


def head_forward(config: dict[str, Any]) -> str:
    return config.get(FORWARD_KEY) or "modelopt"
