"""Read an EAGLE-3 head in any layout in use into one `Head`: canonical tensor names + settings.

Layouts (../shared/reference/heads-and-methods.md sections 0, 1a-1d):

  eagle          the EAGLE authors' (yuhuili/EAGLE3-*): flat Llama config (LlamaForCausalLM) with
                 draft_vocab_size, `midlayer.*`, d2t (+ t2d), pytorch_model.bin or model.safetensors;
                 layer ids hard-coded in their code as inputs of layers (2, N//2, N-3)
  specforge      SGLang SpecForge: the same tensors and flat config, architectures
                 LlamaForCausalLMEagle3, ids in eagle_config (outputs of layers), often embed_tokens
  modelopt-0.42  ModelOpt <= 0.42 export: `midlayer.*`, flat config + eagle_config (with
                 use_aux_hidden_state), no t2d
  modelopt       ModelOpt >= 0.43 export (and trtspec's own heads): the same with `layers.0.*`
  speculators    vllm-project/speculators: `layers.N.*`, d2t, t2d, speculators_config,
                 transformer_layer_config (HF to_diff_dict: fields at LlamaConfig's default are
                 absent), top-level ids counted as inputs of layers

The same tensors are not always the same function; `Head.forward` says which one the head's own
tool computes (FORWARDS). Safetensors are read first; a .bin only with torch.load(weights_only=True).
Nothing is checked against the target here (checks.py does that) beyond what reading needs.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from trtspec.convert.eagle3.heads import conventions as conv
from trtspec.errors import ModelSourceError

LAYOUTS = ("eagle", "specforge", "modelopt-0.42", "modelopt", "speculators")
FORWARDS = {
    "eagle": "residual = fc output h, attention reads cat(input_layernorm(embeds), hidden_norm(h)) "
             "(EAGLE code, SpecForge, TensorRT-LLM, SGLang, vLLM with norm_before_residual false)",
    "norm_before_residual": "residual = hidden_norm(h) (speculators / vLLM norm_before_residual true)",
    "modelopt": "attention reads hidden_norm(input_layernorm(h)), residual h (ModelOpt's EagleModule: the "
                "first decoder layer's input_layernorm runs before its attention pre-hook)",
}
FORWARD_KEY = "trtspec_head_forward"  # config.json key trtspec writes so its own exports read back exactly
# LlamaConfig's defaults: speculators saves transformer_layer_config with to_diff_dict, which leaves them out
LLAMA_DEFAULTS: dict[str, Any] = {
    "vocab_size": 32000, "hidden_size": 4096, "intermediate_size": 11008, "num_hidden_layers": 32,
    "num_attention_heads": 32, "hidden_act": "silu", "max_position_embeddings": 2048, "rms_norm_eps": 1e-6,
    "rope_theta": 10000.0, "rope_scaling": None, "attention_bias": False, "mlp_bias": False,
}
LLAMA_KEYS = (*LLAMA_DEFAULTS, "num_key_value_heads", "head_dim")
_DROP_PREFIXES = ("model.", "eagle_module.")
_TRAINING_ONLY = ("verifier_lm_head.weight", "verifier_norm.weight")


@dataclass
class Head:
    """One EAGLE-3 head as read: canonical tensor names (`layers.<i>.*`, fc, norm, lm_head, d2t,
    and when the files carry them t2d and embed_tokens), flat Llama settings, layer ids as written."""

    layout: str
    tensors: dict[str, Any]
    llama: dict[str, Any]
    draft_vocab_size: int
    layer_ids: list[int] | None      # as written; None: the layout's default
    convention: conv.Convention      # how layer_ids (or the default) count
    ids_from: str                    # where the ids came from, for the manifest and errors
    forward: str                     # a FORWARDS key
    files: list[str] = field(default_factory=list)
    unsupported: list[str] = field(default_factory=list)  # settings whose math trtspec does not run

    def output_layer_ids(self, num_target_layers: int) -> list[int]:
        """The captured layers as canonical OUTPUT ids (the layout's default when none are written)."""
        if self.layer_ids:
            return conv.to_output(self.layer_ids, self.convention)
        n = num_target_layers
        if self.layout.startswith("modelopt"):  # ModelOpt: sorted({1, max(0, n//2-1), max(0, n-4)})
            return sorted({1, max(0, n // 2 - 1), max(0, n - 4)})
        return conv.default_ids(n, conv.OUTPUT)  # every other tool's default names these same layers


def read_head(path: Path) -> Head:
    """The head in directory `path`, whichever layout it is in."""
    path = Path(path)
    config_path = path / "config.json"
    if not config_path.is_file():
        raise ModelSourceError(f"{path}: no config.json, so not an EAGLE-3 head directory",
                               fix="point --head at the head's directory (config.json + weights) or its hub id")
    try:
        config = json.loads(config_path.read_text())
    except json.JSONDecodeError as error:
        raise ModelSourceError(f"{config_path}: not valid JSON ({error.msg})", fix="restore the file") from None
    raw, files = read_tensors(path)
    layout = detect_layout(config, raw, path)
    tensors = {canonical_name(name): tensor for name, tensor in raw.items() if name not in _TRAINING_ONLY}
    reader = _read_speculators if layout == "speculators" else _read_flat
    head = reader(config, tensors, layout)
    head.files = files
    return head


def detect_layout(config: dict[str, Any], tensors: dict[str, Any], path: Path) -> str:
    """Which tool wrote this head, from its config and tensor names."""
    if config.get("speculators_model_type") is not None:
        if config["speculators_model_type"] != "eagle3":
            raise ModelSourceError(f"{path}: a speculators {config['speculators_model_type']!r} model, not EAGLE-3",
                                   fix="give an EAGLE-3 speculator (speculators_model_type eagle3)")
        return "speculators"
    if "draft_vocab_size" not in config and not isinstance(config.get("eagle_config"), dict):
        raise ModelSourceError(f"{path}: config.json has neither draft_vocab_size nor eagle_config, so it is not "
                               "an EAGLE-3 head (a full model?)",
                               fix="give the head's directory; for a draft model use --mode draft-target --draft")
    midlayer = any(name.startswith("midlayer.") for name in tensors)
    eagle = config.get("eagle_config")
    if isinstance(eagle, dict) and "use_aux_hidden_state" in eagle:  # ModelOpt's template writes it always
        if not eagle["use_aux_hidden_state"]:
            raise ModelSourceError(f"{path}: eagle_config.use_aux_hidden_state is false (EAGLE-1/2, not EAGLE-3)",
                                   fix="give an EAGLE-3 head")
        return "modelopt-0.42" if midlayer else "modelopt"
    if "LlamaForCausalLMEagle3" in (config.get("architectures") or []) or isinstance(eagle, dict):
        return "specforge"
    return "eagle"


def read_tensors(path: Path) -> tuple[dict[str, Any], list[str]]:
    """Every tensor of the head (as named on disk), and the files read: safetensors first, else a
    .bin through torch.load(weights_only=True)."""
    safetensors = sorted(path.glob("*.safetensors"))
    bins = sorted(p for p in path.glob("*.bin") if p.name != "training_args.bin")
    raw: dict[str, Any] = {}
    if safetensors:
        from safetensors.torch import load_file

        for file in safetensors:
            try:
                raw.update(load_file(str(file)))
            except Exception as error:  # safetensors raises SafetensorError / OSError for damage
                raise ModelSourceError(f"{file}: unreadable safetensors ({error})",
                                       fix="re-download the head") from None
        files = safetensors
    elif bins:
        import pickle

        import torch

        for file in bins:
            try:
                state = torch.load(str(file), map_location="cpu", weights_only=True)
            except pickle.UnpicklingError as error:
                raise ModelSourceError(f"{file}: not loadable with weights_only=True ({str(error).splitlines()[0]})",
                                       fix="convert it to safetensors where you trust its origin") from None
            raw.update(state.get("state_dict", state) if isinstance(state, dict) else {})
        files = bins
    else:
        extra = " (a SpecForge runtime checkpoint: run `specforge export --to hf` first)" \
            if (path / "training_state.pt").exists() else ""
        raise ModelSourceError(f"{path}: no *.safetensors or *.bin weights{extra}",
                               fix="point --head at an exported EAGLE-3 head")
    return raw, [file.name for file in files]


def canonical_name(name: str) -> str:
    """`midlayer.x` -> `layers.0.x`, `midlayer.<i>.x` -> `layers.<i>.x`; `model.` / `eagle_module.` dropped."""
    from trtspec.convert.eagle3.export import canonical_tensor_name

    for prefix in _DROP_PREFIXES:
        name = name.removeprefix(prefix)
    return canonical_tensor_name(name)


def llama_settings(source: dict[str, Any], *, diff_dict: bool = False) -> dict[str, Any]:
    """Flat Llama settings from a config dict, LlamaConfig's defaults where absent; rope read from
    rope_theta / rope_scaling or transformers 5's rope_parameters. A missing rope_theta stays None
    (checks.py refuses it) unless the config is a `diff_dict` (absent means LlamaConfig's default)."""
    settings = {key: source.get(key, default) for key, default in LLAMA_DEFAULTS.items()}
    settings["num_key_value_heads"] = source.get("num_key_value_heads") or settings["num_attention_heads"]
    settings["head_dim"] = source.get("head_dim") or settings["hidden_size"] // settings["num_attention_heads"]
    parameters = dict(source.get("rope_parameters") or {})
    theta = source.get("rope_theta") or parameters.pop("rope_theta", None) or (source.get("rope_scaling") or {}).get(
        "rope_theta")
    settings["rope_theta"] = float(theta) if theta else (LLAMA_DEFAULTS["rope_theta"] if diff_dict else None)
    scaling = source.get("rope_scaling") or (parameters if parameters.get("rope_type", "default") != "default" else None)
    scaling = {k: v for k, v in (scaling or {}).items() if k != "rope_theta"}
    settings["rope_scaling"] = scaling if scaling.get("rope_type", scaling.get("type", "default")) != "default" else None
    if source.get("target_hidden_size"):
        settings["target_hidden_size"] = source["target_hidden_size"]
    return settings


def _read_flat(config: dict[str, Any], tensors: dict[str, Any], layout: str) -> Head:
    eagle = config.get("eagle_config") if isinstance(config.get("eagle_config"), dict) else {}
    nested, top = eagle.get("eagle_aux_hidden_state_layer_ids"), config.get("eagle_aux_hidden_state_layer_ids")
    if nested:
        ids, convention, where = list(nested), conv.OUTPUT, "eagle_config.eagle_aux_hidden_state_layer_ids"
        if top and conv.to_output(top, conv.INPUT) != conv.to_output(nested, conv.OUTPUT):
            raise ModelSourceError(
                f"config.json: eagle_config.eagle_aux_hidden_state_layer_ids {nested} (outputs of layers) and "
                f"eagle_aux_hidden_state_layer_ids {top} (inputs of layers, as vLLM reads it) name different layers",
                fix="delete the wrong one (or set speculative.eagle3.head_layer_convention)")
    elif top:
        ids, convention, where = list(top), conv.INPUT, "eagle_aux_hidden_state_layer_ids (top level, vLLM's)"
    elif layout == "eagle":
        ids, convention, where = None, conv.INPUT, "default of the EAGLE code: hidden_states[2, N//2, N-3]"
    else:
        ids, convention, where = None, conv.OUTPUT, f"default of {layout}: outputs of layers 1, N//2-1, N-4"
    forward = "modelopt" if layout.startswith("modelopt") else "eagle"
    unsupported = []
    if layout.startswith("modelopt"):
        for key, wanted in (("use_input_layernorm_in_first_layer", True), ("use_last_layernorm", True),
                            ("use_mtp_layernorm", False), ("parallel_draft_step", 1)):
            if key in eagle and eagle[key] != wanted:
                unsupported.append(f"eagle_config.{key}: {eagle[key]}")
    draft_vocab = int(config.get("draft_vocab_size") or config.get("vocab_size") or 0)
    return Head(layout=layout, tensors=tensors, llama=llama_settings(config), draft_vocab_size=draft_vocab,
                layer_ids=ids, convention=convention, ids_from=where,
                forward=config.get(FORWARD_KEY) or forward, unsupported=unsupported)


def _read_speculators(config: dict[str, Any], tensors: dict[str, Any], layout: str) -> Head:
    layer_config = config.get("transformer_layer_config") or {}
    if layer_config.get("model_type", "llama") != "llama":
        raise ModelSourceError(f"speculators head over a {layer_config.get('model_type')!r} decoder layer",
                               fix="trtspec runs Llama decoder layers only")
    settings = llama_settings({**layer_config, **({"target_hidden_size": config["target_hidden_size"]}
                                                  if config.get("target_hidden_size") else {})}, diff_dict=True)
    unsupported = [f"{key}: true" for key in ("norm_before_fc", "fc_norm") if config.get(key)]
    unsupported += [name for name in tensors if name.startswith(("input_norm.", "fc_norm."))]
    ids = config.get("eagle_aux_hidden_state_layer_ids")
    forward = "norm_before_residual" if config.get("norm_before_residual", False) else "eagle"
    return Head(layout=layout, tensors=tensors, llama=settings,
                draft_vocab_size=int(config.get("draft_vocab_size", 32000)),
                layer_ids=list(ids) if ids else None, convention=conv.INPUT,
                ids_from="eagle_aux_hidden_state_layer_ids" if ids else
                "default of speculators: hidden_states[2, N//2, N-3]",
                forward=config.get(FORWARD_KEY) or forward, unsupported=unsupported)
