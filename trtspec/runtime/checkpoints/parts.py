"""Checkpoints into the engine's parts: the float32 target, its tokenizer, the drafter `mode` needs.

Targets load in float32 with transformers; a ModelOpt FP8 checkpoint (hf_quant_config.json) is
dequantized at load by trtspec.runtime.checkpoints.fp8, a block-FP8 one (config.json's
quantization_config quant_method fp8, DeepSeek-V3/R1 as released) by .block_fp8; other
quantization_configs are refused in one line. Only safetensors are read; remote code is never
trusted. Nothing here knows the Engine class: engine.py calls `engine_parts`.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from trtspec.errors import IncompatibleArtifactError, ModelSourceError
from trtspec.modes import tree_modes
from trtspec.runtime.config import EngineConfig
from trtspec.runtime.cores.threads import release_idle_openmp_team


def engine_parts(target_dir, *, mode: str = "ngram", draft_dir=None, max_draft_len: int = 4,
                 ngram_min: int = 1, ngram_max: int = 3, eagle_choices=None, tree=None, dtype: str = "float32",
                 prepack: bool = True, **options: Any):
    """(target, tokenizer, drafter, EngineConfig) from a target checkpoint and, by `mode`, its drafter:
    what Engine(...) takes.

    prepack: run the target's (and a draft model's) linear layers on oneDNN-prepacked weights
    (prepack.py: multi-token verify passes cost far less; twice the linear-weight memory).
    dtype: float32, or bfloat16: every linear layer (the drafter's too) on the bfloat16 row kernel
    (trtspec.runtime.kernels.rowdot), the rest (embeddings, norms, attention, KV cache) in float32.
    """
    from transformers import AutoTokenizer

    from trtspec.runtime.drafters.registry import DRAFTER_OPTIONS, DrafterParts, make_drafter

    kernels = _linear_kernels(dtype, prepack)

    def prepack_like_target(module) -> None:
        if prepack:
            from trtspec.runtime.forward.prepack import prepack_linears

            prepack_linears(module, kernels)

    def load(path):
        model = load_causal_lm(path)
        prepack_like_target(model)
        return model

    target = load(target_dir)
    tokenizer = AutoTokenizer.from_pretrained(str(target_dir))
    # The drafter the mode's row names (trtspec.modes), with the mode's own options.
    own = {"ngram_min": ngram_min, "ngram_max": ngram_max}
    own.update({key: options.pop(key) for key in DRAFTER_OPTIONS.get(mode, ()) if key in options})
    for key in {k for keys in DRAFTER_OPTIONS.values() for k in keys} - {"ngram_min", "ngram_max"}:
        options.pop(key, None)  # another mode's settings (engine.json carries them all)
    drafter = make_drafter(DrafterParts(mode, target, draft_dir, load, prepack_like_target, own))
    config = EngineConfig.from_options(mode=mode, max_draft_len=max_draft_len,
                                       eagle_choices=eagle_choices if mode == "eagle3" else None,
                                       tree=tree if mode in tree_modes() else None, **options)
    # Loading and prepacking ran parallel regions in this thread; the steps run in the engine's loop
    # thread. Two OpenMP teams on the cores make both slow (threads.py), so this one ends here.
    release_idle_openmp_team()
    return target, tokenizer, drafter, config


def _linear_kernels(dtype: str, prepack: bool) -> tuple[str, ...]:
    """The kernels prepack may choose among for `dtype`; a clear error where it cannot run here."""
    import os

    from trtspec.runtime.forward.linear_choice import KERNELS, ROWDOT_BF16

    if dtype == "float32":
        # TRTSPEC_CPU_LINEAR=rowdot|onednn|mkl: that kernel only (rowdot keeps the numbers the same
        # at any thread count, so the loop may step down beside other processes: contention.py)
        only = os.environ.get("TRTSPEC_CPU_LINEAR", "").strip()
        if not only:
            return KERNELS
        if only not in KERNELS:
            raise IncompatibleArtifactError(f"TRTSPEC_CPU_LINEAR={only!r} is not a linear kernel",
                                            fix=f"use one of {', '.join(KERNELS)}, or unset it")
        return (only,)
    if dtype != "bfloat16":
        raise IncompatibleArtifactError(f"runtime dtype {dtype!r} is not supported by the cpu engine",
                                        fix="use float32 or bfloat16 (FP8 checkpoints are dequantized at load)")
    from trtspec.runtime.kernels import rowdot

    why = "prepack is off (build.prepack: false)" if not prepack else rowdot.bfloat16_unavailable()
    if why is not None:
        raise IncompatibleArtifactError(f"runtime dtype bfloat16 runs the linear layers on the bfloat16 row kernel, "
                                        f"which cannot run here: {why}", fix="use model.dtype float32 on this machine")
    return (ROWDOT_BF16,)


def load_causal_lm(path: str | Path):
    """A float32 causal LM in eval mode; FP8 checkpoints are dequantized: ModelOpt's (fp8.py), block-FP8
    ones as DeepSeek releases them (block_fp8.py)."""
    import torch
    from transformers import AutoModelForCausalLM
    from transformers.utils import logging as hf_logging

    hf_logging.disable_progress_bar()  # a loading bar per model is noise in the CLI and in servers

    path = Path(path)
    if not (path / "config.json").is_file():
        raise ModelSourceError(f"{path}: no config.json", fix="point at a Hugging Face checkpoint directory")
    from trtspec.runtime.checkpoints.architectures import refuse_unrunnable

    config = json.loads((path / "config.json").read_text())
    refuse_unrunnable(config, None, str(path))
    if (path / "hf_quant_config.json").is_file():
        from trtspec.runtime.checkpoints.fp8 import load_fp8_causal_lm

        return load_fp8_causal_lm(path)
    from trtspec.runtime.checkpoints.block_fp8 import block_size, load_block_fp8_causal_lm

    block = block_size(config, str(path))  # a quantization_config the cpu engine cannot read: one line
    if block is not None:
        return load_block_fp8_causal_lm(path, block)
    model = AutoModelForCausalLM.from_pretrained(str(path), dtype=torch.float32, use_safetensors=True,
                                                 trust_remote_code=False)
    return model.eval()
