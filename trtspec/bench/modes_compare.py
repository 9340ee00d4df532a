"""`trtspec bench --compare-modes`: every speculative mode on the user's own prompts, in one run.

One target in process (the cpu engine bundle's weights, loaded once), plain decoding and each
mode's drafter over it: every mode is an engine variant (bench.targets.mode_variant) with its own
scheduler and cache, sharing the target's modules, so the modes differ only in how they draft.
They run interleaved block by block with the plain-decoding baseline (bench.load.run_variants),
each with its draft length fixed at every batch size to the mode's own cap (`draft_cap`: suffix
decoding's speculative.suffix.max_draft_len, Medusa's tree nodes, else the shared max_draft_len),
and the report says per mode: that cap, the acceptance length (tokens per target pass of a
draft), the per-position acceptance, tokens/s, and tokens/s over plain decoding as the median of
per-repeat ratios measured in the same run.

A mode whose artifacts are missing (no EAGLE-3 head, no Medusa heads, no draft checkpoint, a
target without MTP layers) gets a row that says so and what to run; it is not measured. Drafters
are built as the engine builds its own (runtime.drafters.registry.make_drafter with the bundle's
options and the target's prepacked kernels); the engine's own mode reuses its drafter.

Contract: reads the engine bundle and the spec's checkpoint layout; writes only modes.json in
the report directory; prints nothing (render_text gives the terminal table).
"""

from __future__ import annotations

import json
import math
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from trtspec import artifacts, modes
from trtspec.errors import TrtSpecError

BASELINE = "none"
# what to run where a mode's artifact is missing ({path}: where trtspec looked)
MISSING = {
    "eagle3": "no EAGLE-3 head at {path}; run `trtspec convert --mode eagle3` (or --head DIR to import one)",
    "medusa": "no Medusa heads at {path}; run `trtspec convert --mode medusa` (or speculative.medusa.heads to import)",
    "draft-target": "no draft checkpoint at {path}; set speculative.draft and run `trtspec convert --mode "
                    "draft-target`",
}
NO_MTP = ("the target has no MTP layers (config num_nextn_predict_layers); mode mtp drafts with a checkpoint's own "
          "MTP module (DeepSeek-V3/R1, GLM-4.5)")


def parse_modes(value: str) -> list[str]:
    """--compare-modes: 'all' (every mode but none) or comma-separated mode names, in table order."""
    asked = [part.strip() for part in value.split(",") if part.strip()]
    if asked == ["all"]:
        return [name for name in modes.NAMES if name != BASELINE]
    unknown = [name for name in asked if name not in modes.NAMES or name == BASELINE]
    if unknown or not asked:
        named = ", ".join(unknown) if unknown else repr(value)
        raise TrtSpecError(f"--compare-modes: unknown mode {named} (plain decoding always runs)",
                           fix=f"use all, or some of {', '.join(n for n in modes.NAMES if n != BASELINE)}")
    return [name for name in modes.NAMES if name in asked]


def artifact_dirs(spec: Any, engine_dir: Path, engine_mode: str) -> dict[str, Path]:
    """Where each mode's artifact is: the bundle's own draft/ for its mode, else the spec's checkpoints."""
    from trtspec.artifacts import Layout

    layout = Layout.from_spec(spec)
    found = {"eagle3": layout.checkpoint("eagle3"), "medusa": layout.checkpoint("medusa"),
             "draft-target": layout.checkpoint("draft")}
    bundle = json.loads((engine_dir / artifacts.ENGINE_JSON).read_text())
    if bundle.get("draft") and engine_mode in found:
        found[engine_mode] = engine_dir / bundle["draft"]["path"]
    return found


def drafters(engine: Any, engine_dir: Path, wanted: Sequence[str], dirs: dict[str, Path]
             ) -> tuple[dict[str, Any], dict[str, str]]:
    """({mode: drafter}, {mode: why it is skipped}) for `wanted`, built over `engine`'s target."""
    from trtspec.runtime.checkpoints.parts import _linear_kernels, load_causal_lm
    from trtspec.runtime.drafters.registry import DRAFTER_OPTIONS, DrafterParts, make_drafter
    from trtspec.runtime.forward.prepack import prepack_linears

    runtime = json.loads((engine_dir / artifacts.ENGINE_JSON).read_text()).get("runtime") or {}
    kernels = _linear_kernels(runtime.get("dtype", "float32"), runtime.get("prepack", True))

    def prepack(module: Any) -> None:  # the drafter's linear layers on the target's kernels, as engine_parts does
        if runtime.get("prepack", True):
            prepack_linears(module, kernels)

    def load(path: Any) -> Any:
        model = load_causal_lm(path)
        prepack(model)
        return model

    made, skipped = {}, {}
    for mode in wanted:
        if mode == engine.mode and engine.drafter is not None:
            made[mode] = engine.drafter
            continue
        if mode in MISSING and not (dirs[mode] / "config.json").is_file():
            skipped[mode] = MISSING[mode].format(path=dirs[mode])
            continue
        if mode == "mtp" and not getattr(engine.target.config, "num_nextn_predict_layers", 0):
            skipped[mode] = NO_MTP
            continue
        options = {key: runtime[key] for key in DRAFTER_OPTIONS.get(mode, ()) if runtime.get(key) is not None}
        if mode == "ngram":
            options = {key: runtime.get(key, default) for key, default in (("ngram_min", 1), ("ngram_max", 3))}
        try:
            made[mode] = make_drafter(DrafterParts(mode, engine.target, dirs.get(mode), load, prepack, options))
        except TrtSpecError as error:  # a head for another target, an exit layer too deep: said, not measured
            skipped[mode] = f"{error.problem}; {error.fix}" if error.fix else error.problem
    return made, skipped


# the settings each drafter was built with, as the spec names them (the report's `settings`)
SETTINGS = {"ngram": ("ngram_min", "ngram_max"), "lookahead": ("window", "ngram", "verification_set"),
            "layerskip": ("exit_layer",), "medusa": ("num_heads",), "suffix": ("depth", "max_cached_requests")}
# what else a row must say to be read: the draft model's depth (a first-layers copy drafts as
# layerskip does), the nodes of Medusa's static tree (it drafts them all, not a chain)
DRAWN: dict[str, dict[str, Callable[[Any], Any]]] = {
    "draft-target": {"draft_layers": lambda drafter: drafter.model.config.num_hidden_layers},
    "medusa": {"tree_nodes": lambda drafter: drafter.tree.num_nodes},
    "suffix": {"tree": lambda drafter: drafter.use_tree}}


def settings(mode: str, drafter: Any) -> dict[str, Any]:
    """{name: value} of the drafter's own settings (empty for a mode without any listed)."""
    own = {name: getattr(drafter, name) for name in SETTINGS.get(mode, ()) if hasattr(drafter, name)}
    return own | ({name: read(drafter) for name, read in DRAWN.get(mode, {}).items()} if drafter is not None else {})


def draft_cap(drafter: Any, shared: int) -> int:
    """The draft length a mode runs at here: the drafter's own cap (suffix decoding's
    max_draft_len, from speculative.suffix), its own static tree's nodes (Medusa: the draft), else
    the `shared` max_draft_len."""
    own = getattr(drafter, "max_draft_len", None)
    return own if own else max(shared, getattr(getattr(drafter, "tree", None), "num_nodes", 0))


def shared_cap(spec: Any, engine: Any) -> int:
    """The max_draft_len modes without their own cap run at: the engine's, unless the engine's mode
    has its own (a suffix engine is built for suffix's cap), then the spec's speculative.max_draft_len."""
    return spec.speculative.max_draft_len if modes.row(engine.mode).own_draft_cap else engine.max_draft_len


def measure(engine: Any, made: dict[str, Any], prompts: Sequence[Any], *, max_draft_len: int, concurrency: list[int],
            max_tokens: int, repeats: int, temperature: float = 0.0, on_request: Callable | None = None,
            records: list | None = None) -> list[dict[str, Any]]:
    """summarize_cell results of plain decoding and every mode in `made` (each at its `draft_cap`,
    `max_draft_len` the shared one), interleaved; each request's RequestRecord appended to
    `records` where given."""
    from trtspec.bench.load import run_variants
    from trtspec.bench.metrics import group_cells, summarize_cell
    from trtspec.bench.targets import EngineTarget, mode_variant

    engines = {mode: mode_variant(engine, mode, drafter, draft_cap(drafter, max_draft_len))
               for mode, drafter in made.items()}
    variants: dict[str, tuple[Any, bool]] = {BASELINE: (EngineTarget(engine), False)}
    variants.update({mode: (EngineTarget(variant), True) for mode, variant in engines.items()})
    try:
        run = run_variants(variants, prompts, concurrency, max_tokens=max_tokens, repeats=repeats,
                           temperature=temperature, on_request=on_request)
    finally:
        for variant in engines.values():
            variant.close()
    if records is not None:
        records.extend(run.records)
    return [summarize_cell(cell) for cell in group_cells(run.records, run.durations, order=list(variants))]


def mode_rows(results: Sequence[dict[str, Any]], wanted: Sequence[str], skipped: dict[str, str],
              made: dict[str, Any] | None = None, caps: dict[str, int] | None = None) -> list[dict[str, Any]]:
    """One row per mode and concurrency (plain decoding first): its draft cap, tokens/s, its ratio
    to plain decoding (median of per-repeat ratios, and the repeats), acceptance length,
    per-position acceptance."""
    from trtspec.bench.metrics import speedups

    rows = []
    for concurrency in sorted({r["max_concurrency"] for r in results}):
        cells = {r["variant"]: r for r in results if r["max_concurrency"] == concurrency}
        for mode in [BASELINE, *wanted]:
            if mode in skipped:
                rows.append({"mode": mode, "concurrency": concurrency, "skipped": skipped[mode]})
                continue
            cell = cells[mode]
            ratio = speedups(results, numerator=mode, denominator=BASELINE)
            ratio_cell = next((s for s in ratio if s["max_concurrency"] == concurrency), {})
            rows.append({"mode": mode, "concurrency": concurrency,
                         "max_draft_len": 0 if mode == BASELINE else (caps or {}).get(mode),
                         "settings": settings(mode, (made or {}).get(mode)) if mode != BASELINE else {},
                         "output_throughput": cell["output_throughput"],
                         "output_throughput_by_repeat": cell["output_throughput_by_repeat"],
                         "speedup": 1.0 if mode == BASELINE else ratio_cell.get("output_throughput_speedup", math.nan),
                         "speedup_by_repeat": [] if mode == BASELINE else ratio_cell.get(
                             "output_throughput_speedup_by_repeat", []),
                         "mean_tpot_ms": cell["mean_tpot_ms"],
                         "acceptance_length": cell.get("spec_decode_acceptance_length", math.nan),
                         "acceptance_rate": cell.get("spec_decode_acceptance_rate", math.nan),
                         "per_position_acceptance": cell.get("spec_decode_per_position_acceptance_rates"),
                         "completed": cell["completed"], "failed": cell["failed"]})
    return rows


def run(spec: Any, engine_dir: Path, wanted: Sequence[str], prompts: Sequence[Any], *, concurrency: list[int],
        max_tokens: int, repeats: int, temperature: float, out_dir: Path, prompts_source: str,
        on_request: Callable | None = None) -> tuple[dict[str, Any], Path]:
    """Load the bundle, build every mode's drafter, measure, and write <out_dir>/modes.json."""
    import sys

    from trtspec.bench.report import clean_json, machine_metadata
    from trtspec.runtime import load_engine

    started = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
    engine = load_engine(engine_dir)
    try:
        made, skipped = drafters(engine, engine_dir, wanted, artifact_dirs(spec, engine_dir, engine.mode))
        shared = shared_cap(spec, engine)
        caps = {mode: draft_cap(drafter, shared) for mode, drafter in made.items()}
        records: list[Any] = []
        results = measure(engine, made, prompts, max_draft_len=shared, concurrency=concurrency,
                          max_tokens=max_tokens, repeats=repeats, temperature=temperature, on_request=on_request,
                          records=records)
        max_seq_len = engine.config.max_seq_len
    finally:
        engine.close()
    report = clean_json({
        "metadata": {"model": spec.model_name, "engine": str(engine_dir), "engine_mode": engine.mode,
                     "modes": list(wanted), "max_draft_len": shared, "max_draft_lens": caps,
                     "num_prompts": len(prompts),
                     "prompts": prompts_source, "concurrency": concurrency, "max_tokens": max_tokens,
                     "temperature": temperature, "repeats": repeats, "started": started,
                     "command": " ".join(sys.argv),
                     "method": "plain decoding and each mode's drafter over the same target weights, interleaved "
                               "in ABBA blocks; draft length fixed at every batch size to the mode's own cap "
                               "(max_draft_lens); tokens/s = median over "
                               "repeats; speedup = median of per-repeat ratios to plain decoding",
                     "machine": machine_metadata()},
        "modes": mode_rows(results, list(wanted), skipped, made, caps), "results": results,
        **per_mode_sections(records, [m for m in wanted if m in made], max_seq_len)})
    out_dir.mkdir(parents=True, exist_ok=True)
    path = out_dir / "modes.json"
    artifacts.write_json(path, report)
    return report, path


def per_mode_sections(records: Sequence[Any], measured: Sequence[str], max_seq_len: int | None) -> dict[str, Any]:
    """Per mode against plain decoding: `by_category` (bench.metrics.by_category) and
    `by_context_length` (bench.context_buckets), keyed by mode."""
    from trtspec.bench.context_buckets import by_context_length
    from trtspec.bench.table_rows import by_category

    return {"by_category": {mode: by_category(records, mode, BASELINE) for mode in measured},
            "by_context_length": {mode: by_context_length(records, max_seq_len, mode, BASELINE) for mode in measured}}


def render_text(report: dict[str, Any]) -> str:
    """The per-mode table for the terminal: one line per mode and concurrency."""
    meta = report["metadata"]
    lines = [f"{meta['model']}: every mode against plain decoding, {meta['num_prompts']} prompts x {meta['repeats']}, "
             f"{meta['max_tokens']} tokens, each mode's draft length fixed at its cap (k)",
             f"{'conc':>4}  {'mode':<13} {'k':>3} {'tok/s':>7} {'vs plain':>9}  {'AL':>5}  per-position acceptance"]
    for row in report["modes"]:
        if "skipped" in row:
            lines.append(f"{row['concurrency']:>4}  {row['mode']:<13} skipped: {row['skipped']}")
            continue
        positions = " ".join(f"{p:.2f}" for p in row.get("per_position_acceptance") or []) or "-"
        al = row.get("acceptance_length")
        cap = row.get("max_draft_len")
        lines.append(f"{row['concurrency']:>4}  {row['mode']:<13} {cap if cap is not None else '-':>3} "
                     f"{_number(row.get('output_throughput'), 7, 1)} "
                     f"{_number(row.get('speedup'), 8, 2)}x  {_number(al, 5, 2)}  {positions}")
    for title, key, name in (("by prompt category", "by_category", "category"),
                             ("by context length (prompt tokens)", "by_context_length", "bucket")):
        sections = report.get(key) or {}
        if sections:
            lines.append(f"{title}: per-user tokens/s over plain decoding (AL)")
        for mode, section in sections.items():
            rows = section["rows"] if isinstance(section, dict) else section
            several = len({r["max_concurrency"] for r in rows}) > 1
            cells = [(f"c{r['max_concurrency']} " if several else "") + f"{r[name]} "
                     f"{_number(r.get('speedup'), 0, 2)}x ({_number(r.get('spec_decode_acceptance_length'), 0, 2)})"
                     for r in rows]
            lines.append(f"  {mode:<13} " + ", ".join(cells))
    return "\n".join(lines)


def _number(value: Any, width: int, digits: int) -> str:
    return f"{'-':>{width}}" if value is None or (isinstance(value, float) and math.isnan(value)) else \
        f"{value:>{width}.{digits}f}"
