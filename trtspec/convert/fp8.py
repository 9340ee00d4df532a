"""FP8 post-training quantization with ModelOpt, exported in both checkpoint formats.

`quantize_fp8` applies `mtq.FP8_DEFAULT_CFG` (per-tensor e4m3 weights and activations; with
`fp8_kv_cache` also an e4m3 KV-cache quantizer, ModelOpt's FP8_KV_CFG) and calibrates on the
prompts, one forward each, with a progress bar. `export_hf` writes the HF checkpoint the trtllm
(LLM API) and cpu backends read: float8_e4m3fn weights + `weight_scale`, hf_quant_config.json,
config.json with `architectures`. `export_trtllm` writes the TensorRT-LLM checkpoint
(config.json + rank<N>.safetensors, one rank per tensor-parallel GPU) that `trtllm-build` reads.
"""

from __future__ import annotations

import contextlib
import copy
import json
import warnings
from collections.abc import Callable, Iterator
from pathlib import Path

from trtspec.chat import prompt_ids


def stored_quantized(checkpoint: Path) -> str | None:
    """How the checkpoint at `checkpoint` is stored quantized already (one phrase), or None:
    a ModelOpt export (hf_quant_config.json) or a config.json quantization_config (DeepSeek-V3/R1's
    block FP8, compressed-tensors, ...). PTQ of such weights would quantize them a second time."""
    if (checkpoint / "hf_quant_config.json").is_file():
        return "a ModelOpt export, hf_quant_config.json"
    config = checkpoint / "config.json"
    quant = json.loads(config.read_text()).get("quantization_config") if config.is_file() else None
    if quant:
        return f"config.json quantization_config, quant_method {quant.get('quant_method')!r}"
    return None


def quantize_fp8(model, tokenizer, prompts: list[str], *, fp8_kv_cache: bool = False,
                 on_prompt: Callable[[int], None] | None = None):
    """Quantize `model` in place (fake-quant modules with calibrated amax); return it."""
    import modelopt.torch.quantization as mtq
    import torch

    config = copy.deepcopy(mtq.FP8_DEFAULT_CFG)
    if fp8_kv_cache:
        # ModelOpt's recipe for an FP8 KV cache: add the KV-cache quantizers to the weight config.
        config["quant_cfg"].update(copy.deepcopy(mtq.FP8_KV_CFG)["quant_cfg"])
    batches = [torch.tensor([prompt_ids(tokenizer, prompt)]) for prompt in prompts]

    def forward_loop(quant_model) -> None:
        with torch.no_grad():
            for ids in batches:
                quant_model(ids)
                if on_prompt:
                    on_prompt(1)

    return mtq.quantize(model, config, forward_loop=forward_loop)


# ModelOpt's export warnings that say nothing true about trtspec's checkpoints (read in
# modelopt/torch/export at 0.47): a torch.tensor(tensor) copy inside its own code; "Enable lm_head
# quantization", printed whenever lm_head has quantizer modules although FP8_DEFAULT_CFG leaves
# them disabled; and the fallback it takes when tensorrt_llm is not importable (the manual config
# it writes instead is the one trtspec checks, docs/BUILD.md).
_EXPORT_NOISE = (
    r"To copy construct from a tensor",
    r"Enable lm_head quantization",
    r"(?s)Cannot export tensorrt_llm checkpoint config.*No module named 'tensorrt_llm'",
)


@contextlib.contextmanager
def _quiet_export() -> Iterator[None]:
    with warnings.catch_warnings():
        for message in _EXPORT_NOISE:
            warnings.filterwarnings("ignore", message=message, category=UserWarning)
        yield


def export_hf(model, tokenizer, export_dir: Path) -> None:
    """ModelOpt's unified HF export (+ the tokenizer so the directory is self-contained)."""
    from modelopt.torch.export import export_hf_checkpoint

    with _quiet_export():
        export_hf_checkpoint(model, export_dir=export_dir)
    tokenizer.save_pretrained(export_dir)
    config_path = Path(export_dir) / "config.json"
    config = json.loads(config_path.read_text())
    if not config.get("architectures"):  # readers pick the model class from this field
        config["architectures"] = [type(model).__name__]
        config_path.write_text(json.dumps(config, indent=2) + "\n")


def export_trtllm(model, export_dir: Path, *, tp_size: int = 1, pp_size: int = 1) -> None:
    """ModelOpt's TensorRT-LLM checkpoint export (float16 activations, FP8 weights), per rank."""
    import torch
    from modelopt.torch.export import export_tensorrt_llm_checkpoint

    decoder = {"llama": "llama", "mistral": "llama", "qwen2": "qwen", "gemma": "gemma"}.get(model.config.model_type,
                                                                                           model.config.model_type)
    with _quiet_export():
        export_tensorrt_llm_checkpoint(model, decoder_type=decoder, dtype=torch.float16, export_dir=export_dir,
                                       inference_tensor_parallel=tp_size, inference_pipeline_parallel=pp_size)
