"""The eagle3 stage: self-distilled data -> ModelOpt EAGLE-3 convert -> budgeted training -> export.

Work files (resumable, not artifacts) live in `Layout.checkpoint(".eagle3-work")`: the generated
sequences (reused while the target, prompts and generation settings are unchanged), the training
state and weight snapshots. The exported head goes atomically to `Layout.checkpoint("eagle3")`.
"""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

from trtspec import artifacts
from trtspec.convert import eagle3_data, eagle3_export, eagle3_train, reports
from trtspec.convert.target import StageResult, load_causal_lm
from trtspec.prompts import prompts_sha256


def _progress(console) -> Progress:
    return Progress(TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(), TextColumn("{task.fields[info]}"),
                    TimeElapsedColumn(), console=console, transient=False)


def eagle3_inputs(spec, target_sha: str, train_prompts: list[str]) -> dict[str, Any]:
    """What the head depends on: the target, the prompts and every training setting."""
    return {"target_sha256": target_sha, "prompts_sha256": prompts_sha256(train_prompts),
            "eagle3": spec.speculative.eagle3.model_dump(mode="json", exclude={"prompts"})}


# Budgets and snapshot cadence do not change what was trained so far: leaving them out of the
# training-state key lets a re-run with a larger budget continue from the saved state (the
# learning-rate schedule then restarts its cosine from the new budget's progress: a warm restart).
BUDGET_FIELDS = ("max_steps", "max_minutes", "checkpoint_every")


def train_state_key(inputs: dict[str, Any]) -> dict[str, Any]:
    """The eagle3 inputs minus the budget fields, as JSON-normalised data."""
    key = json.loads(json.dumps(inputs))
    for name in BUDGET_FIELDS:
        key["eagle3"].pop(name, None)
    return key


def load_sequences(work: Path, data_key: dict[str, Any], make) -> list[list[int]]:
    """Reuse work/sequences.json when it was made from the same inputs, else make and store it."""
    path = work / "sequences.json"
    if path.exists():
        cached = artifacts.read_json(path)
        if cached.get("key") == data_key:
            return cached["sequences"]
    sequences = make()
    work.mkdir(parents=True, exist_ok=True)
    artifacts.write_json(path.with_suffix(".partial"), {"key": data_key, "sequences": sequences})
    path.with_suffix(".partial").replace(path)
    return sequences


def run_eagle3(spec, layout, target_dir: Path, target_sha: str, train_prompts: list[str], eval_prompts: list[str],
               *, console, dry_run: bool = False, eval_tokens: int = 48) -> StageResult:
    """Train and export the EAGLE-3 head for the target in `target_dir` (skip when up to date)."""
    settings = spec.speculative.eagle3
    final, work = layout.checkpoint("eagle3"), layout.checkpoint(".eagle3-work")
    inputs = eagle3_inputs(spec, target_sha, train_prompts)
    if artifacts.is_up_to_date(final, inputs):
        return StageResult("eagle3", final, "skipped", artifacts.read_manifest(final))
    if dry_run:
        return StageResult("eagle3", final, "planned")
    target_config = json.loads((target_dir / "config.json").read_text())
    model, tokenizer = load_causal_lm(target_dir, dtype=spec.model.dtype, trust_remote_code=spec.model.trust_remote_code)
    timings: dict[str, float] = {}

    # 1. self-distilled data: the target answers the prompts in its chat template
    data_key = {"target_sha256": target_sha, "prompts_sha256": inputs["prompts_sha256"],
                "num_samples": settings.num_samples, "answer_tokens": settings.answer_tokens}
    started = time.monotonic()

    def make() -> list[list[int]]:
        with _progress(console) as progress:
            task = progress.add_task("self-distilled answers", total=settings.num_samples, info="")
            return eagle3_data.generate_sequences(
                model, tokenizer, train_prompts, num_samples=settings.num_samples,
                answer_tokens=settings.answer_tokens, on_batch=lambda n: progress.advance(task, n))

    sequences = load_sequences(work, data_key, make)
    timings["data_s"] = round(time.monotonic() - started, 1)

    # 2. ModelOpt EAGLE-3 convert, sized from the target (optional reduced vocabulary + d2t)
    vocab = target_config["vocab_size"]
    draft_vocab = settings.draft_vocab_size if settings.draft_vocab_size and settings.draft_vocab_size < vocab else None
    kept = d2t = None
    coverage = 1.0
    if draft_vocab:
        kept, d2t, coverage = eagle3_data.build_draft_vocab(sequences, vocab, draft_vocab)
    import torch

    torch.manual_seed(settings.seed)
    eagle3_train.convert_eagle3(model, target_config, draft_vocab_size=draft_vocab, kept_ids=kept, d2t=d2t)

    # 3. features: one frozen-target pass over every row (ModelOpt offline-training inputs),
    #    computed only when training has steps left
    input_ids, attention = eagle3_data.pack_rows(sequences, settings.seq_len, tokenizer.pad_token_id)

    def features() -> dict:
        started = time.monotonic()
        with _progress(console) as progress:
            task = progress.add_task("target features", total=len(sequences), info="")
            computed = eagle3_data.compute_features(model, input_ids, attention,
                                                    on_batch=lambda n: progress.advance(task, n))
        timings["features_s"] = round(time.monotonic() - started, 1)
        return computed

    # 4. budgeted training, resumable from the work directory while everything but the budget
    #    is unchanged (a larger budget continues the run)
    state_key = work / "train-inputs.json"
    if not state_key.exists() or artifacts.read_json(state_key) != train_state_key(inputs):
        for stale in [work / "state.pt", *sorted((work / "snapshots").glob("*.pt"))]:
            stale.unlink(missing_ok=True)
        work.mkdir(parents=True, exist_ok=True)
        artifacts.write_json(state_key, train_state_key(inputs))
    train_dtype = eagle3_train.resolve_train_dtype(settings.train_dtype)
    train_settings = eagle3_train.TrainSettings(
        max_steps=settings.max_steps, max_seconds=settings.max_minutes * 60, learning_rate=settings.learning_rate,
        batch_size=min(settings.batch_size, len(sequences)), checkpoint_every=settings.checkpoint_every,
        seed=settings.seed, bf16=train_dtype == "bfloat16")
    with _progress(console) as progress:
        task = progress.add_task("EAGLE-3 training", total=settings.max_steps, info="")

        def on_step(step: int, record: dict[str, Any]) -> None:
            acc = "/".join(f"{a:.2f}" for a in record["train_acc"])
            progress.update(task, completed=step, info=f"loss {record['loss']:.3f} acc {acc} {record['seconds']:.0f}s")

        result = eagle3_train.train_eagle3(model, features, input_ids, attention, train_settings, work, on_step=on_step)

    # 5. export, acceptance on held-out prompts (the cpu engine with the exported head when
    #    trtspec.runtime is installed, else ModelOpt's pseudo_speculative_generate), manifest
    report = {"training": {**result.to_dict(), "history": result.history[-20:], "dtype": train_dtype},
              "timings": timings,
              "data": {"sequences": len(sequences), "tokens": int(attention.sum()), "row_length": attention.shape[1],
                       "draft_vocab_size": draft_vocab or vocab, "draft_vocab_coverage": round(coverage, 4)}}
    with artifacts.atomic_dir(final) as staging:
        eagle3_export.export_eagle3(model, staging)
        report["export"] = eagle3_export.check_eagle3_export(staging, target_config)
        report["acceptance"] = measure_acceptance(model, tokenizer, target_dir, staging, eval_prompts,
                                                  max_draft_len=spec.speculative.max_draft_len,
                                                  new_tokens=eval_tokens, console=console)
        manifest = artifacts.write_manifest(
            staging, "eagle3", source=str(target_dir), target_sha256=target_sha,
            weights_sha256=artifacts.weights_sha256(staging), inputs=inputs,
            settings=spec.speculative.eagle3.model_dump(mode="json"), report=report)
    layout.reports.mkdir(parents=True, exist_ok=True)
    artifacts.write_json(layout.report_dir("convert-eagle3.json"), report)
    return StageResult("eagle3", final, "written", manifest, report)


def measure_acceptance(model, tokenizer, target_dir: Path, head_dir: Path, prompts: list[str], *, max_draft_len: int,
                       new_tokens: int, console) -> dict[str, Any]:
    """Acceptance on held-out prompts; see reports.runtime_acceptance / reports.eagle3_acceptance."""
    with _progress(console) as progress:
        task = progress.add_task("acceptance (held-out)", total=len(prompts), info="")
        try:
            return reports.runtime_acceptance(target_dir, head_dir, prompts, max_draft_len=max_draft_len,
                                              new_tokens=new_tokens, on_prompt=lambda n: progress.advance(task, n))
        except ImportError:  # trtspec.runtime not installed: ModelOpt's own measurement
            references = _references(model, tokenizer, prompts, new_tokens)
            return reports.eagle3_acceptance(model, references, max_draft_len=max_draft_len,
                                             on_prompt=lambda n: progress.advance(task, n))


def _references(eagle_model, tokenizer, prompts: list[str], new_tokens: int):
    """Greedy continuations from the target inside the converted model (its base forward)."""
    import torch

    from trtspec.chat import prompt_ids

    pairs = []
    for prompt in prompts:
        ids = prompt_ids(tokenizer, prompt)
        sequence = torch.tensor([ids])
        for _ in range(new_tokens):
            token, _ = eagle_model.pseudo_speculative_generate(sequence, steps=0)
            sequence = torch.cat([sequence, token], dim=-1)
            if int(token) == tokenizer.eos_token_id:
                break
        pairs.append((ids, sequence[0, len(ids):].tolist()))
    return pairs
