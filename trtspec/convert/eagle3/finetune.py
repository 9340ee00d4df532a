"""Fine-tuning an existing EAGLE-3 head on the user's data (`speculative.eagle3.head` with `data` or
`prompts`): the eagle3 stage's three additions, in its order.

1. `plan(settings, target_config, files, rows)`: the head to start from (a canonical head
   directory, eagle3.warm_start), its draft vocabulary (kept as it is: the head's lm_head rows and
   d2t; the coverage of the new answers is reported) and its architecture for ModelOpt's convert;
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
from trtspec.errors import ModelSourceError, TrtSpecError

STEP0 = "step-000000.pt"


@dataclass
class FineTunePlan:
    head_dir: Path
    head_sha256: str
    vocab: Any               # prepare.DraftVocab: the head's own
    architecture: dict[str, Any]


def wanted(settings) -> bool:
    """A fine-tune: a head and the user's own data or prompts to train it on."""
    return bool(settings.head) and bool(settings.data or settings.prompts)


def head_dir(settings) -> Path:
    """The canonical head directory `speculative.eagle3.head` names (what the importer writes)."""
    path = Path(settings.head).expanduser()
    if not (path / "config.json").is_file():
        raise ModelSourceError(f"speculative.eagle3.head: {settings.head} is not a head directory with config.json",
                               fix="fine-tuning starts from a head in trtspec's canonical layout: import it first "
                                   "(`trtspec convert --mode eagle3 --head SOURCE` without data), then point "
                                   "speculative.eagle3.head at work/checkpoints/eagle3")
    return path


def inputs(settings) -> dict[str, Any]:
    """What a fine-tune adds to the stage's inputs: the starting head's weights."""
    return {"head_sha256": warm_start.head_sha256(head_dir(settings))}


def plan(settings, target_config: dict[str, Any], answer_counts=None) -> FineTunePlan:
    directory = head_dir(settings)
    return FineTunePlan(directory, warm_start.head_sha256(directory),
                        warm_start.head_vocab(directory, target_config["vocab_size"], answer_counts),
                        warm_start.head_architecture(directory, target_config))


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
