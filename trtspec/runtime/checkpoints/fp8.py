"""Loading a ModelOpt FP8 checkpoint (export_hf_checkpoint) so the served numerics are FP8's.

Such a checkpoint has hf_quant_config.json (`quant_algo: FP8`) and, per quantized Linear,
`weight` in float8_e4m3fn with a float32 `weight_scale` (per tensor, or per output channel) and
an `input_scale` for its activations. We dequantize the weights once at load
(weight.float() * weight_scale) and quantize each quantized Linear's input on the fly the way
ModelOpt's fake quantizer does (x / input_scale, saturate to +-448, round to e4m3, times the
scale). Modules the export excluded (lm_head, embeddings) stay in float32. The result is a plain
float32 transformers model with the numerics of W8A8 FP8 inference.
"""

from __future__ import annotations

import json
from pathlib import Path

from trtspec.errors import ModelSourceError

E4M3_MAX = 448.0


def load_fp8_causal_lm(path: Path):
    import torch
    from safetensors.torch import load_file
    from transformers import AutoConfig, AutoModelForCausalLM

    quant = json.loads((path / "hf_quant_config.json").read_text()).get("quantization", {})
    if quant.get("quant_algo") != "FP8":
        raise ModelSourceError(f"{path}: quant_algo {quant.get('quant_algo')!r} is not supported by the cpu engine",
                               fix="export with ModelOpt FP8 (quantization.fp8: true) or unquantized")
    config = AutoConfig.from_pretrained(str(path))
    if hasattr(config, "quantization_config"):
        del config.quantization_config  # we dequantize ourselves; transformers must not try to
    model = AutoModelForCausalLM.from_config(config, dtype=torch.float32)
    raw = {}
    for file in sorted(path.glob("*.safetensors")):
        raw.update(load_file(str(file)))
    state, input_scales = dequantize_state_dict(raw)
    missing, unexpected = model.load_state_dict(state, strict=False)
    tied = {"lm_head.weight"} if config.tie_word_embeddings else set()
    if set(missing) - tied or unexpected:
        raise ModelSourceError(f"{path}: FP8 weights do not fit the config (missing {sorted(missing)[:3]}, "
                               f"unexpected {sorted(unexpected)[:3]})", fix="re-export the checkpoint")
    if tied:
        model.tie_weights()
    modules = dict(model.named_modules())
    for name, scale in input_scales.items():
        modules[name].register_forward_pre_hook(_input_quantizer(scale))
    return model.eval()


def dequantize_state_dict(raw: dict) -> tuple[dict, dict]:
    """float8 weights * weight_scale -> float32; returns (state_dict, {module: input_scale})."""
    import torch

    state, input_scales = {}, {}
    for key, tensor in raw.items():
        if key.endswith(("weight_scale", "input_scale", "_amax")) or key.endswith("k_scale") or key.endswith("v_scale"):
            continue
        if tensor.dtype == torch.float8_e4m3fn:
            module = key.rsplit(".", 1)[0]
            scale = raw[f"{module}.weight_scale"].float()
            if scale.dim() == 1:
                scale = scale.unsqueeze(-1)  # per output channel
            state[key] = tensor.float() * scale
            if f"{module}.input_scale" in raw:
                input_scales[module] = raw[f"{module}.input_scale"].float()
        else:
            state[key] = tensor.float()
    return state, input_scales


def quantize_activation(x, scale):
    """FP8 (e4m3) fake quantization with a static per-tensor scale."""
    import torch

    return (x / scale).clamp(-E4M3_MAX, E4M3_MAX).to(torch.float8_e4m3fn).to(x.dtype) * scale


def _input_quantizer(scale):
    def hook(module, args):
        return (quantize_activation(args[0], scale),) + tuple(args[1:])

    return hook
