"""`trtspec tune`: measure tokens/s for each max_draft_len and record the fastest in the spec.

Choosing by tokens/s, not by acceptance length: a longer draft always raises the acceptance
length but also the cost of each verification pass, so the best length is where the two meet
on this machine (reference §2.2, Theorem 3.8; vLLM#20780 saw AL rise to K=7 while TPOT was best
at K=4). Every candidate shares the engine's weights, runs the same prompts in interleaved
blocks (load.run_variants), and the plain-decoding baseline runs beside them.

The spec is rewritten line by line, so comments and layout survive; the old file is kept as
`<name>.bak`. Only `speculative.max_draft_len` changes.
"""

from __future__ import annotations

import math
import os
import re
import shutil
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from trtspec.errors import SpecError, TrtSpecError

BASELINE_LABEL = "baseline"


def label(draft_len: int) -> str:
    return f"max_draft_len={draft_len}"


def choose_draft_len(rows: Sequence[dict[str, Any]]) -> dict[str, Any]:
    """The row with the highest output tokens/s; on an exact tie the shorter draft (cheaper).

    rows: {"max_draft_len": int, "output_throughput": float, ...}; NaN rows never win.
    """
    valid = [r for r in rows if r.get("max_draft_len") and not math.isnan(r.get("output_throughput", math.nan))]
    if not valid:
        raise TrtSpecError("tune: no draft length produced a measurement",
                           fix="check the engine with `trtspec generate` and re-run tune")
    return max(valid, key=lambda r: (r["output_throughput"], -r["max_draft_len"]))


_SECTION = re.compile(r"^speculative:\s*(#.*)?$")
_TOP_LEVEL = re.compile(r"^[^\s#]")
_FIELD = re.compile(r"^(?P<indent>[ \t]+)max_draft_len:(?P<space>\s*)(?P<value>[^#\n]*?)(?P<rest>\s*(#.*)?)$")


def set_draft_len_text(text: str, draft_len: int) -> str:
    """The spec text with speculative.max_draft_len set, every other line unchanged.

    Handles a block-style `speculative:` section (field present or not) and a file without the
    section. A flow-style section (`speculative: {...}`) raises: rewriting it would lose comments.
    """
    lines = text.splitlines(keepends=True)
    start = next((i for i, line in enumerate(lines) if _SECTION.match(line.rstrip("\r\n"))), None)
    if start is None:
        if any(line.startswith("speculative:") for line in lines):
            raise SpecError(["speculative: written in flow style; tune rewrites block-style sections only "
                             "(put each key on its own line)"])
        newline = "" if not text or text.endswith("\n") else "\n"
        return f"{text}{newline}speculative:\n  max_draft_len: {draft_len}\n"
    end = next((i for i in range(start + 1, len(lines)) if _TOP_LEVEL.match(lines[i])), len(lines))
    child_indent = None
    for i in range(start + 1, end):
        stripped = lines[i].rstrip("\r\n")
        if not stripped.strip() or stripped.lstrip().startswith("#"):
            continue
        indent = stripped[: len(stripped) - len(stripped.lstrip())]
        child_indent = child_indent or indent
        match = _FIELD.match(stripped)
        if match and match["indent"] == child_indent:
            eol = lines[i][len(stripped):]
            lines[i] = f"{match['indent']}max_draft_len:{match['space'] or ' '}{draft_len}{match['rest']}{eol}"
            return "".join(lines)
    lines.insert(start + 1, f"{child_indent or '  '}max_draft_len: {draft_len}\n")
    return "".join(lines)


def write_draft_len(spec_path: str | Path, draft_len: int) -> Path:
    """Record the choice in the spec file, keeping the old file as <name>.bak. Returns the backup.

    The new text is validated (it must load as a valid Spec with the new value) before anything
    is written; the write is a rename, so an interrupted tune never leaves half a spec.
    """
    import yaml

    from trtspec.spec import validate_spec

    path = Path(spec_path)
    text = path.read_text() if path.exists() else ""
    new_text = set_draft_len_text(text, draft_len)
    resolved = validate_spec(yaml.safe_load(new_text) or {})
    if resolved.speculative.max_draft_len != draft_len:
        raise SpecError([f"speculative.max_draft_len: rewriting {path} did not take effect; edit it by hand "
                         f"(got {resolved.speculative.max_draft_len})"])
    backup = path.with_name(path.name + ".bak")
    if path.exists():
        shutil.copy2(path, backup)
    staging = path.with_name(f".{path.name}.tune-{os.getpid()}")
    staging.write_text(new_text)
    os.replace(staging, path)
    return backup


def tune_rows(report_results: Sequence[dict[str, Any]]) -> tuple[list[dict[str, Any]], dict[str, Any] | None]:
    """Per-draft-length rows (tokens/s, TPOT, AL, speedup over baseline) from summarize_cell results."""
    baseline = next((r for r in report_results if r["variant"] == BASELINE_LABEL), None)
    rows = []
    for result in report_results:
        if not result["variant"].startswith("max_draft_len="):
            continue
        draft_len = int(result["variant"].split("=", 1)[1])
        base = baseline["output_throughput"] if baseline else math.nan
        rows.append({"max_draft_len": draft_len, "output_throughput": result["output_throughput"],
                     "output_throughput_by_repeat": result["output_throughput_by_repeat"],
                     "mean_tpot_ms": result["mean_tpot_ms"],
                     "spec_decode_acceptance_length": result.get("spec_decode_acceptance_length", math.nan),
                     "spec_decode_acceptance_rate": result.get("spec_decode_acceptance_rate", math.nan),
                     "speedup": result["output_throughput"] / base if base and not math.isnan(base) else math.nan})
    return sorted(rows, key=lambda r: r["max_draft_len"]), baseline


def measure(engine: Any, prompts: Sequence[Any], draft_lens: Sequence[int], *, max_tokens: int, concurrency: int,
            repeats: int, on_request=None) -> dict[str, Any]:
    """Run every draft length (sharing the engine's weights) and the baseline, interleaved."""
    from trtspec.bench.load import run_variants
    from trtspec.bench.metrics import group_cells, summarize_cell
    from trtspec.bench.targets import EngineTarget, engine_with_draft_len

    variants = {label(k): (EngineTarget(engine_with_draft_len(engine, k)), True) for k in draft_lens}
    variants[BASELINE_LABEL] = (EngineTarget(engine), False)
    run = run_variants(variants, prompts, [concurrency], max_tokens=max_tokens, repeats=repeats,
                       on_request=on_request)
    results = [summarize_cell(cell) for cell in group_cells(run.records, run.durations)]
    rows, baseline = tune_rows(results)
    return {"rows": rows, "baseline": baseline, "choice": choose_draft_len(rows), "records": run.records}
