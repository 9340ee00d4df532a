"""Resolve the target model and record it as `checkpoints/target` (hardlinks or a copy + manifest).

Also the one place convert loads a checkpoint into transformers (`load_causal_lm`), so dtype and
trust_remote_code are applied the same way everywhere.
"""

from __future__ import annotations

import os
import shutil
from pathlib import Path

from trtspec import artifacts
from trtspec.artifacts import StageResult
from trtspec.errors import ModelSourceError
from trtspec.models import ModelInfo, resolve_model

# Files copied from a source checkpoint: config, weights, tokenizer, chat template.
_KEEP_SUFFIXES = (".json", ".safetensors", ".jinja", ".txt", ".model", ".tiktoken")


def copy_checkpoint(source: Path, destination: Path) -> None:
    """Hardlink (same filesystem) or copy the checkpoint files of `source` into `destination`."""
    for path in sorted(Path(source).iterdir()):
        if not path.is_file() or path.name == artifacts.MANIFEST or not path.name.endswith(_KEEP_SUFFIXES):
            continue
        target = destination / path.name
        try:
            os.link(path, target)
        except OSError:  # another filesystem, or links not allowed: copy instead
            shutil.copy2(path, target)


def write_target(info: ModelInfo, final: Path, *, source: str, dry_run: bool = False) -> StageResult:
    """Record the resolved target in `final` unless it already holds these exact weights."""
    inputs = {"source": source, "source_sha256": info.sha256}
    if settled := artifacts.settled("target", final, inputs, dry_run=dry_run):
        return settled
    with artifacts.atomic_dir(final) as staging:
        copy_checkpoint(info.path, staging)
        manifest = artifacts.write_manifest(
            staging, "target", source=source, resolved_path=str(info.path),
            weights_sha256=artifacts.weights_sha256(staging), inputs=inputs, model=info.summary())
    return StageResult("target", final, "written", manifest)


def resolve_target(source: str, *, trust_remote_code: bool = False) -> ModelInfo:
    """resolve_model, quietly; its ModelSourceError already names the problem and the fix."""
    return resolve_model(source, trust_remote_code=trust_remote_code, quiet=True)


def load_causal_lm(path: Path, *, dtype: str = "float32", trust_remote_code: bool = False):
    """(model in eval mode, tokenizer) from a local HF checkpoint; one-line error when unloadable."""
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    try:
        model = AutoModelForCausalLM.from_pretrained(path, dtype=getattr(torch, dtype),
                                                     trust_remote_code=trust_remote_code)
        tokenizer = AutoTokenizer.from_pretrained(path, trust_remote_code=trust_remote_code)
    except (OSError, ValueError) as error:
        first = str(error).strip().splitlines()[0] if str(error).strip() else type(error).__name__
        raise ModelSourceError(f"{path}: transformers cannot load this checkpoint ({first})",
                               fix="check config.json, the weights and the tokenizer files") from None
    if tokenizer.pad_token_id is None:
        tokenizer.pad_token = tokenizer.eos_token
    return model.eval(), tokenizer
