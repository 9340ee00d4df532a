"""Loading a block-FP8 checkpoint (DeepSeek-V3/R1 as released) into the cpu engine's float32 model.

The format [deepseek-ai/DeepSeek-V3 README_WEIGHTS.md, "FP8 Weight Documentation", @9b4e978]:
config.json carries `quantization_config` {"quant_method": "fp8", "fmt": "e4m3", "activation_scheme":
"dynamic", "weight_block_size": [128, 128]}; each quantized Linear's `weight` is float8_e4m3fn and
sits beside a float32 `weight_scale_inv` of shape [ceil(out / 128), ceil(in / 128)], one scale a
128 x 128 block. A block cut short at the right or bottom edge (DeepSeek-V3's kv_a_proj_with_mqa is
576 x 7168, its scale 5 x 56) was zero-padded to 128 before its scale was taken and the padding
dropped after; dequantization is `block * weight_scale_inv` (inference/kernel.py weight_dequant
and inference/fp8_cast_bf16.py, which pairs `{name}` with `{name}_scale_inv`, @9b4e978).
What stays unquantized: every Linear of DeepSeek's model is FP8 (inference/model.py: `Linear.dtype
= torch.float8_e4m3fn`), except the output head, the embedding, the norms and the MoE router
(`Gate.weight`, its correction bias float32) (model.py@9b4e978); in the MTP module eh_proj,
enorm, hnorm, shared_head.norm, shared_head.head and embed_tokens are BF16 (the released
checkpoint's tensor table: simpx/model-inspect README.md@274b463, `model-inspect
deepseek-ai/DeepSeek-V3`). The loader does not depend on that list: it dequantizes what is stored
as float8_e4m3fn and upcasts the rest.

Why not transformers (5.14.1 here): on a machine without a GPU its FineGrainedFP8 quantizer
switches to `dequantize=True`, whose Fp8Dequantize derives the block from the weight and scale
shapes (rows // scale_rows), so a weight whose edge block is short gets the wrong block size: a
200-row weight with 2 scale rows is cut at row 100, not 128 (silently wrong), and DeepSeek-V3's own
576-row kv_a_proj_with_mqa is refused (576 is not a multiple of 5). So trtspec dequantizes
itself, once at load, into float32 (`weight.float() * scale_inv` per block: one rounding), and
hands transformers the float32 state dict (its own key conversion stacks the experts).

Numerics: W8A16-like. The weights are exactly the checkpoint's FP8 values times their scales; the
activations stay in float32. DeepSeek's dynamic 1 x 128 activation quantization (act_quant before
each fp8_gemm) is not applied on the cpu engine, so logits differ from an FP8 GPU deployment by
that quantization's noise, and equal a BF16 conversion of the checkpoint (fp8_cast_bf16) up to
BF16 rounding. Other `quantization_config` formats are refused in one line: GLM-4.5-FP8 ships
compressed-tensors (per-channel weight scales: HabanaAI/vllm-fork pull 1819 "GLM-4.5-MOE model uses
the compressed tensor path for FP8 inference"), which the cpu engine does not read.

Contract: `block_size(config, where)` reads config.json's dict only (no torch); `dequantize_state`
and `dequantize_block` are pure tensor functions; `load_block_fp8_causal_lm` is the loader
parts.load_causal_lm routes to, and mtp.read_mtp_weights dequantizes the MTP module the same way.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any

from trtspec.errors import IncompatibleArtifactError, ModelSourceError

if TYPE_CHECKING:
    import torch

SCALE_SUFFIX = "_scale_inv"
# transformers' FineGrainedFP8Config default, for a config that omits weight_block_size
DEFAULT_BLOCK = (128, 128)
_RUNS = "the cpu engine loads block-FP8 (quant_method fp8, fmt e4m3, weight_block_size), ModelOpt FP8 or unquantized"


def block_size(config: dict[str, Any], where: str) -> tuple[int, int] | None:
    """The weight block (rows, columns) of a block-FP8 config.json, None where it has no
    quantization_config; one IncompatibleArtifactError line for a format the cpu engine cannot load."""
    quant = config.get("quantization_config")
    if not quant:
        return None
    method = quant.get("quant_method")
    if method != "fp8":
        raise IncompatibleArtifactError(f"{where}: quantization_config.quant_method {method!r} is not a format "
                                        f"the cpu engine loads", fix=f"{_RUNS} checkpoints; use the unquantized one")
    fmt = quant.get("fmt", "e4m3")
    if fmt != "e4m3":
        raise IncompatibleArtifactError(f"{where}: FP8 format {fmt!r} is not e4m3 (float8_e4m3fn)",
                                        fix=f"{_RUNS}; use an e4m3 or unquantized checkpoint")
    scheme = quant.get("activation_scheme", "dynamic")
    if scheme != "dynamic":
        raise IncompatibleArtifactError(f"{where}: activation_scheme {scheme!r}: the cpu engine reads block-FP8 "
                                        "checkpoints with dynamic activation scales only",
                                        fix="use the checkpoint with activation_scheme dynamic, or unquantized")
    block = quant.get("weight_block_size") or DEFAULT_BLOCK
    if len(block) != 2 or min(int(b) for b in block) < 1:
        raise IncompatibleArtifactError(f"{where}: weight_block_size {block!r} is not [rows, columns]",
                                        fix="set it as the checkpoint was quantized (DeepSeek's: [128, 128])")
    return int(block[0]), int(block[1])


def dequantize_block(weight: torch.Tensor, scale_inv: torch.Tensor, block: tuple[int, int], name: str = "weight",
                     where: str = "") -> torch.Tensor:
    """float32 weight from an e4m3 one and its per-block scales; one line if the scale grid is
    not [ceil(rows / block rows), ceil(columns / block columns)]."""
    # weight:    [rows, columns] float8_e4m3fn
    # scale_inv: [ceil(rows / block[0]), ceil(columns / block[1])] float32
    rows, columns = weight.shape
    grid = (-(-rows // block[0]), -(-columns // block[1]))
    if tuple(scale_inv.shape) != grid:
        raise ModelSourceError(f"{where}: {name}{SCALE_SUFFIX} has shape {tuple(scale_inv.shape)}, and a "
                               f"{rows} x {columns} weight in {block[0]} x {block[1]} blocks needs {grid}",
                               fix="check quantization_config.weight_block_size, or re-download the checkpoint")
    scales = scale_inv.float().repeat_interleave(block[0], 0)[:rows].repeat_interleave(block[1], 1)[:, :columns]
    return weight.float() * scales


def dequantize_state(raw: dict[str, Any], block: tuple[int, int], where: str) -> dict[str, Any]:
    """The checkpoint's tensors in float32: every float8_e4m3fn `{name}` times its
    `{name}_scale_inv` per block (the scales consumed), every other tensor upcast."""
    import torch

    state = {}
    for key, tensor in raw.items():
        if key.endswith(SCALE_SUFFIX):
            if key.removesuffix(SCALE_SUFFIX) not in raw:
                raise ModelSourceError(f"{where}: {key} scales a weight the checkpoint does not have",
                                       fix="re-download the checkpoint (model.safetensors.index.json lists its tensors)")
            continue
        if tensor.dtype == torch.float8_e4m3fn:
            if key + SCALE_SUFFIX not in raw:
                raise ModelSourceError(f"{where}: {key} is FP8 and its scales {key}{SCALE_SUFFIX} are missing",
                                       fix="re-download the checkpoint (model.safetensors.index.json lists its tensors)")
            state[key] = dequantize_block(tensor, raw[key + SCALE_SUFFIX], block, key, where)
        elif tensor.dtype.is_floating_point and tensor.element_size() == 1:
            raise IncompatibleArtifactError(f"{where}: {key} is {tensor.dtype}, not float8_e4m3fn",
                                            fix=f"{_RUNS}; use an e4m3 or unquantized checkpoint")
        else:
            state[key] = tensor.float() if tensor.is_floating_point() else tensor
    return state


def load_block_fp8_causal_lm(path: Path, block: tuple[int, int]):
    """The float32 transformers model of a block-FP8 checkpoint, every weight dequantized once.
    The MTP module's layers (model.layers.{num_hidden_layers}.* on) are left out, as transformers
    leaves them; mode mtp reads them itself (mtp.read_mtp_weights)."""
    import torch
    from safetensors import safe_open
    from transformers import AutoConfig
    from transformers.models.auto.modeling_auto import MODEL_FOR_CAUSAL_LM_MAPPING

    config = AutoConfig.from_pretrained(str(path))
    if hasattr(config, "quantization_config"):
        del config.quantization_config  # dequantized here; transformers must not quantize again
    mtp = tuple(f"model.layers.{config.num_hidden_layers + k}." for k in range(
        int(getattr(config, "num_nextn_predict_layers", 0) or 0)))
    raw = {}
    for file in sorted(path.glob("*.safetensors")):
        with safe_open(str(file), framework="pt") as tensors:
            for key in tensors.keys():  # noqa: SIM118 (safe_open is not a mapping)
                if not (mtp and key.startswith(mtp)):
                    raw[key] = tensors.get_tensor(key)
    if not raw:
        raise ModelSourceError(f"{path}: no safetensors weights", fix="point at a Hugging Face checkpoint directory")
    state = dequantize_state(raw, block, str(path))
    del raw
    # the architecture's own class (the Auto class wants a path): its key conversion stacks the experts
    model, info = MODEL_FOR_CAUSAL_LM_MAPPING[type(config)].from_pretrained(
        None, config=config, state_dict=state, dtype=torch.float32, output_loading_info=True)
    missing = sorted(set(info["missing_keys"]) - ({"lm_head.weight"} if config.tie_word_embeddings else set()))
    if missing:
        raise ModelSourceError(f"{path}: the block-FP8 weights do not fit the config (missing {missing[:3]})",
                               fix="re-download the checkpoint")
    model.config._name_or_path = str(path)  # where mode mtp finds the MTP weights (mtp.target_dir)
    return model.eval()
