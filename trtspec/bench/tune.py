"""`trtspec tune`: measure tokens/s per draft shape and record the fastest in the spec.

Candidates are chains of max_draft_len tokens and, for EAGLE-3, static draft trees
(`eagle_choices`, index paths as TensorRT-LLM writes them) and dynamic (EAGLE-2) trees
(`speculative.tree` shapes: topk, depth, num_draft_tokens; a draft model grows them too). Choosing by tokens/s, not by
acceptance length: a longer draft or a wider tree always raises the acceptance length but also
the cost of each verification pass, so the best shape is where the two meet on this machine
(reference §2.2, Theorem 3.8; vLLM#20780 saw AL rise to K=7 while TPOT was best at K=4). Every
candidate shares the engine's weights, runs the same prompts in interleaved blocks
(load.run_variants), and the plain-decoding baseline runs beside them.

With several concurrencies (`--concurrency 1,2,4,8`) every shape runs at each of them and the
result is a table: per concurrency the fastest draft length, 0 where plain decoding (the
baseline, measured in the same run) was faster; with dynamic-tree candidates, per concurrency the
fastest of the chains and the dynamic trees (a tree row: [concurrency, topk, depth, num_draft_tokens]),
so a tree that wins alone gives way to a chain, or to nothing, as the batch fills. It goes into `speculative.draft_len_schedule`,
from which the engine picks each step's draft length by its batch size
(trtspec.runtime.policy.by_load). Every candidate runs with its draft length fixed at every batch
size, so the table measures exactly the choice the engine will make.

The spec is rewritten line by line, so comments and layout survive; the old file is kept as
`<name>.bak`. Only `speculative.max_draft_len` (and, for EAGLE-3, `speculative.eagle_choices` and
`speculative.tree`; with several concurrencies `speculative.draft_len_schedule`; for layerskip
`speculative.layerskip.exit_layer`) change.

LayerSkip: the exit layer E is a candidate's other half. Each E (a few of L/8 .. L/2, or the ones
asked for) is an engine variant over the same target weights with its own LayerSkipDrafter (a view
of the target's first E layers, so no weight memory), measured at each draft length in the same
interleaved run as the baseline; the fastest (E, length) is written. When even that one is slower
than plain decoding, its speedup below 1 is reported and written into tune.json as measured.
"""

from __future__ import annotations

import json
import math
import os
import re
import shutil
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from trtspec.errors import SpecError, TrtSpecError

BASELINE_LABEL = "baseline"
# Small trees for a CPU, where every extra node costs verification time: 3, 5 and 7 nodes.
DEFAULT_TREES: list[list[list[int]]] = [
    [[0], [1], [0, 0]],
    [[0], [1], [0, 0], [1, 0], [0, 0, 0]],
    [[0], [1], [2], [0, 0], [0, 1], [0, 0, 0], [0, 0, 0, 0]],
]

# Dynamic (EAGLE-2) trees for a CPU: (topk, depth, num_draft_tokens); measured in docs/BENCHMARKS-log.md.
DEFAULT_TREE_SHAPES: list[list[int]] = [[4, 3, 8], [4, 4, 16]]


@dataclass(frozen=True)
class Candidate:
    """One draft shape: a chain of `max_draft_len`, or a tree (then max_draft_len = its nodes,
    as TensorRT-LLM counts draft tokens for EAGLE trees)."""

    max_draft_len: int
    eagle_choices: tuple[tuple[int, ...], ...] | None = None
    dynamic: tuple[int, int, int] | None = None  # a dynamic tree (topk, depth, num_draft_tokens); max_draft_len = depth
    exit_layer: int | None = None  # layerskip: the drafter's exit layer (its own LayerSkipDrafter)

    @property
    def label(self) -> str:
        if self.exit_layer is not None:
            return f"exit_layer={self.exit_layer},max_draft_len={self.max_draft_len}"
        if self.dynamic is not None:
            return "dynamic-tree=" + ",".join(map(str, self.dynamic))
        if self.eagle_choices is None:
            return f"max_draft_len={self.max_draft_len}"
        return "tree=" + json.dumps([list(p) for p in self.eagle_choices], separators=(",", ":"))

    @classmethod
    def tree(cls, paths: Sequence[Sequence[int]]) -> Candidate:
        unique = tuple(sorted({tuple(int(i) for i in p) for p in paths}, key=lambda p: (len(p), p)))
        return cls(len(unique), unique)


def candidates(draft_lens: Sequence[int], trees: Sequence[Sequence[Sequence[int]]] = (),
               shapes: Sequence[Sequence[int]] = (), exit_layers: Sequence[int] = ()) -> list[Candidate]:
    """Chains, static trees and dynamic tree shapes (topk, depth, num_draft_tokens); with
    `exit_layers` (layerskip) a chain of each length at each exit layer instead of plain chains."""
    if exit_layers:
        return [Candidate(k, exit_layer=int(e)) for e in exit_layers for k in draft_lens]
    dynamic = [Candidate(int(s[1]), dynamic=(int(s[0]), int(s[1]), int(s[2]))) for s in shapes]
    return [Candidate(k) for k in draft_lens] + [Candidate.tree(t) for t in trees] + dynamic


def bundle_layers(engine_dir: str | Path) -> int:
    """The decoder layers of a cpu engine bundle's target (its config.json), read without loading it."""
    from trtspec.artifacts import ENGINE_JSON

    bundle = json.loads((Path(engine_dir) / ENGINE_JSON).read_text()) if (Path(engine_dir) / ENGINE_JSON).is_file() \
        else None
    if bundle is None:
        raise TrtSpecError(f"{engine_dir}: no engine.json", fix="build it with `trtspec build --backend cpu`")
    return int(json.loads((Path(engine_dir) / bundle["target"]["path"] / "config.json").read_text())["num_hidden_layers"])


def exit_layer_candidates(num_layers: int, given: Sequence[int] | None = None) -> list[int]:
    """Exit layers to measure for layerskip: `given` (each must lie in 1..num_layers-1), else L/8,
    L/4, 3L/8 and L/2 of the target's L layers (LayerSkip's own recipes exit between a quarter and
    a half; a model not trained for early exit accepts little below that), duplicates dropped."""
    if given:
        bad = [e for e in given if not 1 <= e < num_layers]
        if bad:
            raise TrtSpecError(f"tune: exit layers {bad} lie outside 1..{num_layers - 1} (the target has "
                               f"{num_layers} decoder layers)", fix=f"pass --exit-layers below {num_layers}")
        return sorted(set(given))
    return sorted({min(num_layers - 1, max(1, num_layers * eighths // 8)) for eighths in (1, 2, 3, 4)})


def schedule_row(row: dict[str, Any], concurrency: int) -> list[int]:
    """A draft_len_schedule row for a tune row: [concurrency, draft_len] or, for a dynamic tree,
    [concurrency, topk, depth, num_draft_tokens]."""
    return [concurrency, *row["tree"]] if row.get("tree") else [concurrency, row["max_draft_len"]]


def choose(rows: Sequence[dict[str, Any]]) -> dict[str, Any]:
    """The row with the highest output tokens/s; on an exact tie the smaller draft (cheaper).

    rows: {"max_draft_len": int, "output_throughput": float, ...}; NaN rows never win.
    """
    valid = [r for r in rows if r.get("max_draft_len") and not math.isnan(r.get("output_throughput", math.nan))]
    if not valid:
        raise TrtSpecError("tune: no draft shape produced a measurement",
                           fix="check the engine with `trtspec generate` and re-run tune")
    return max(valid, key=lambda r: (r["output_throughput"], -r["max_draft_len"]))


_SECTION = re.compile(r"^speculative:\s*(#.*)?$")
_TOP_LEVEL = re.compile(r"^[^\s#]")


def set_field_text(text: str, key: str, value: str) -> str:
    """The spec text with `speculative.<key>: <value>` (value already YAML), other lines unchanged.

    `key` may name a field of a subsection (`layerskip.exit_layer`). Handles a block-style
    `speculative:` section (field present or not) and a file without the section. A flow-style
    section (`speculative: {...}`) raises: rewriting it would lose comments. A field spanning
    several lines (a block list) raises too.
    """
    lines = text.splitlines(keepends=True)
    start = next((i for i, line in enumerate(lines) if _SECTION.match(line.rstrip("\r\n"))), None)
    section, _, field = key.rpartition(".")
    if start is None:
        if any(line.startswith("speculative:") for line in lines):
            raise SpecError(["speculative: written in flow style; tune rewrites block-style sections only "
                             "(put each key on its own line)"])
        newline = "" if not text or text.endswith("\n") else "\n"
        body = f"  {section}:\n    {field}: {value}\n" if section else f"  {key}: {value}\n"
        return f"{text}{newline}speculative:\n{body}"
    end = next((i for i in range(start + 1, len(lines)) if _TOP_LEVEL.match(lines[i])), len(lines))
    if not section:
        return _set_in_block(lines, start, end, key, value, "  ", key)
    indent = _child_indent(lines, start, end) or "  "
    header = re.compile(rf"^{re.escape(indent)}{re.escape(section)}:(?P<value>[^#\n]*?)\s*(#.*)?$")
    found = next(((i, m) for i in range(start + 1, end) if (m := header.match(lines[i].rstrip("\r\n")))), None)
    if found is None:
        lines.insert(start + 1, f"{indent}{section}:\n{indent * 2}{field}: {value}\n")
        return "".join(lines)
    at, match = found
    if match["value"].strip():
        raise SpecError([f"speculative.{section}: written in flow style; tune rewrites block-style sections only "
                         f"(write {field}: {value} on its own line under {section}:)"])
    sub_end = next((i for i in range(at + 1, end) if lines[i].strip() and not lines[i].lstrip().startswith("#")
                    and len(lines[i]) - len(lines[i].lstrip()) <= len(indent)), end)
    return _set_in_block(lines, at, sub_end, field, value, indent * 2, key)


def _child_indent(lines: list[str], start: int, end: int) -> str | None:
    """The indent of the first field under the header at `start` (None: no field)."""
    for i in range(start + 1, end):
        stripped = lines[i].rstrip("\r\n")
        if stripped.strip() and not stripped.lstrip().startswith("#"):
            return stripped[: len(stripped) - len(stripped.lstrip())]
    return None


def _set_in_block(lines: list[str], start: int, end: int, key: str, value: str, default_indent: str,
                  full_key: str) -> str:
    """Set `key: value` among the fields of the block whose header is lines[start] (ending before
    `end`): the field's line rewritten in place (its comment kept), or a new line after the header."""
    field = re.compile(rf"^(?P<indent>[ \t]+){re.escape(key)}:(?P<space>\s*)(?P<value>[^#\n]*?)(?P<rest>\s*(#.*)?)$")
    child_indent = _child_indent(lines, start, end)
    for i in range(start + 1, end):
        stripped = lines[i].rstrip("\r\n")
        match = field.match(stripped)
        if match and child_indent is not None and match["indent"] == child_indent:
            following = lines[i + 1].rstrip("\r\n") if i + 1 < end else ""
            if not match["value"].strip() and following.strip() and len(following) - len(following.lstrip()) > len(
                    child_indent):
                raise SpecError([f"speculative.{full_key}: written over several lines; tune rewrites one-line "
                                 f"values only (write it as {key}: {value})"])
            eol = lines[i][len(stripped):]
            space, rest = match["space"] or " ", match["rest"]
            if not match["value"] and rest:  # `key:   # comment`: the whitespace went to space, keep the comment apart
                space, rest = " ", "  " + rest
            lines[i] = f"{match['indent']}{key}:{space}{value}{rest}{eol}"
            return "".join(lines)
    lines.insert(start + 1, f"{child_indent or default_indent}{key}: {value}\n")
    return "".join(lines)


def set_draft_len_text(text: str, draft_len: int) -> str:
    return set_field_text(text, "max_draft_len", str(draft_len))


def write_choice(spec_path: str | Path, draft_len: int, eagle_choices: Sequence[Sequence[int]] | None = None,
                 set_choices: bool = False, schedule: Sequence[Sequence[int]] | None = None,
                 tree: Sequence[int] | None = None, set_tree: bool | None = None,
                 extra: dict[str, str] | None = None) -> Path:
    """Record the choice in the spec file, keeping the old file as <name>.bak. Returns the backup.

    With `set_choices`, speculative.eagle_choices is written too (null for a chain), and so is
    speculative.tree with `set_tree` (default: as `set_choices`; a draft model grows dynamic trees
    but has no static ones); with
    `schedule`, speculative.draft_len_schedule; `extra` sets more speculative.<key>: <YAML value>
    (the served tune's acceptance gate). The new text is validated (it must load as a
    valid Spec with the new values) before anything is written; the write is a rename, so an
    interrupted tune never leaves half a spec.
    """
    import yaml

    from trtspec.spec.schema import validate_spec

    path = Path(spec_path)
    text = path.read_text() if path.exists() else ""
    new_text = set_draft_len_text(text, draft_len)
    loaded = yaml.safe_load(text) if text else None  # mode suffix: its own cap is what its engine is built for
    if isinstance(loaded, dict) and (loaded.get("speculative") or {}).get("mode") == "suffix":
        extra = {"suffix.max_draft_len": str(draft_len), **(extra or {})}
    choices = [list(p) for p in eagle_choices] if eagle_choices is not None else None
    set_tree = set_choices if set_tree is None else set_tree
    if set_choices:
        new_text = set_field_text(new_text, "eagle_choices", json.dumps(choices) if choices else "null")
    if set_tree:
        shape = dict(zip(("topk", "depth", "num_draft_tokens"), tree, strict=True)) if tree else None
        new_text = set_field_text(new_text, "tree", json.dumps(shape) if shape else "null")
    table = [[int(v) for v in row] for row in schedule] if schedule is not None else None
    if table is not None:
        new_text = set_field_text(new_text, "draft_len_schedule", json.dumps(table))
    for key, value in (extra or {}).items():
        new_text = set_field_text(new_text, key, value)
    resolved = validate_spec(yaml.safe_load(new_text) or {})
    took = resolved.speculative.max_draft_len == draft_len and (
        not set_choices or (resolved.speculative.eagle_choices or None) == choices) and (
        not set_tree or _tree_of(resolved.speculative.tree) == (list(tree) if tree else None)) and (
        table is None or resolved.speculative.draft_len_schedule == table) and all(
        _field(resolved.speculative, key) == yaml.safe_load(value) for key, value in (extra or {}).items())
    if not took:
        raise SpecError([f"speculative.max_draft_len: rewriting {path} did not take effect; edit it by hand "
                         f"(got {resolved.speculative.max_draft_len})"])
    backup = path.with_name(path.name + ".bak")
    if path.exists():
        shutil.copy2(path, backup)
    staging = path.with_name(f".{path.name}.tune-{os.getpid()}")
    staging.write_text(new_text)
    os.replace(staging, path)
    return backup


def _field(section: Any, key: str) -> Any:
    for name in key.split("."):  # layerskip.exit_layer: a subsection's field
        section = getattr(section, name)
    return section


def _tree_of(spec_tree: Any) -> list[int] | None:
    return [spec_tree.topk, spec_tree.depth, spec_tree.num_draft_tokens] if spec_tree is not None else None


@dataclass(frozen=True)
class Choice:
    """What a measure() result puts into the spec: the draft length (with a schedule, the longest
    it names; a tree row counts its depth), the static tree, the dynamic tree (only without a
    schedule) and the schedule."""

    max_draft_len: int
    eagle_choices: list[list[int]] | None
    tree: list[int] | None
    schedule: list[list[int]] | None
    exit_layer: int | None = None  # layerskip: speculative.layerskip.exit_layer

    @classmethod
    def of(cls, result: dict[str, Any]) -> Choice:
        choice, schedule = result["choice"], result["schedule"]
        lengths = [row[1] if len(row) == 2 else row[2] for row in (schedule or []) if row[-1]]  # a tree: its depth
        draft_len = max(lengths or [choice["max_draft_len"]]) if schedule else choice["max_draft_len"]
        return cls(draft_len, choice["eagle_choices"], choice.get("tree") if not schedule else None, schedule,
                   choice.get("exit_layer"))


def record(spec_path: Path, result: dict[str, Any], out: Path, *, set_choices: bool, set_tree: bool,
           context: dict[str, Any]) -> tuple[Choice, dict[str, Any]]:
    """The choice from `result` written into the spec (old file kept as .bak) and the report
    written to <out>/tune.json; (the choice, the report). `context`: engine, num_prompts, repeats,
    max_tokens and concurrency, as the report lists them."""
    from trtspec.artifacts import write_json
    from trtspec.bench.report import clean_json, machine_metadata

    chosen = Choice.of(result)
    layerskip = {"layerskip.exit_layer": str(chosen.exit_layer)} if chosen.exit_layer is not None else None
    backup = write_choice(spec_path, chosen.max_draft_len, chosen.eagle_choices, set_choices=set_choices,
                          schedule=chosen.schedule, tree=chosen.tree, set_tree=set_tree, extra=layerskip)
    # layerskip: which exit layer, and whether it beat plain decoding at all (a model not trained
    # for early exit often does not: then mode none is the honest choice, and tune says so)
    exit_layer = {"exit_layer": chosen.exit_layer, "speedup": result["choice"].get("speedup")} if layerskip else {}
    summary = clean_json({"choice": chosen.max_draft_len, "eagle_choices": chosen.eagle_choices, "tree": chosen.tree,
                          "draft_len_schedule": chosen.schedule, **exit_layer, "rows": result["rows"],
                          "baseline_output_throughput": (result["baseline"] or {}).get("output_throughput"),
                          **context, "spec": str(spec_path), "backup": str(backup), "machine": machine_metadata()})
    out.mkdir(parents=True, exist_ok=True)
    write_json(out / "tune.json", summary)
    return chosen, summary


def write_draft_len(spec_path: str | Path, draft_len: int) -> Path:
    return write_choice(spec_path, draft_len)


def tune_rows(report_results: Sequence[dict[str, Any]], shapes: Sequence[Candidate]
              ) -> tuple[list[dict[str, Any]], dict[int, dict[str, Any]]]:
    """One row per candidate and concurrency (tokens/s, TPOT, AL, speedup over the baseline at that
    concurrency) from summarize_cell results; and the baselines by concurrency."""
    by_key = {(r["variant"], r.get("max_concurrency", 1)): r for r in report_results}
    baselines = {c: r for (label, c), r in by_key.items() if label == BASELINE_LABEL}
    rows = []
    for concurrency in sorted({c for _, c in by_key}):
        base = baselines.get(concurrency, {}).get("output_throughput", math.nan)
        for shape in shapes:
            result = by_key.get((shape.label, concurrency))
            if result is None:
                continue
            rows.append({"concurrency": concurrency, "max_draft_len": shape.max_draft_len,
                         "eagle_choices": [list(p) for p in shape.eagle_choices] if shape.eagle_choices else None,
                         "tree": list(shape.dynamic) if shape.dynamic else None,
                         "output_throughput": result["output_throughput"],
                         "output_throughput_by_repeat": result["output_throughput_by_repeat"],
                         "mean_tpot_ms": result["mean_tpot_ms"],
                         "spec_decode_acceptance_length": result.get("spec_decode_acceptance_length", math.nan),
                         "spec_decode_acceptance_rate": result.get("spec_decode_acceptance_rate", math.nan),
                         "tokens_per_target_pass": result.get("tokens_per_target_pass", math.nan),
                         "speedup": result["output_throughput"] / base if base and not math.isnan(base) else math.nan,
                         **({"exit_layer": shape.exit_layer} if shape.exit_layer is not None else {})})
    return rows, baselines


def choose_schedule(rows: Sequence[dict[str, Any]], baselines: dict[int, dict[str, Any]]
                    ) -> tuple[dict[str, Any], list[list[int]]]:
    """(the shape chosen at the lowest concurrency, [[concurrency, draft_len], ...]).

    The lowest concurrency decides chain or static tree; at every concurrency the fastest draft
    length of that kind is taken, or 0 where the baseline measured beside it was faster. Chains and
    dynamic trees are one kind: at each concurrency the fastest of them (a tree row
    [concurrency, topk, depth, num_draft_tokens]), or 0. For layerskip the lowest concurrency
    decides the exit layer, and the schedule's lengths are that exit layer's."""
    concurrencies = sorted({r["concurrency"] for r in rows})
    first = choose([r for r in rows if r["concurrency"] == concurrencies[0]])
    schedule = []
    for concurrency in concurrencies:
        same_kind = [r for r in rows if r["concurrency"] == concurrency and r["eagle_choices"] == first["eagle_choices"]
                     and r.get("exit_layer") == first.get("exit_layer")]
        best = choose(same_kind)
        base = baselines.get(concurrency, {}).get("output_throughput", math.nan)
        faster_plain = not math.isnan(base) and base > best["output_throughput"]
        schedule.append([concurrency, 0] if faster_plain else schedule_row(best, concurrency))
    return first, schedule


def measure(engine: Any, prompts: Sequence[Any], shapes: Sequence[Candidate], *, max_tokens: int,
            concurrency: int | Sequence[int], repeats: int, on_request=None) -> dict[str, Any]:
    """Run every candidate (sharing the engine's weights, its draft length fixed at every batch
    size) and the baseline, interleaved, at each concurrency."""
    from trtspec.bench.load import run_variants
    from trtspec.bench.metrics import group_cells, summarize_cell
    from trtspec.bench.targets import EngineTarget, engine_variant

    concurrencies = [concurrency] if isinstance(concurrency, int) else list(concurrency)
    engines = {shape.label: engine_variant(engine, shape.max_draft_len, shape.eagle_choices, shape.dynamic,
                                           shape.exit_layer) for shape in shapes}
    variants: dict[str, tuple[Any, bool]] = {label: (EngineTarget(variant), True) for label, variant in engines.items()}
    variants[BASELINE_LABEL] = (EngineTarget(engine), False)
    try:
        run = run_variants(variants, prompts, concurrencies, max_tokens=max_tokens, repeats=repeats,
                           on_request=on_request)
    finally:
        for variant in engines.values():
            variant.close()
    results = [summarize_cell(cell) for cell in group_cells(run.records, run.durations, order=list(variants))]
    rows, baselines = tune_rows(results, shapes)
    choice, schedule = choose_schedule(rows, baselines)
    return {"rows": rows, "baseline": baselines.get(concurrencies[0]), "baselines": baselines, "choice": choice,
            "schedule": schedule if len(concurrencies) > 1 else None, "records": run.records}
