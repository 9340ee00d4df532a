"""The eagle3 stage: self-distilled data -> ModelOpt EAGLE-3 convert -> budgeted training -> export.

Runs in one process or in every process of a torchrun launch (`dist`); each phase is shared out
over the processes (prepare, eagle3_train) and rank 0 alone writes the shared files, the
export, the manifest and the report. `max_minutes` is the whole stage's budget (eagle3.budget):
the data is sized to half of it from timed probes, training gets what is left, and the report
keeps the plan beside the actual times. Work files (resumable, not artifacts) live in
`Layout.checkpoint(".eagle3-work")`: the generated rows and target features (reused while what
they depend on is unchanged), the training state and weight snapshots. The exported head goes
atomically to `Layout.checkpoint("eagle3")`.
"""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

from trtspec import artifacts
from trtspec.artifacts import StageResult
from trtspec.convert import reports
from trtspec.convert.eagle3 import budget, finetune, prepare
from trtspec.convert.eagle3 import data as eagle3_data
from trtspec.convert.eagle3 import export as eagle3_export
from trtspec.convert.eagle3 import profile as head_profile
from trtspec.convert.eagle3 import store as eagle3_store
from trtspec.convert.eagle3 import train as eagle3_train
from trtspec.convert.eagle3.device import Placement
from trtspec.convert.eagle3.distributed import Dist
from trtspec.convert.eagle3.sources import DataSource
from trtspec.convert.progress import Phase, Reporter, note
from trtspec.convert.target import load_causal_lm
from trtspec.errors import TrtSpecError

# Where and how training runs, and where the answers come from, do not change what the head
# learns (up to float rounding): a finished head stays up to date when only these change.
PLACEMENT_FIELDS = ("device", "micro_batch_size", "generate_url", "generate_concurrency", "generate_batch_size")
# Budgets and snapshot cadence do not change what was trained so far: leaving them out of the
# training-state key lets a re-run with a larger budget continue from the saved state (the
# learning-rate schedule then restarts its cosine from the new budget's progress: a warm restart).
BUDGET_FIELDS = ("max_steps", "max_minutes", "checkpoint_every")


def _unset_head_fields(spec) -> tuple[str, ...]:
    """Without a starting head its fields are no inputs: heads trained before they existed stay up to date."""
    return () if spec.speculative.eagle3.head else ("head", "head_layer_convention")


def eagle3_inputs(spec, target_sha: str, source: DataSource) -> dict[str, Any]:
    """What the head depends on: the target, the data, every training setting, and the rule that
    sizes the draft vocabulary when the spec leaves it empty."""
    inputs = {"target_sha256": target_sha, "data_sha256": source.sha256,
              "eagle3": spec.speculative.eagle3.model_dump(
                  mode="json", exclude={"prompts", "data", *PLACEMENT_FIELDS, *_unset_head_fields(spec)})}
    if finetune.wanted(spec.speculative.eagle3):  # the starting head's weights, not only its path
        inputs.update(finetune.inputs(spec.speculative.eagle3))
    elif spec.speculative.eagle3.draft_vocab_size is None:
        inputs["draft_vocab_rule"] = {"coverage": eagle3_data.DRAFT_VOCAB_COVERAGE,
                                      "multiple": eagle3_data.DRAFT_VOCAB_MULTIPLE,
                                      "floor": eagle3_data.DRAFT_VOCAB_FLOOR}
    return inputs


def train_state_key(inputs: dict[str, Any], feature_key: dict[str, Any] | None = None) -> dict[str, Any]:
    """The eagle3 inputs minus the budget fields, plus the draft vocabulary the head was shaped
    with (it follows the rows a budget made), as JSON-normalised data."""
    key = json.loads(json.dumps(inputs))
    for name in BUDGET_FIELDS:
        key["eagle3"].pop(name, None)
    if feature_key is not None:
        key["draft_vocab"] = {"size": feature_key["draft_vocab_size"], "kept_sha256": feature_key["kept_sha256"]}
    return key


def run_eagle3(spec, layout, target_dir: Path, target_sha: str, source: DataSource, eval_prompts: list[str], *,
               placement: Placement, dist: Dist | None = None, report: Reporter | None = None, dry_run: bool = False,
               eval_tokens: int = 48) -> StageResult:
    """Train and export the EAGLE-3 head for the target in `target_dir` (skip when up to date)."""
    dist = dist or Dist()
    settings = spec.speculative.eagle3
    final, files = layout.checkpoint("eagle3"), prepare.WorkFiles(layout.checkpoint(".eagle3-work"))
    inputs = eagle3_inputs(spec, target_sha, source)
    if settled := artifacts.settled("eagle3", final, inputs, dry_run=dry_run):
        return settled
    dist.check_shared_dir(files.root)
    started = time.monotonic()  # the budget's clock: max_minutes is the whole stage
    budget_s = settings.max_minutes * 60
    target_config = json.loads((target_dir / "config.json").read_text())
    model, tokenizer = load_causal_lm(target_dir, dtype=spec.model.dtype, trust_remote_code=spec.model.trust_remote_code)
    model.to(placement.device)
    made_by = prepare.answers_made_by(settings, model)

    # 1. self-distilled rows: the target answers the conversations (each rank its share), as many
    #    as the budget allows (a timed probe of the first answers plans the rest; eagle3.budget)
    data_key = {"target_sha256": target_sha, "data_sha256": source.sha256, "answer_tokens": settings.answer_tokens,
                "seq_len": settings.seq_len}
    stats, plan = prepare.make_rows(settings, model, tokenizer, source, files, data_key, dist=dist, report=report,
                                    budget_s=budget_s, started=started,
                                    held_out_tokens=int(len(eval_prompts) * eval_tokens * _finish_factor(spec)))
    timings = {"data_s": round(time.monotonic() - started, 1)}
    batch_size = min(settings.batch_size, stats.count)
    if batch_size < dist.world_size:
        raise TrtSpecError(f"a global batch of {batch_size} rows cannot be shared by {dist.world_size} processes",
                           fix="raise speculative.eagle3.batch_size (and num_samples) or use fewer processes")

    # 2. ModelOpt EAGLE-3 convert, sized from the target, with a draft vocabulary sized to the
    #    answers' coverage unless the spec sets one (+ d2t)
    import torch

    #    (a fine-tune keeps the head's vocabulary and architecture: eagle3.finetune)
    fine_tune = None
    if finetune.wanted(settings):
        counts = eagle3_data.count_tokens(eagle3_store.read_answers(files.rows, stats.count),
                                          target_config["vocab_size"])
        fine_tune = finetune.plan(spec, target_dir, target_config, files.root, dist=dist, answer_counts=counts)
        vocab = fine_tune.vocab
        note(report, finetune.vocab_line(vocab, target_config["vocab_size"]))
    else:
        vocab = prepare.draft_vocabulary(files, target_config["vocab_size"], settings.draft_vocab_size,
                                         rows=stats.count, dist=dist)
        note(report, vocab.line(target_config["vocab_size"]))
    torch.manual_seed(settings.seed)
    eagle3_train.convert_eagle3(model, target_config, draft_vocab_size=vocab.size, kept_ids=vocab.kept, d2t=vocab.d2t,
                                architecture=fine_tune.architecture if fine_tune else None)
    model.to(placement.device)

    # 3. features: one frozen-target pass over every row, computed only when training has steps left
    feature_key = {"rows": {**data_key, "count": stats.count}, "dtype": spec.model.dtype,
                   "aux_layers": model.eagle_config.eagle_aux_hidden_state_layer_ids,
                   "draft_vocab_size": vocab.size, "kept_sha256": prepare.ids_sha256(vocab.kept)}

    def features():
        clock = time.monotonic()
        store = prepare.make_features(model, tokenizer, files, stats, feature_key, seq_len=settings.seq_len,
                                      dist=dist, report=report)
        timings["features_s"] = round(time.monotonic() - clock, 1)
        # training gets what the budget has left now that the features are made (or reused)
        train_settings.max_seconds = dist.broadcast(
            budget.training_seconds(budget_s, time.monotonic() - started, plan.finish_s))
        return store

    # 4. budgeted training, resumable while everything but the budget is unchanged; it gets what
    #    the budget has left once the data is made (the feature pass, when needed, comes out of it)
    state_key, state_inputs = files.root / "train-inputs.json", train_state_key(inputs, feature_key)
    if dist.is_main and (not state_key.exists() or artifacts.read_json(state_key) != state_inputs):
        for stale in [files.root / "state.pt", *sorted((files.root / "snapshots").glob("*.pt"))]:
            stale.unlink(missing_ok=True)
        artifacts.write_json(state_key, state_inputs)
    dist.barrier()
    # a fine-tune starts from the head's weights, proven equal, kept as the step-0 snapshot
    warm = finetune.start(model, fine_tune, files.root, write=dist.is_main) if fine_tune else None
    # until the features are made, training's share assumes the planned feature pass
    planned_s = budget.training_seconds(budget_s, time.monotonic() - started + plan.features_s, plan.finish_s)
    train_settings = eagle3_train.TrainSettings(
        max_steps=settings.max_steps, max_seconds=dist.broadcast(planned_s), learning_rate=settings.learning_rate,
        batch_size=batch_size, micro_batch_size=settings.micro_batch_size, checkpoint_every=settings.checkpoint_every,
        seed=settings.seed)
    clock = time.monotonic()
    result = eagle3_train.train_eagle3(model, features, train_settings, placement, files.root, dist=dist,
                                       on_step=_training_progress(report, train_settings, dist))
    timings["training_s"] = round(time.monotonic() - clock - timings.get("features_s", 0.0), 1)
    if not dist.is_main:
        return StageResult("eagle3", final, "written")

    # 5. rank 0: export, acceptance on held-out prompts, manifest
    clock = time.monotonic()
    report_data = {"training": {**result.to_dict(), "history": result.history[-20:], "dtype": placement.dtype,
                                "device": str(placement.device), "processes": dist.world_size,
                                "backend": dist.backend or "none", "global_batch": batch_size,
                                "tokens_per_s": _tokens_per_second(result), "machine": reports.machine_summary()},
                   "timings": timings,
                   "budget": {"plan": plan.to_dict(), "training_s": round(train_settings.max_seconds, 1)},
                   "data": {"source": source.label, "records": source.count, "sequences": stats.count,
                            "requested_samples": settings.num_samples,
                            "tokens": stats.tokens, "row_length": min(settings.seq_len, stats.longest),
                            "generated_by": made_by,
                            "draft_vocab_size": vocab.size or target_config["vocab_size"],
                            "draft_vocab_coverage": round(vocab.coverage, 4),
                            "draft_vocab_chosen_by": vocab.chosen_by, "answer_tokens": vocab.answer_tokens}}
    if fine_tune:  # the snapshot with the best held-out acceptance, not the last or lowest-loss one
        def untimed(head_dir: Path) -> dict[str, Any]:
            return measure_acceptance(model, tokenizer, target_dir, head_dir, eval_prompts, timed=False,
                                      max_draft_len=spec.speculative.max_draft_len, new_tokens=eval_tokens,
                                      report=report)
        report_data["fine_tune"] = {"warm_start": warm, **finetune.keep_best(model, untimed, files.root)}
    with artifacts.atomic_dir(final) as staging:
        eagle3_export.export_eagle3(model, staging)
        report_data["export"] = eagle3_export.check_eagle3_export(staging, target_config)
        report_data["acceptance"] = profile_head(spec, model, tokenizer, target_dir, target_sha, staging, eval_prompts,
                                                 new_tokens=eval_tokens, report=report,
                                                 made_by="fine-tuned" if fine_tune else "trained")
        warning = reports.low_acceptance_warning(report_data["acceptance"])
        if warning:
            report_data["warning"] = warning
        timings["finish_s"] = round(time.monotonic() - clock, 1)
        timings["total_s"] = round(time.monotonic() - started, 1)
        manifest = artifacts.write_manifest(
            staging, "eagle3", source=str(target_dir), target_sha256=target_sha,
            weights_sha256=artifacts.weights_sha256(staging), inputs=inputs,
            settings=spec.speculative.eagle3.model_dump(mode="json"), report=report_data)
    layout.reports.mkdir(parents=True, exist_ok=True)
    artifacts.write_json(layout.report_dir("convert-eagle3.json"), report_data)
    return StageResult("eagle3", final, "written", manifest, report_data)


def _finish_factor(spec) -> float:
    """Held-out decodings after training, in timed reports: one per draft shape the profile measures,
    plus, for a fine-tune, an untimed one (about half) per snapshot it chooses among (at most 11)."""
    settings = spec.speculative.eagle3
    factor = float(len(head_profile.draft_shapes(spec.speculative)))
    if finetune.wanted(settings):
        factor += 0.5 * (min(settings.max_steps // settings.checkpoint_every, 10) + 1)
    return factor


def _tokens_per_second(result: eagle3_train.TrainResult) -> float | None:
    """Training throughput of this session (the steps after the resume point), all processes together."""
    session = [record for record in result.history if record["step"] > result.resumed_from]
    if not session:
        return None
    before = next((r["seconds"] for r in result.history if r["step"] == result.resumed_from), 0.0)
    seconds = session[-1]["seconds"] - before
    return round(sum(record["tokens"] for record in session) / seconds, 1) if seconds > 0 else None


def _training_progress(report: Reporter | None, settings: eagle3_train.TrainSettings, dist: Dist):
    """on_step for train_eagle3: a "training" phase whose total follows whichever budget binds."""
    phase: Phase | None = None

    def on_step(step: int, record: dict[str, Any]) -> None:
        nonlocal phase
        if phase is None:
            phase = Phase(report, "training", total=settings.max_steps, unit="steps", completed=step - 1)
        # steps the time budget allows at the pace so far, when that comes before max_steps
        if record["seconds"] > 0:
            phase.total = max(step, min(settings.max_steps, int(step * settings.max_seconds / record["seconds"])))
        acc = "/".join(f"{a:.2f}" for a in record["train_acc"])
        phase.advance(1, tokens=record["tokens"], info=f"loss {record['loss']:.3f} acc {acc}")

    return on_step if dist.is_main else None


def profile_head(spec, model, tokenizer, target_dir: Path, target_sha: str, head_dir: Path, prompts: list[str], *,
                 new_tokens: int, report: Reporter | None = None, made_by: str = "trained") -> dict[str, Any]:
    """Write the head's speculation_profile.json (every draft shape the build makes, timed; eagle3.profile)
    and return the chain's figures as the acceptance report; ModelOpt's measurement without the runtime."""
    shapes = head_profile.draft_shapes(spec.speculative)
    phase = Phase(report, "acceptance", total=len(prompts) * len(shapes), unit="prompts")
    try:
        measured = head_profile.profile_beside(spec, target_dir, target_sha, head_dir, prompts, new_tokens=new_tokens,
                                               made_by=made_by, on_prompt=phase.advance)
    except ImportError:  # trtspec.runtime not installed: ModelOpt's own measurement, no profile
        references = _references(model, tokenizer, prompts, new_tokens)
        return reports.eagle3_acceptance(model, references, max_draft_len=spec.speculative.max_draft_len)
    return head_profile.as_acceptance(measured)


def measure_acceptance(model, tokenizer, target_dir: Path, head_dir: Path, prompts: list[str], *, max_draft_len: int,
                       new_tokens: int, report: Reporter | None = None, timed: bool = True) -> dict[str, Any]:
    """Acceptance on held-out prompts; see reports.runtime_acceptance / reports.eagle3_acceptance.
    `timed`: also decode them without the head, for the speed-up on this machine."""
    phase = Phase(report, "acceptance", total=len(prompts), unit="prompts")
    try:
        return reports.runtime_acceptance(target_dir, head_dir, prompts, max_draft_len=max_draft_len,
                                          new_tokens=new_tokens, on_prompt=phase.advance, timed=timed)
    except ImportError:  # trtspec.runtime not installed: ModelOpt's own measurement
        references = _references(model, tokenizer, prompts, new_tokens)
        return reports.eagle3_acceptance(model, references, max_draft_len=max_draft_len, on_prompt=phase.advance)


def _references(eagle_model, tokenizer, prompts: list[str], new_tokens: int):
    """Greedy continuations from the target inside the converted model (its base forward)."""
    import torch

    from trtspec.chat import prompt_ids

    pairs = []
    for prompt in prompts:
        ids = prompt_ids(tokenizer, prompt)
        sequence = torch.tensor([ids], device=eagle_model.device)
        for _ in range(new_tokens):
            token, _ = eagle_model.pseudo_speculative_generate(sequence, steps=0)
            sequence = torch.cat([sequence, token], dim=-1)
            if int(token) == tokenizer.eos_token_id:
                break
        pairs.append((ids, sequence[0, len(ids):].tolist()))
    return pairs
