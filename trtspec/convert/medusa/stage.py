"""`trtspec convert --mode medusa`: Medusa heads for the target become `checkpoints/medusa`.

With `speculative.medusa.heads` (a directory or a hub id) the heads are imported in whichever
layout they are in (layouts.py) and checked against the target; without it they are trained on the
target's own greedy answers (train.py). Either way they are written, atomically, in the canonical
layout with a manifest (the target's sha256, the layout read or the training report, the draft
tree) and a re-run with the same inputs is skipped.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from trtspec import artifacts, hub
from trtspec.convert.medusa import layouts
from trtspec.convert.progress import Phase, Reporter
from trtspec.convert.target import StageResult
from trtspec.errors import ModelSourceError, SpecError
from trtspec.spec.medusa import DEFAULT_HEADS, DEFAULT_LAYERS

HEAD_FILES = ("*.json", "*.safetensors", "*.pt")


def resolve_heads(source: str) -> Path:
    """The local directory of a heads source: a directory, or a hub id's snapshot."""
    path = Path(source).expanduser()
    if path.is_dir():
        return path
    if hub.is_hub_id(source):
        return hub.snapshot(source, HEAD_FILES)
    raise ModelSourceError(f"speculative.medusa.heads: {source} is neither a directory nor a hub id (org/name)",
                           fix="give the heads' directory or their Hugging Face id")


def check_tree(choices: list[list[int]], num_heads: int) -> None:
    """Every path fits the heads: depth d is drafted by head d - 1."""
    deepest = max(len(path) for path in choices)
    if deepest > num_heads:
        raise SpecError([f"speculative.medusa.choices: a path of depth {deepest} needs {deepest} heads, "
                         f"the heads are {num_heads}; drop the deeper paths or use more heads"])


def run_medusa(spec, layout, target_dir: Path, target_sha: str, *, dry_run: bool = False,
               report: Reporter | None = None) -> StageResult:
    settings = spec.speculative.medusa
    final = layout.checkpoint("medusa")
    inputs: dict[str, Any] = {"target_sha256": target_sha, "heads": settings.heads,
                              "num_heads": settings.num_heads, "num_layers": settings.num_layers}
    if settings.heads:
        inputs["heads_sha256"] = _files_sha256(resolve_heads(settings.heads))
    else:
        inputs.update(train_seconds=settings.train_seconds, prompts=settings.prompts,
                      num_prompts=settings.num_prompts, answer_tokens=settings.answer_tokens)
    if artifacts.is_up_to_date(final, inputs):
        return StageResult("medusa", final, "skipped", artifacts.read_manifest(final))
    target_config = json.loads((Path(target_dir) / "config.json").read_text())
    if settings.heads:
        heads = layouts.read_heads(resolve_heads(settings.heads))
        layouts.check_against(heads, target_config, settings.num_heads, settings.num_layers)
        check_tree(settings.tree(heads.num_heads), heads.num_heads)
        made: dict[str, Any] = {"imported": {"source": settings.heads, "layout": heads.layout, "files": heads.files}}
        if dry_run:
            return StageResult("medusa", final, "planned")
    else:
        check_tree(settings.tree(settings.num_heads or DEFAULT_HEADS), settings.num_heads or DEFAULT_HEADS)
        if dry_run:
            return StageResult("medusa", final, "planned")
        heads, made = _trained(spec, target_dir, report)
    with artifacts.atomic_dir(final) as staging:
        layouts.write_canonical(staging, heads, str(spec.model.source))
        manifest = artifacts.write_manifest(
            staging, "medusa", source=settings.heads or "trained", target_sha256=target_sha,
            weights_sha256=artifacts.weights_sha256(staging), inputs=inputs,
            heads={"num_heads": heads.num_heads, "num_layers": heads.num_layers,
                   "choices": settings.tree(heads.num_heads)}, **made)
    return StageResult("medusa", final, "written", manifest, made)


def _trained(spec, target_dir: Path, report: Reporter | None) -> tuple[layouts.Heads, dict[str, Any]]:
    """Heads trained on the target's own greedy answers to the prompt set (train.py)."""
    from trtspec.convert.medusa import train
    from trtspec.convert.target import load_causal_lm
    from trtspec.prompts import prompt_texts

    settings = spec.speculative.medusa
    num_heads, num_layers = settings.num_heads or DEFAULT_HEADS, settings.num_layers or DEFAULT_LAYERS
    model, tokenizer = load_causal_lm(target_dir, dtype="float32", trust_remote_code=spec.model.trust_remote_code)
    prompts = prompt_texts(settings.prompts, "train", limit=settings.num_prompts)
    phase = Phase(report, "Medusa data (the target's answers)", total=len(prompts), unit="prompts")
    rows = train.target_answers(model, tokenizer, prompts, answer_tokens=settings.answer_tokens)
    phase.advance(len(prompts))
    data = train.features(model, rows, num_heads)
    training = Phase(report, "Medusa heads", total=0, unit="steps")
    tensors, trained = train.train_heads(data, model.get_output_embeddings().weight, num_heads=num_heads,
                                         num_layers=num_layers, seconds=settings.train_seconds,
                                         on_step=lambda step, loss: training.set(step, info=f"loss {loss:.3f}"))
    heads = layouts.Heads(tensors, num_heads, num_layers, "trained")
    return heads, {"trained": {**trained, "prompts": len(prompts), "answer_tokens": settings.answer_tokens}}


def _files_sha256(path: Path) -> str:
    """sha256 over the heads' config.json and weight files (what the import reads)."""
    import hashlib

    digest = hashlib.sha256()
    for file in sorted(p for p in Path(path).iterdir() if p.is_file() and (
            p.name == "config.json" or p.suffix in (".safetensors", ".pt"))):
        digest.update(file.name.encode())
        digest.update(artifacts.sha256_file(file).encode())
    return digest.hexdigest()
