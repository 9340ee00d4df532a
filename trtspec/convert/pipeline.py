"""Which checkpoints a spec asks for, and running them in order with skip-on-rerun.

  target                       always (hardlinks or a copy of the resolved source + manifest)
  target-fp8, -fp8-trtllm      quantization.fp8: one ModelOpt PTQ, exported as an HF checkpoint
                               (trtllm and cpu backends) and, always alongside, a TensorRT-LLM
                               checkpoint for trtllm-engine (cheap, and switching backends later
                               then needs no re-calibration)
  eagle3                       speculative.mode eagle3 (trained, fine-tuned, or imported with
                               speculative.eagle3.head and no data: eagle3/heads/)
  draft (+ draft-fp8)          speculative.mode draft-target; and layerskip on a GPU backend: the
                               target's first E layers (first_layers.py), which the build serves
                               as draft-target (the cpu engine drafts from the target itself)
  medusa                       speculative.mode medusa (trained on the target's answers, or
                               imported with speculative.medusa.heads: medusa/)
ngram and none need no checkpoint beyond the target.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from trtspec import artifacts
from trtspec.artifacts import Layout, StageResult
from trtspec.convert import draft as draft_checks
from trtspec.convert import fp8, reports
from trtspec.convert.eagle3.distributed import Dist
from trtspec.convert.progress import Phase, Reporter
from trtspec.convert.target import copy_checkpoint, load_causal_lm, resolve_target, write_target
from trtspec.errors import IncompatibleArtifactError
from trtspec.prompts import prompt_texts, prompts_sha256

FP8_EVAL_PROMPTS = 8


def planned_kinds(spec) -> list[str]:
    """The checkpoint kinds this spec produces, in order."""
    kinds = ["target"]
    if spec.quantization.fp8:
        kinds += ["target-fp8", "target-fp8-trtllm"]
    if spec.speculative.mode == "eagle3":
        kinds.append("eagle3")
    if spec.speculative.mode == "draft-target" or _first_layers_draft(spec):
        kinds += ["draft"] + (["draft-fp8"] if spec.quantization.fp8 else [])
    if spec.speculative.mode == "medusa":
        kinds.append("medusa")
    return kinds


def run_convert(spec, *, report: Reporter | None = None, dry_run: bool = False, eval_prompts_path: str | None = None,
                eval_tokens: int = 48, dist: Dist | None = None, placement=None) -> list[StageResult]:
    """Run every stage the spec asks for; each one skips itself when its inputs are unchanged.

    In a data-parallel run (`dist`) rank 0 runs the single-process stages (target, FP8, draft)
    while the others wait; every rank then runs the eagle3 stage together. `placement` (device
    and autocast dtype) is resolved by the caller for eagle3; None resolves it here.
    """
    dist = dist or Dist()
    layout = Layout.from_spec(spec)
    results: list[StageResult] = []
    target: tuple[Path, str] | None = None
    if dist.is_main:
        info = resolve_target(spec.model.source, trust_remote_code=spec.model.trust_remote_code)
        results.append(write_target(info, layout.checkpoint("target"), source=spec.model.source, dry_run=dry_run))
        # Later stages read the recorded target (its own path) but key on the source's weights hash.
        target = (layout.checkpoint("target") if results[0].status != "planned" else info.path, info.sha256)
        calibration = prompt_texts(spec.quantization.calibration_prompts, "calibration")
        fp8_eval = prompt_texts(spec.speculative.eagle3.prompts, "train", limit=FP8_EVAL_PROMPTS)
        if spec.quantization.fp8:
            results += run_fp8(spec, layout, target[0], target[1], calibration, fp8_eval,
                               kind="target", report=report, dry_run=dry_run)
        if spec.speculative.mode == "draft-target":
            results += run_draft(spec, layout, target[0], target[1], calibration, fp8_eval,
                                 report=report, dry_run=dry_run)
        if _first_layers_draft(spec):
            results += run_first_layers(spec, layout, target[0], target[1], calibration, fp8_eval,
                                        report=report, dry_run=dry_run)
    target_dir, target_sha = dist.broadcast(target)
    if spec.speculative.mode == "medusa" and dist.is_main:  # imported or trained: convert/medusa
        from trtspec.convert.medusa.stage import run_medusa

        results.append(run_medusa(spec, layout, target_dir, target_sha, dry_run=dry_run, report=report))
    settings = spec.speculative.eagle3
    if spec.speculative.mode == "eagle3" and settings.head and not (settings.data or settings.prompts):
        if dist.is_main:  # an existing head, imported (no data to fine-tune it on): eagle3.heads.stage
            from trtspec.convert.eagle3.heads.stage import run_head_import

            results.append(run_head_import(spec, layout, target_dir, target_sha, dry_run=dry_run,
                                           eval_prompts=held_out_prompts(spec, eval_prompts_path),
                                           eval_tokens=eval_tokens))
    elif spec.speculative.mode == "eagle3":
        from trtspec.convert.eagle3.device import placement as resolve_placement
        from trtspec.convert.eagle3.sources import DataSource
        from trtspec.convert.eagle3.stage import run_eagle3

        settings = spec.speculative.eagle3
        # rank 0 validates and fingerprints the data once; the others stream it later
        source = dist.broadcast(DataSource.from_settings(settings.data, settings.prompts).scan()
                                if dist.is_main else None)
        held_out = held_out_prompts(spec, eval_prompts_path)
        placement = placement or resolve_placement(settings.device, settings.train_dtype, local_rank=dist.local_rank)
        results.append(run_eagle3(spec, layout, target_dir, target_sha, source, held_out, placement=placement,
                                  dist=dist, report=report, dry_run=dry_run, eval_tokens=eval_tokens))
    return results


def held_out_prompts(spec, eval_prompts_path: str | None) -> list[str]:
    """Prompts for the EAGLE-3 acceptance report: the user's file, else 12 packaged calibration
    prompts (EAGLE-3 training never sees the calibration set)."""
    if eval_prompts_path:
        return prompt_texts(eval_prompts_path, "calibration")
    return prompt_texts(spec.quantization.calibration_prompts, "calibration", limit=12)


def run_fp8(spec, layout: Layout, source_dir: Path, source_sha: str, calibration: list[str], eval_prompts: list[str],
            *, kind: str, report: Reporter | None, dry_run: bool, target_sha: str | None = None) -> list[StageResult]:
    """FP8 PTQ of `source_dir` -> `<kind>-fp8` (HF) and, for the target, `target-fp8-trtllm`."""
    stored = fp8.stored_quantized(source_dir)
    if stored:  # the release's own scales are what TensorRT-LLM and the cpu engine read (block_fp8)
        raise IncompatibleArtifactError(f"{source_dir}: the {kind} is stored quantized already ({stored}); "
                                        "quantization.fp8 would quantize it a second time",
                                        fix="convert and build without --fp8 (quantization.fp8: false): its own "
                                            "quantized weights are served as they are")
    quant = spec.quantization
    prompts = calibration[:quant.calibration_size]
    inputs = {"source_sha256": source_sha, "calibration_sha256": prompts_sha256(prompts),
              "fp8_kv_cache": quant.fp8_kv_cache, "dtype": spec.model.dtype}
    trtllm_inputs = {**inputs, "tp_size": spec.build.tp_size, "pp_size": spec.build.pp_size}
    outputs = {f"{kind}-fp8": inputs}
    if kind == "target":
        outputs["target-fp8-trtllm"] = trtllm_inputs
    answers = {name: artifacts.settled(name, layout.checkpoint(name), key, dry_run=dry_run)
               for name, key in outputs.items()}
    results = sorted((a for a in answers.values() if a), key=lambda a: a.status != "skipped")  # skipped first
    pending = {name: layout.checkpoint(name) for name, answer in answers.items() if answer is None}
    if not pending:  # all up to date, or a dry run
        return results
    import copy

    original, tokenizer = load_causal_lm(source_dir, dtype=spec.model.dtype, trust_remote_code=spec.model.trust_remote_code)
    quantized = copy.deepcopy(original)
    phase = Phase(report, f"FP8 calibration ({kind})", total=len(prompts), unit="prompts")
    fp8.quantize_fp8(quantized, tokenizer, prompts, fp8_kv_cache=quant.fp8_kv_cache, on_prompt=phase.advance)
    quality = reports.fp8_quality(original, quantized, tokenizer, eval_prompts)
    quality["calibration_prompts"] = len(prompts)
    common = {"source": str(source_dir), "source_sha256": source_sha, "settings": quant.model_dump(mode="json"),
              "report": quality}
    if target_sha:  # a quantized draft still belongs to one target
        common["target_sha256"] = target_sha
    for name, final in pending.items():
        with artifacts.atomic_dir(final) as staging:
            if name.endswith("-trtllm"):
                fp8.export_trtllm(quantized, staging, tp_size=spec.build.tp_size, pp_size=spec.build.pp_size)
            else:
                fp8.export_hf(quantized, tokenizer, staging)
            manifest = artifacts.write_manifest(staging, name, weights_sha256=artifacts.weights_sha256(staging),
                                                inputs=outputs[name], **common)
        results.append(StageResult(name, final, "written", manifest, quality))
    layout.reports.mkdir(parents=True, exist_ok=True)
    artifacts.write_json(layout.report_dir(f"convert-{kind}-fp8.json"), quality)
    return results


def run_draft(spec, layout: Layout, target_dir: Path, target_sha: str, calibration: list[str], eval_prompts: list[str],
              *, report: Reporter | None, dry_run: bool) -> list[StageResult]:
    """Check the draft against the target, record it as `draft` (+ `draft-fp8` with FP8)."""
    draft_info = resolve_target(spec.speculative.draft, trust_remote_code=spec.model.trust_remote_code)
    pairing = draft_checks.check_pair(target_dir, draft_info.path)
    final = layout.checkpoint("draft")
    inputs = {"source": spec.speculative.draft, "source_sha256": draft_info.sha256, "target_sha256": target_sha}
    if settled := artifacts.settled("draft", final, inputs, dry_run=dry_run):
        results = [settled]
    else:
        with artifacts.atomic_dir(final) as staging:
            copy_checkpoint(draft_info.path, staging)
            manifest = artifacts.write_manifest(
                staging, "draft", source=spec.speculative.draft, resolved_path=str(draft_info.path),
                target_sha256=target_sha, weights_sha256=artifacts.weights_sha256(staging), inputs=inputs,
                pairing=pairing, model=draft_info.summary())
        results = [StageResult("draft", final, "written", manifest, {"pairing": pairing})]
    if spec.quantization.fp8:
        source = final if results[0].status != "planned" else draft_info.path
        results += run_fp8(spec, layout, source, draft_info.sha256, calibration, eval_prompts, kind="draft",
                           report=report, dry_run=dry_run, target_sha=target_sha)
    return results


def _first_layers_draft(spec) -> bool:
    """mode layerskip on a GPU backend, which drafts with a first-layers copy (no early exit upstream)."""
    from trtspec import backends

    return spec.speculative.mode == "layerskip" and backends.row(spec.build.backend).gpu


def run_first_layers(spec, layout: Layout, target_dir: Path, target_sha: str, calibration: list[str],
                     eval_prompts: list[str], *, report: Reporter | None, dry_run: bool) -> list[StageResult]:
    """The target's first E layers as `draft` (+ `draft-fp8` with FP8), as run_draft records a draft."""
    from trtspec.convert.first_layers import exit_layer, write_first_layers

    layers = exit_layer(spec.speculative.layerskip.exit_layer, artifacts.read_json(target_dir / "config.json"))
    final = layout.checkpoint("draft")
    inputs = {"source": "first-layers", "num_layers": layers, "target_sha256": target_sha}
    if settled := artifacts.settled("draft", final, inputs, dry_run=dry_run):
        results = [settled]
    else:
        with artifacts.atomic_dir(final) as staging:
            kept = write_first_layers(target_dir, staging, layers)
            manifest = artifacts.write_manifest(
                staging, "draft", source=f"first {layers} layers of {target_dir}", resolved_path=str(target_dir),
                target_sha256=target_sha, weights_sha256=artifacts.weights_sha256(staging), inputs=inputs,
                first_layers=kept)
        results = [StageResult("draft", final, "written", manifest, {"first_layers": kept})]
    if spec.quantization.fp8:  # keyed on the copy's own weights (a dry run has none yet)
        draft_sha = (results[0].manifest or {}).get("weights_sha256") or f"first-{layers}-of-{target_sha}"
        source = final if results[0].status != "planned" else target_dir
        results += run_fp8(spec, layout, source, draft_sha, calibration, eval_prompts, kind="draft",
                           report=report, dry_run=dry_run, target_sha=target_sha)
    return results


def summary(results: list[StageResult]) -> dict[str, Any]:
    return {"checkpoints": [result.to_dict() for result in results]}
