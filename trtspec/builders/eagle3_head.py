"""The EAGLE-3 head as a given TensorRT-LLM release loads it: weight names and captured layers.

`trtspec convert` writes the head in ModelOpt's current layout (`layers.0.*`, eagle_config with
the target layers it was trained on). TensorRT-LLM 1.1 and 1.2 bind the decoder layer by the name
`midlayer.*` (contract `eagle3_head.layer_prefix`) and capture target layers (1, n/2 - 1, n - 4)
unless told otherwise. `write_head()` writes the head into the engine directory under the names
the release binds, checked against the contract, and `layers_to_capture()` gives the head's layers
for the speculative config (`eagle3_layers_to_capture`, always written where the release has the
field), refusing with the reason where a release without it would capture other layers.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

from trtspec.builders import upstream
from trtspec.builders.contracts import Contract
from trtspec.convert.eagle3.export import canonical_tensor_name
from trtspec.errors import IncompatibleArtifactError


def release_tensor_name(name: str, contract: Contract, num_layers: int) -> str:
    """A canonical head tensor name (`layers.<i>.*`) as the release's loader binds it."""
    if not name.startswith("layers."):
        return name
    index, rest = name.removeprefix("layers.").split(".", 1)
    prefix = contract.head["layer_prefix"]  # "midlayer."; a ModuleList midlayer.<i>. with several layers
    return f"{prefix}{rest}" if num_layers == 1 else f"{prefix}{index}.{rest}"


def layers_to_capture(head_config: dict[str, Any], target_config: dict[str, Any], contract: Contract) -> list[int] | None:
    """The `eagle3_layers_to_capture` value to write: the head's layers (outputs of target layers,
    as the canonical head stores them), always, where the release has the field; a head's layers
    are not always the defaults (nvidia/gpt-oss-120b-Eagle3-v3 reads [24, 30, 36]), and a value
    written is one the release cannot guess wrong. None only where the release has no such field
    and its default is the head's.

    Raises IncompatibleArtifactError when the head needs other layers than the default and the
    release has no field to say so (both supported releases have it: contract_data, `eagle3` fields).
    """
    default = contract.default_capture(target_config["num_hidden_layers"])
    trained = sorted((head_config.get("eagle_config") or {}).get("eagle_aux_hidden_state_layer_ids") or default or [])
    field = contract.head["layers_to_capture_field"]
    if field is not None and contract.has_field("eagle3", field):
        return trained or None
    if not trained or trained == default:
        return None
    wanted = "no default (fewer than 6 layers)" if default is None else f"layers {default}"
    raise IncompatibleArtifactError(
        f"the EAGLE-3 head reads target layers {trained}, TensorRT-LLM {contract.version} captures "
        f"{wanted} and has no verified eagle3_layers_to_capture field",
        fix="use build.trtllm_version 1.2.1 (it writes eagle3_layers_to_capture)")


# What TensorRT-LLM's Eagle3DecoderLayer computes (tensorrt_llm/_torch/models/modeling_speculative.py):
# residual = h; hidden_states = hidden_norm(h); cat(input_layernorm(embeds), hidden_states): the EAGLE
# code's function, called "eagle" in the head's config (`trtspec_head_forward`, trtspec.convert.eagle3.heads).
RELEASE_FORWARD = "eagle"


def forward_note(head_config: dict[str, Any]) -> str | None:
    """A line when the head was trained as another function than TensorRT-LLM computes, else None.

    trtspec's own heads and ModelOpt's (no `trtspec_head_forward`: "modelopt") apply hidden_norm to
    input_layernorm(h) (ModelOpt's EagleModule runs the first layer's input_layernorm before the
    attention pre-hook that adds hidden_norm); speculators' norm_before_residual heads take
    hidden_norm(h) as the residual. The weights load either way; the drafts differ from the cpu engine's.
    """
    forward = head_config.get("trtspec_head_forward") or "modelopt"
    if forward == RELEASE_FORWARD:
        return None
    trained = {"modelopt": "hidden_norm(input_layernorm(h)) (ModelOpt's EagleModule)",
               "norm_before_residual": "with hidden_norm(h) as the residual (norm_before_residual)"}.get(forward, forward)
    return (f"the EAGLE-3 head was trained as {trained}; TensorRT-LLM's Eagle3DecoderLayer computes "
            "hidden_norm(h) with residual h, so its drafts (and acceptance) can differ from the cpu engine's")


def write_head(source: Path, destination: Path, contract: Contract) -> dict[str, Any]:
    """Write the head in `source` into `destination` under the release's tensor names; return a summary."""
    from safetensors.torch import load_file, save_file

    config = json.loads((source / "config.json").read_text())
    num_layers = int(config.get("num_hidden_layers", 1))
    tensors = load_file(str(source / "model.safetensors"))
    renamed = {release_tensor_name(canonical_tensor_name(name), contract, num_layers): tensor
               for name, tensor in tensors.items()}
    if num_layers == 1:
        upstream.check_head_tensors(set(renamed), contract)
    destination.mkdir(parents=True, exist_ok=True)
    save_file(renamed, str(destination / "model.safetensors"), metadata={"format": "pt"})
    for path in sorted(source.iterdir()):
        if path.is_file() and path.name != "model.safetensors":
            shutil.copy2(path, destination / path.name)
    return {"tensors": len(renamed), "layer_prefix": contract.head["layer_prefix"],
            "source": contract.head["source"]}
