"""Export the trained head with ModelOpt, in one layout whatever the ModelOpt version, and check it.

The directory is exactly what vLLM (`LlamaForCausalLMEagle3`, vllm/model_executor/models/
llama_eagle3.py), SGLang and trtspec's own engine read: config.json with architectures
["LlamaForCausalLMEagle3"] and model.safetensors holding `fc.weight`, `layers.0.*` (with
`hidden_norm`), `norm.weight`, `lm_head.weight` and, with a reduced vocabulary, `d2t`.
ModelOpt >= 0.40 writes that layout (`export_speculative_decoding`); ModelOpt 0.37, the version
TensorRT-LLM 1.1 and 1.2 depend on and so the one inside their Triton containers, has no
`export_speculative_decoding` and writes the EAGLE reference names (`midlayer.*`) through
`export_hf_checkpoint`; `export_eagle3` renames those to `layers.<i>.*`, so convert's output is
the same in either environment. TensorRT-LLM's own names are written by `trtspec build`
(trtspec/builders/eagle3_head.py), per release. `check_eagle3_export` verifies names and shapes
so a format drift in a future ModelOpt fails here, not on a GPU server.
"""

from __future__ import annotations

import contextlib
import json
from collections.abc import Iterator
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


# The EAGLE reference layout (ModelOpt 0.37's export, TensorRT-LLM 1.1/1.2's Eagle3DraftModel)
# calls the decoder layer `midlayer` (a ModuleList `midlayer.<i>` with several layers).
REFERENCE_LAYER_PREFIX = "midlayer."


def canonical_tensor_name(name: str) -> str:
    """`midlayer.<rest>` -> `layers.0.<rest>` and `midlayer.<i>.<rest>` -> `layers.<i>.<rest>`; others unchanged."""
    if not name.startswith(REFERENCE_LAYER_PREFIX):
        return name
    rest = name.removeprefix(REFERENCE_LAYER_PREFIX)
    head, _, tail = rest.partition(".")
    return f"layers.{rest}" if head.isdigit() and tail else f"layers.0.{rest}"


def export_eagle3(model, export_dir: Path) -> None:
    """Write ModelOpt's EAGLE-3 export of `model` into `export_dir`, in the `layers.<i>.*` layout."""
    import modelopt.torch.export as mte

    if hasattr(mte, "export_speculative_decoding"):  # ModelOpt >= 0.40
        with _quiet_config_deprecation():
            mte.export_speculative_decoding(model, export_dir=export_dir)
        return
    # ModelOpt 0.37 (inside the TensorRT-LLM 1.1 / 1.2 Triton containers): its HF exporter writes
    # only the EAGLE module, under the reference names, when EAGLE is the model's only mode.
    mte.export_hf_checkpoint(model, export_dir=export_dir)
    _rename_tensors(Path(export_dir) / "model.safetensors", canonical_tensor_name)
    quant = Path(export_dir) / "hf_quant_config.json"
    if quant.is_file() and not (json.loads(quant.read_text()).get("quantization") or {}).get("quant_algo"):
        quant.unlink()  # 0.37 writes it with quant_algo null for an unquantized head; it would read as FP8


@contextlib.contextmanager
def _quiet_config_deprecation() -> Iterator[None]:
    """ModelOpt's export reads `config.torch_dtype` (plugins/hf_spec_export.py at 0.47), and
    transformers 5 logs "`torch_dtype` is deprecated! Use `dtype` instead!" for it: a line about
    ModelOpt's code that every convert printed. Errors still show."""
    from transformers.utils import logging as hf_logging

    logger = hf_logging.get_logger("transformers.configuration_utils")
    level = logger.level
    logger.setLevel(hf_logging.ERROR)
    try:
        yield
    finally:
        logger.setLevel(level)


def _rename_tensors(path: Path, rename) -> None:
    from safetensors.torch import load_file, save_file

    tensors = load_file(str(path))
    save_file({rename(name): tensor for name, tensor in tensors.items()}, str(path), metadata={"format": "pt"})


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
