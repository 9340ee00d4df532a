"""Loading an engine: engine.json bundles (from `trtspec build --backend cpu`) or checkpoints.

The bundle format is fixed by the contract in DESIGN.md (`format: trtspec-engine/1`); paths in
it are relative to the engine directory. Targets load in float32 with transformers; a ModelOpt
FP8 checkpoint (hf_quant_config.json) is dequantized at load by trtspec.runtime.fp8. Only
safetensors are read; remote code is never trusted.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from trtspec.errors import IncompatibleArtifactError, ModelSourceError
from trtspec.runtime.config import EngineConfig

ENGINE_FORMAT = "trtspec-engine/1"
RUNTIME_KEYS = ("dtype", "ngram_min", "ngram_max", "dynamic_draft", "confidence_threshold", "acceptance_floor",
                "eagle_choices", "prepack", "kv_cache_max_tokens", "draft_len_schedule")
# build_config keys the engine's scheduler reads (engine.json's contract with TensorRT-LLM's names)
SCHEDULER_KEYS = ("max_batch_size", "max_num_tokens", "tokens_per_block")


def load_engine(path: str | Path, **overrides: Any):
    """Load an engine bundle directory (engine.json + checkpoints) into an Engine; `overrides`
    replace EngineConfig fields the bundle sets (a server's max_queue_size, for instance)."""
    from trtspec.runtime.engine import Engine

    path = Path(path)
    manifest_path = path / "engine.json"
    if not manifest_path.is_file():
        raise ModelSourceError(f"{path}: no engine.json", fix="build it with `trtspec build --backend cpu`")
    bundle = json.loads(manifest_path.read_text())
    if bundle.get("format") != ENGINE_FORMAT:
        raise IncompatibleArtifactError(f"{manifest_path}: format {bundle.get('format')!r} is not {ENGINE_FORMAT}",
                                        fix="rebuild the engine with this trtspec version")
    if bundle.get("backend") != "cpu":
        raise IncompatibleArtifactError(f"{path}: a {bundle.get('backend')} engine cannot run in-process",
                                        fix="build with --backend cpu, or serve it with `trtspec deploy`")
    build = bundle.get("build_config", {})
    draft = bundle.get("draft") or None
    if draft and draft.get("target_sha256") and draft["target_sha256"] != bundle["target"].get("sha256"):
        raise IncompatibleArtifactError(f"{path}: the draft was made for another target",
                                        fix="re-run `trtspec convert` and `trtspec build`")
    runtime = {key: value for key, value in (bundle.get("runtime") or {}).items() if key in RUNTIME_KEYS}
    runtime.update({key: int(build[key]) for key in SCHEDULER_KEYS if key in build})
    runtime.update(overrides)
    sizes = {"max_input_len": int(build.get("max_input_len", 1024)), "max_seq_len": int(build.get("max_seq_len", 2048)),
             "name": bundle.get("name")}
    return engine_from_checkpoints(
        Engine, path / bundle["target"]["path"], mode=bundle.get("mode", "none"),
        draft_dir=(path / draft["path"]) if draft else None,
        max_draft_len=int(runtime.pop("max_draft_len", build.get("max_draft_len", 4))), **{**sizes, **runtime})


def engine_from_checkpoints(engine_cls, target_dir, *, mode: str = "ngram", draft_dir=None, max_draft_len: int = 4,
                            ngram_min: int = 1, ngram_max: int = 3, eagle_choices=None, dtype: str = "float32",
                            prepack: bool = True, **options: Any):
    """Build an Engine from a target checkpoint and, by `mode`, its drafter.

    prepack: run the target's (and a draft model's) linear layers on oneDNN-prepacked weights
    (prepack.py: multi-token verify passes cost far less; twice the linear-weight memory).
    """
    from transformers import AutoTokenizer

    if dtype != "float32":
        raise IncompatibleArtifactError(f"runtime dtype {dtype!r} is not supported by the cpu engine",
                                        fix="use float32 (FP8 checkpoints are dequantized to float32 at load)")

    target = load_causal_lm(target_dir)
    if prepack:
        from trtspec.runtime.prepack import prepack_linears

        prepack_linears(target)
    tokenizer = AutoTokenizer.from_pretrained(str(target_dir))
    drafter = None
    if mode == "ngram":
        from trtspec.runtime.drafters.ngram import NgramDrafter

        drafter = NgramDrafter(ngram_min, ngram_max)
    elif mode == "draft-target":
        from trtspec.runtime.drafters.draft_model import DraftModelDrafter

        draft_model = load_causal_lm(_need(draft_dir, mode))
        if prepack:
            from trtspec.runtime.prepack import prepack_linears

            prepack_linears(draft_model)
        drafter = DraftModelDrafter(draft_model)
    elif mode == "eagle3":
        from trtspec.runtime.drafters.eagle3 import Eagle3Drafter

        drafter = Eagle3Drafter.from_dir(_need(draft_dir, mode), target)
    elif mode != "none":
        raise IncompatibleArtifactError(f"unknown speculative mode {mode!r}",
                                        fix="use one of eagle3, draft-target, ngram, none")
    config = EngineConfig.from_options(mode=mode, max_draft_len=max_draft_len,
                                       eagle_choices=eagle_choices if mode == "eagle3" else None, **options)
    return engine_cls(target, tokenizer, drafter, config)


def _need(draft_dir, mode: str) -> Path:
    if draft_dir is None or not Path(draft_dir).is_dir():
        raise ModelSourceError(f"mode {mode} needs a draft checkpoint directory (got {draft_dir})",
                               fix="run `trtspec convert` to make one")
    return Path(draft_dir)


def load_causal_lm(path: str | Path):
    """A float32 causal LM in eval mode; FP8 checkpoints are dequantized (see fp8.py)."""
    import torch
    from transformers import AutoModelForCausalLM
    from transformers.utils import logging as hf_logging

    hf_logging.disable_progress_bar()  # a loading bar per model is noise in the CLI and in servers

    path = Path(path)
    if not (path / "config.json").is_file():
        raise ModelSourceError(f"{path}: no config.json", fix="point at a Hugging Face checkpoint directory")
    if (path / "hf_quant_config.json").is_file():
        from trtspec.runtime.fp8 import load_fp8_causal_lm

        return load_fp8_causal_lm(path)
    model = AutoModelForCausalLM.from_pretrained(str(path), dtype=torch.float32, use_safetensors=True,
                                                 trust_remote_code=False)
    return model.eval()
