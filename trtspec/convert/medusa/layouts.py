"""Medusa heads on disk: the two layouts users bring, read into one canonical form, and written.

Both tools build a head as nn.Sequential(ResBlock x L, Linear(hidden, vocab, bias=False)), a
ResBlock being x + SiLU(linear(x)) with a biased hidden x hidden linear, so the state-dict keys
are the Sequential's indices (reference heads-and-methods.md section 3):

  faster-decoding  medusa_lm_head.safetensors (train_legacy.py) or medusa_lm_head.pt (the v0.1 hub
                   heads): `{h}.{l}.linear.weight|bias`, `{h}.{L}.weight`; config.json
                   medusa_num_heads, medusa_num_layers (FasterDecoding/Medusa medusa_model.py)
  modelopt         the converted model's own *.safetensors: `medusa_heads.{h}.{l}.linear.*`,
                   `medusa_heads.{h}.{L}.weight` (modelopt/torch/speculative/plugins/hf_medusa.py),
                   config.json `medusa` {num_medusa_heads, num_medusa_layers} where it was saved

Both train head k on token t+k+2 from position t (FasterDecoding's medusa_labels = labels[..., 2 + k:];
ModelOpt's labels come shifted by one, plugins/hf_streaming_dataset.py `labels[..., :-1] =
input_ids[..., 1:]`, and hf_medusa.py shifts them once more per head), so their heads mean the same.

The canonical form is FasterDecoding's safetensors layout, which is also what TensorRT-LLM's
examples/medusa/convert_checkpoint.py reads from --medusa_model_dir (tensorrt_llm/models/medusa/
weight.py load_medusa_hf), and what the cpu engine's drafter loads. Counts come from the tensors,
not the config: `medusa-vicuna-7b-v1.3` says 2 heads and has 4 (TensorRT-LLM examples/medusa
README). A `.pt` file is read with weights_only=True: tensors, never pickled code.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from trtspec.errors import ModelSourceError

CANONICAL_FILE = "medusa_lm_head.safetensors"
MODELOPT_PREFIX = "medusa_heads."
_KEY = re.compile(r"^(\d+)\.(\d+)\.(linear\.weight|linear\.bias|weight)$")


@dataclass
class Heads:
    """Medusa heads as read: canonical tensors (`{h}.{l}.linear.*`, `{h}.{L}.weight`) and counts."""

    tensors: dict[str, Any]
    num_heads: int
    num_layers: int
    layout: str
    files: list[str] = field(default_factory=list)

    @property
    def hidden_size(self) -> int:
        return int(self.tensors[f"0.{self.num_layers}.weight"].shape[1])

    @property
    def vocab_size(self) -> int:
        return int(self.tensors[f"0.{self.num_layers}.weight"].shape[0])


def read_heads(path: Path) -> Heads:
    """The heads in directory `path`, whichever layout they are in."""
    path = Path(path)
    for name in (CANONICAL_FILE, "medusa_lm_head.pt"):
        if (path / name).is_file():
            return _counted(_load(path / name), "faster-decoding", [name])
    state: dict[str, Any] = {}
    files = sorted(p.name for p in path.glob("*.safetensors"))
    for name in files:
        from safetensors import safe_open

        with safe_open(str(path / name), framework="pt") as handle:
            for key in handle.keys():  # only the heads: a ModelOpt export holds the whole model
                if key.startswith(MODELOPT_PREFIX):
                    state[key.removeprefix(MODELOPT_PREFIX)] = handle.get_tensor(key)
    if not state:
        raise ModelSourceError(f"{path}: no Medusa heads (neither medusa_lm_head.safetensors/.pt nor "
                               "medusa_heads.* tensors in *.safetensors)",
                               fix="point speculative.medusa.heads at FasterDecoding's or ModelOpt's heads")
    return _counted(state, "modelopt", files)


def _load(file: Path) -> dict[str, Any]:
    if file.suffix == ".pt":
        import torch

        try:
            return dict(torch.load(str(file), map_location="cpu", weights_only=True))
        except Exception as error:  # noqa: BLE001 - any unpickling problem means the same to the user
            raise ModelSourceError(f"{file}: not a plain state dict of tensors ({type(error).__name__})",
                                   fix="save the heads with torch.save(heads.state_dict()) or as safetensors") from None
    from safetensors.torch import load_file

    return load_file(str(file))


def _counted(state: dict[str, Any], layout: str, files: list[str]) -> Heads:
    """Counts from the keys, every key accounted for and every tensor shaped as a head's."""
    unknown = sorted(key for key in state if not _KEY.match(key))
    if unknown:
        raise ModelSourceError(f"Medusa heads ({layout}): unexpected tensor {unknown[0]}",
                               fix="heads hold only {h}.{l}.linear.weight|bias and {h}.{L}.weight")
    heads = 1 + max(int(_KEY.match(k).group(1)) for k in state)  # type: ignore[union-attr]
    layers = max(int(_KEY.match(k).group(2)) for k in state if k.endswith(".weight") and  # type: ignore[union-attr]
                 not k.endswith("linear.weight"))
    expected = {f"{h}.{layers}.weight" for h in range(heads)}
    expected |= {f"{h}.{lay}.linear.{part}" for h in range(heads) for lay in range(layers) for part in ("weight", "bias")}
    if set(state) != expected:
        missing = sorted(expected - set(state)) or sorted(set(state) - expected)
        raise ModelSourceError(f"Medusa heads ({layout}): {heads} heads of {layers} ResBlocks expected, "
                               f"{missing[0]} missing or extra", fix="re-export the heads from the tool that trained them")
    vocab, hidden = state[f"0.{layers}.weight"].shape
    for key, tensor in state.items():
        want = (vocab, hidden) if key.endswith(f".{layers}.weight") else (
            (hidden, hidden) if key.endswith("linear.weight") else (hidden,))
        if tuple(tensor.shape) != want:
            raise ModelSourceError(f"Medusa heads ({layout}): {key} has shape {tuple(tensor.shape)}, expected {want}",
                                   fix="re-export the heads from the tool that trained them")
    return Heads(dict(state), heads, layers, layout, files)


def check_against(heads: Heads, target_config: dict[str, Any], num_heads: int | None, num_layers: int | None) -> None:
    """The heads fit the target (hidden and vocab sizes) and the spec's counts where it sets them."""
    for name, have, want in (("hidden_size", heads.hidden_size, target_config.get("hidden_size")),
                             ("vocab_size", heads.vocab_size, target_config.get("vocab_size"))):
        if want is not None and have != int(want):
            raise ModelSourceError(f"Medusa heads: {name} {have} differs from the target's {want}",
                                   fix="use heads trained for this target, or let convert train them")
    for name, have, want in (("num_heads", heads.num_heads, num_heads), ("num_layers", heads.num_layers, num_layers)):
        if want is not None and have != want:
            raise ModelSourceError(f"speculative.medusa.{name} is {want}, but the heads hold {have}",
                                   fix=f"set speculative.medusa.{name}: {have} or leave it empty")


def config_json(heads: Heads, base_model: str) -> dict[str, Any]:
    """FasterDecoding's MedusaConfig fields (what TensorRT-LLM's converter and trtspec read), plus sizes."""
    return {"medusa_num_heads": heads.num_heads, "medusa_num_layers": heads.num_layers,
            "base_model_name_or_path": base_model, "hidden_size": heads.hidden_size,
            "vocab_size": heads.vocab_size}


def write_canonical(directory: Path, heads: Heads, base_model: str) -> None:
    """config.json + medusa_lm_head.safetensors in `directory` (made by the caller)."""
    from safetensors.torch import save_file

    save_file({k: v.contiguous() for k, v in heads.tensors.items()}, str(Path(directory) / CANONICAL_FILE))
    (Path(directory) / "config.json").write_text(json.dumps(config_json(heads, base_model), indent=2) + "\n")
