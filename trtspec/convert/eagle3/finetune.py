"""Fine-tuning an existing EAGLE-3 head on the user's data (`speculative.eagle3.head` with `data` or
`prompts`): the eagle3 stage's three additions, in its order.

1. `plan(spec, target_dir, ...)`: the head to start from, whatever its layout or source (a
   directory or a hub id), written as a canonical head into the work directory by the importer
   (eagle3.heads.stage.write_imported: read, checked against the target), its draft vocabulary
   (kept as it is: the head's lm_head rows and d2t; the coverage of the new answers is reported)
   and its architecture for ModelOpt's convert. Only heads that compute ModelOpt's function
   (trtspec's own, ModelOpt's exports) can be fine-tuned: ModelOpt trains its EagleModule, and a
   head whose tool computes another first layer (`trtspec_head_forward` eagle or
   norm_before_residual) would start as another function than its own, so it is refused;
2. `start(model, plan, work)`: the head's tensors into the converted module, the proof that the
   module is the head (its ModelOpt export equals the head bit for bit: `verify_warm_start`), and
   a step-0 snapshot, so the starting head is a candidate like every training snapshot;
3. `keep_best(...)`: every snapshot (step 0 included) exported and measured on the held-out
   prompts by the cpu engine; the one with the highest mean acceptance length is loaded into the
   module (ties keep the earlier step), whatever the loss said. The report keeps every candidate,
   `before` (step 0: the starting head's acceptance) and `after` (the kept one).

The held-out prompts are convert's (`--eval-prompts`): give prompts of the training domain that
the data does not hold. Choosing among the candidates on them makes `after` the best of several
measurements on those prompts; measure the kept head on other prompts of the domain for an
unselected figure (`trtspec bench`, or the profile beside the head).
Nothing here writes outside the stage's work directory.
"""

from __future__ import annotations

import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from trtspec.convert.eagle3 import warm_start
from trtspec.errors import IncompatibleArtifactError, TrtSpecError

STEP0 = "step-000000.pt"
START_HEAD = "start-head"  # the imported starting head, inside the work directory


@dataclass
class FineTunePlan:
    head_dir: Path
    head_sha256: str
    vocab: Any               # prepare.DraftVocab: the head's own
    architecture: dict[str, Any]


def wanted(settings) -> bool:
    """A fine-tune: a head and the user's own data or prompts to train it on."""
    return bool(settings.head) and bool(settings.data or settings.prompts)


def inputs(settings) -> dict[str, Any]:
    """What a fine-tune adds to the stage's inputs: the starting head's files (config and weights)."""
    from trtspec.convert.eagle3.heads.stage import _files_sha256, resolve_head

    return {"head_sha256": _files_sha256(resolve_head(settings.head))}


def plan(spec, target_dir: Path, target_config: dict[str, Any], work: Path, *, dist, answer_counts=None
         ) -> FineTunePlan:
    """Import the head into `work`/start-head (rank 0; the others wait), refuse a function ModelOpt
    does not compute, and read its vocabulary and architecture."""
    import shutil

    from trtspec.convert.eagle3.heads.canonical import head_forward
    from trtspec.convert.eagle3.heads.stage import write_imported

    settings = spec.speculative.eagle3
    directory = Path(work) / START_HEAD
    if dist.is_main:
        shutil.rmtree(directory, ignore_errors=True)
        directory.mkdir(parents=True)
        write_imported(directory, settings.head, target_dir, max_seq_len=spec.build.max_seq_len,
                       convention=settings.head_layer_convention)
    dist.barrier()
    config, _ = warm_start.read_head(directory)
    check_forward(head_forward(config), settings.head)
    return FineTunePlan(directory, warm_start.head_sha256(directory),
                        warm_start.head_vocab(directory, target_config["vocab_size"], answer_counts),
                        warm_start.head_architecture(directory, target_config))


def check_forward(forward: str, source: str) -> None:
    """Refuse to fine-tune a head whose first layer is not ModelOpt's function (see the docstring)."""
    if forward != "modelopt":
        raise IncompatibleArtifactError(
            f"speculative.eagle3.head: {source} computes the {forward!r} first layer, and fine-tuning trains "
            f"ModelOpt's EagleModule, which computes 'modelopt' (it would start as another function)",
            fix="serve the head as imported (speculative.eagle3.head without data or prompts), or train a head "
                "from scratch on the data (no head)")


def vocab_line(vocab, vocab_size: int) -> str:
    size = vocab.size or vocab_size
    return (f"draft vocabulary: the head's {size:,} of {vocab_size:,} tokens, {vocab.coverage:.2%} of the "
            f"{vocab.answer_tokens:,} answer tokens of the new data")


def start(model, fine_tune: FineTunePlan, work: Path, *, write: bool = True) -> dict[str, Any]:
    """Load the head into the converted module, prove it, keep it as the step-0 snapshot."""
    from trtspec.convert.eagle3.train import _save_atomic, trainable_state

    loaded = warm_start.warm_start(model, fine_tune.head_dir)
    with tempfile.TemporaryDirectory(dir=work) as scratch:
        proof = warm_start.verify_warm_start(model, fine_tune.head_dir, Path(scratch))
    if write:
        snapshots = Path(work) / "snapshots"
        snapshots.mkdir(parents=True, exist_ok=True)
        if not (snapshots / STEP0).exists():
            _save_atomic({"head": trainable_state(model), "step": 0, "seconds": 0.0}, snapshots / STEP0)
    return {"head": str(fine_tune.head_dir), **loaded, **proof}


def keep_best(model, measure, work: Path) -> dict[str, Any]:
    """Measure every snapshot with `measure(export_dir) -> acceptance`, load the best into `model`.

    Returns {candidates: [{step, seconds, mean_acceptance_length, acceptance_per_position}],
    kept_step, before, after}."""
    import torch

    from trtspec.convert.eagle3.export import export_eagle3

    paths = sorted((Path(work) / "snapshots").glob("step-*.pt"))
    candidates, best, best_state = [], None, None
    for path in paths:
        snapshot = torch.load(path, map_location="cpu", weights_only=False)
        model.eagle_module.load_state_dict(snapshot["head"], strict=False)
        with tempfile.TemporaryDirectory(dir=work) as export_dir:
            export_eagle3(model, Path(export_dir))
            acceptance = measure(Path(export_dir))
        point = {"step": snapshot["step"], "seconds": round(snapshot["seconds"], 1),
                 "mean_acceptance_length": acceptance["mean_acceptance_length"],
                 "acceptance_per_position": acceptance["acceptance_per_position"]}
        candidates.append(point)
        if best is None or point["mean_acceptance_length"] > best["mean_acceptance_length"]:
            best, best_state = point, snapshot["head"]
    if best_state is None:
        raise TrtSpecError("fine-tuning left no snapshot to choose from (checkpoints/.eagle3-work/snapshots is empty)",
                           fix="re-run trtspec convert; do not remove the work directory while it runs")
    model.eagle_module.load_state_dict(best_state, strict=False)
    before = next((point for point in candidates if point["step"] == 0), None)
    return {"candidates": candidates, "kept_step": best["step"], "chosen_by": "mean acceptance length on the "
            "held-out prompts (not the loss)", "before": before, "after": best}
