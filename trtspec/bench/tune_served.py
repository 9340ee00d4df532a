"""`trtspec tune --served`: draft length by load, measured through the server, for every backend.

A served engine's draft length is fixed when it is built (the GPU releases read max_draft_len from
the LLM-API options at load), so each candidate is its own deployment:

1. for each candidate draft length, and for off (speculative.mode none), build the engine with
   that length fixed at every batch size, render the repository and start the server here (inside
   the GPU container for trtllm: the same local path `trtspec deploy` takes, probe included);
2. send the bench prompts through Triton at each concurrency (trtspec.bench.load, what `trtspec
   bench` runs), prompts templated client-side as bench sends them; stop the server;
3. per concurrency take the fastest length, 0 where off was faster (trtspec.bench.tune's
   choose_schedule, as the in-process tune decides);
4. write what the target release takes (`decide`): the cpu engine and TensorRT-LLM 1.2.1's
   draft-target and n-gram drafters a schedule (speculative.draft_len_schedule, built into the
   LLM API's draft_len_schedule), with 1.2.1's acceptance gate (acceptance_window,
   acceptance_length_threshold: the break-even acceptance length measured at the lowest
   concurrency); a release or drafter without a schedule (1.1.0, one-model EAGLE-3) the fixed
   best length at the lowest concurrency. For the Dynamo targets (`target` dynamo, dynamo-k8s) the
   release is the TensorRT-LLM 1.3 line the pinned Dynamo image carries (contracts.for_target): a
   schedule for every drafter it has (one-model EAGLE-3 and MTP too; the builder writes its
   last-batch-size keys) and its rate gate (acceptance_window iterations,
   acceptance_rate_threshold: the break-even accepted/drafted rate, `break_even_rate_gate`).
   Then the final engine is built, so its options carry it.

With `--target dynamo` each candidate is a Dynamo stack on this machine (`deploy --target dynamo`:
the frontend, its router and serve.dynamo.workers cpu workers), measured through the frontend's
OpenAI API (trtspec.bench.openai_target: the answers' usage and the workers' vLLM-named counters).

The cells come from separate deployments, one after another, not interleaved blocks as the
in-process tune runs them: machine drift between deployments lands in the comparison. Library
code: progress goes through `on_request` and `on_phase`; nothing is drawn here.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from trtspec.bench import tune as tuning
from trtspec.errors import TrtSpecError

GATE_WINDOW = 32  # finished requests the 1.2.1 gate averages over (a few batches' worth at tuned loads)
# speculation-enabled decoding iterations the 1.3 gate averages over (contract llm_api.gate.read):
# a few 128-token answers at one sequence, a fraction of one batch's worth at tuned loads
GATE_WINDOW_ITERATIONS = 512


@dataclass(frozen=True)
class Decision:
    """What tune writes into the spec, and why (one line per note)."""

    max_draft_len: int
    schedule: list[list[int]] | None = None
    gate: tuple[int, float] | None = None        # (acceptance_window, threshold)
    notes: list[str] = field(default_factory=list)
    gate_kind: str = "length"                    # the threshold: acceptance length (1.2.1) or rate (1.3)

    def fields(self) -> dict[str, str]:
        """speculative.<key>: YAML value, for tune.write_choice's `extra`."""
        window, threshold = self.gate or (0, 0.0)
        return {"acceptance_window": str(window), self.threshold_field: repr(float(threshold))}

    @property
    def threshold_field(self) -> str:
        return "acceptance_rate_threshold" if self.gate_kind == "rate" else "acceptance_length_threshold"


def candidate_spec(spec: Any, draft_len: int) -> Any:
    """The spec of one deployment: draft_len fixed at every batch size; 0 is speculation off."""
    from trtspec.spec.schema import validate_spec

    data = spec.model_dump(mode="json")
    speculative = data["speculative"]
    speculative.update(draft_len_schedule=None, dynamic_draft=False, acceptance_window=0,
                       acceptance_length_threshold=0.0, acceptance_rate_threshold=0.0, eagle_choices=None, tree=None)
    if draft_len == 0:
        speculative["mode"] = "none"
    else:
        speculative["max_draft_len"] = speculative["suffix"]["max_draft_len"] = draft_len  # suffix: its own cap
        if spec.build.backend == "cpu":  # the cpu load policy picks lengths by load unless told one
            speculative["draft_len_schedule"] = [[1, draft_len]]
    return validate_spec(data)


def label(draft_len: int) -> str:
    return tuning.BASELINE_LABEL if draft_len == 0 else tuning.Candidate(draft_len).label


def decide(spec: Any, rows: Sequence[dict[str, Any]], baselines: dict[int, dict[str, Any]],
           target: str = "local") -> Decision:
    """The choice from tune rows (trtspec.bench.tune.tune_rows) for the spec's backend and the
    release the deploy `target` serves."""
    first, schedule = tuning.choose_schedule(rows, baselines)
    concurrencies = sorted({r["concurrency"] for r in rows})
    if spec.build.backend == "cpu":
        lengths = [row[1] for row in schedule if row[1]]
        return Decision(max(lengths or [first["max_draft_len"]]), schedule if len(concurrencies) > 1 else None)
    from trtspec.builders import contracts

    contract = contracts.for_target(spec, target)
    api, mode, notes = contract.llm_api, spec.speculative.mode, []
    plan = api.get("schedule") or {}
    if spec.build.backend == "trtllm-engine":  # TensorRT engines: max_draft_len is a trtllm-build flag
        plan = {"not_for": {mode: "a TensorRT engine's draft length is fixed by trtllm-build --max_draft_len"}}
    if schedule[0][1] == 0:
        raise TrtSpecError(f"tune: plain decoding beat every draft length at concurrency {concurrencies[0]}",
                           fix="serve with speculative.mode: none, or tune with other --draft-lens")
    if len(concurrencies) > 1 and mode in plan.get("modes", ()):
        # the release wants {1: max_draft_len} and no length above it (contract llm_api.schedule)
        best = schedule[0][1] if concurrencies[0] == 1 else max(row[1] for row in schedule)
        table = [[b, min(k, best)] for b, k in ([] if concurrencies[0] == 1 else [[1, best]]) + schedule]
    else:
        best, table = first["max_draft_len"], None
        why = (plan.get("not_for") or {}).get(mode) or f"TensorRT-LLM {contract.version} has no draft_len_schedule"
        off = [row[0] for row in schedule if row[1] == 0]
        notes.append(f"fixed max_draft_len {best}: {why}"
                     + (f"; plain decoding was faster from concurrency {off[0]} on" if off else ""))
    gate_plan = (api.get("gate") or {}) if spec.build.backend == "trtllm" else {}
    gate, kind = None, gate_plan.get("threshold_kind", "length")
    if mode in gate_plan.get("modes", ()):
        gate = break_even_gate(first) if kind == "length" else break_even_rate_gate(first)
        if gate is None:
            notes.append("no acceptance gate: the server reported no acceptance length to set it from, or "
                         "speculation paid at any acceptance")
    elif gate_plan:
        notes.append(f"no acceptance gate: {(gate_plan.get('not_for') or {}).get(mode, 'not for this mode')}")
    return Decision(best, table, gate, notes, kind)


def break_even_gate(row: dict[str, Any]) -> tuple[int, float] | None:
    """(window, threshold): the acceptance length below which this draft length stops paying.

    A step that commits AL tokens on average ran `speedup` times plain decoding's tokens/s, so one
    step costs AL / speedup plain steps; speculation pays while AL stays above that cost. AL is
    tokens per target pass where measured (steps without a draft counted, as the release's gate
    averages decoded tokens per iteration), else 1 + accepted / drafts."""
    length = row.get("tokens_per_target_pass", math.nan)
    if not length or math.isnan(length):
        length = row.get("spec_decode_acceptance_length", math.nan)
    speedup = row.get("speedup", math.nan)
    if not (length and speedup) or math.isnan(length) or math.isnan(speedup) or speedup <= 0:
        return None
    return GATE_WINDOW, round(length / speedup, 2)


def break_even_rate_gate(row: dict[str, Any]) -> tuple[int, float] | None:
    """(window, threshold) for the 1.3 line's gate: the acceptance RATE (accepted / drafted) below
    which this draft length stops paying. A chain of k drafted tokens at rate r commits 1 + r*k
    tokens a step, so the break-even acceptance length L* of `break_even_gate` is the rate
    (L* - 1) / k; None where L* <= 1 (speculation paid at any acceptance: no gate to set)."""
    gate = break_even_gate(row)
    drafted = row.get("max_draft_len") or 0
    if gate is None or drafted <= 0 or gate[1] <= 1.0:
        return None
    return GATE_WINDOW_ITERATIONS, round(min(1.0, (gate[1] - 1.0) / drafted), 3)


def measure(spec: Any, draft_lens: Sequence[int], prompts: Sequence[Any], *, concurrency: Sequence[int],
            max_tokens: int, repeats: int, raw: bool = False, on_request: Callable | None = None,
            on_phase: Callable[[str], Any] | None = None, target: str = "local") -> dict[str, Any]:
    """Deploy, measure and stop each candidate (and off); tune rows and baselines by concurrency.
    `target` dynamo: each candidate is a Dynamo stack here (`deployed_dynamo`), else a Triton server."""
    from trtspec.bench.metrics import group_cells, summarize_cell

    results: list[dict[str, Any]] = []
    sent = None
    for draft_len in [0, *draft_lens]:
        candidate = candidate_spec(spec, draft_len)
        if on_phase:
            on_phase(f"{label(draft_len)}: build and deploy")
        deployment = deployed_dynamo(candidate, raw, on_phase) if target == "dynamo" else deployed(candidate, raw)
        with deployment as served:
            from trtspec.bench.load import run_variants

            sent = getattr(served, "prompts_sent", None) or (
                served.render.describe() if hasattr(served.render, "describe") else None)

            run = run_variants({label(draft_len): (served, draft_len > 0)}, prompts, list(concurrency),
                               max_tokens=max_tokens, repeats=repeats, on_request=on_request)
        results += [summarize_cell(cell) for cell in group_cells(run.records, run.durations)]
    rows, baselines = tuning.tune_rows(results, tuning.candidates(draft_lens))
    return {"rows": rows, "baselines": baselines, "prompts_sent": sent}


class deployed:
    """Build the candidate, render its repository, serve it here; the Triton target while it runs."""

    def __init__(self, spec: Any, raw: bool = False):
        self.spec, self.raw = spec, raw

    def __enter__(self) -> Any:
        from trtspec import repository
        from trtspec.artifacts import Layout
        from trtspec.bench.runner import open_triton
        from trtspec.builders import build
        from trtspec.serve import server

        spec = self.spec
        self.layout = Layout.from_spec(spec)
        if server.status(self.layout, probe=False)["running"]:
            raise TrtSpecError("tune --served: a trtspec tritonserver is already running for this workdir",
                               fix="`trtspec deploy stop` first (tune deploys each candidate itself)")
        engine_dir = build(spec).engine_dir
        repository.render(engine_dir, spec, self.layout.repository)
        if spec.build.backend == "trtllm":
            from trtspec.serve.probe import check_before_start

            check_before_start(engine_dir)
        server.start_local(spec, self.layout.repository, self.layout)
        try:
            target, _ = open_triton(spec, None, raw=self.raw)
        except BaseException:
            server.stop_local(self.layout)
            raise
        self.target = target
        return target

    def __exit__(self, *exc: Any) -> None:
        from trtspec.serve import server

        try:
            self.target.client.close()
        finally:
            server.stop_local(self.layout)


class deployed_dynamo:
    """Build the candidate and start `deploy --target dynamo` for it here (frontend and
    serve.dynamo.workers workers); the OpenAI target (trtspec.bench.openai_target) while it runs."""

    def __init__(self, spec: Any, raw: bool = False, say: Callable[[str], Any] | None = None):
        self.spec, self.raw, self.say = spec, raw, say or (lambda line: None)

    def __enter__(self) -> Any:
        from trtspec.artifacts import Layout
        from trtspec.bench.openai_target import dynamo_target
        from trtspec.builders import build
        from trtspec.serve import targets

        spec, row = self.spec, targets.get("dynamo")
        self.layout = Layout.from_spec(spec)
        assert row.check is not None and row.stop is not None and row.status is not None
        row.check(spec)
        if row.status(self.layout).get("running"):
            raise TrtSpecError("tune --served: a trtspec Dynamo stack is already running for this workdir",
                               fix="`trtspec deploy stop` first (tune deploys each candidate itself)")
        engine_dir = build(spec).engine_dir
        row.start(spec, engine_dir, None, self.layout, self.say, False)
        self.stop = row.stop
        try:
            self.target, _ = dynamo_target(spec, self.layout, self.raw)
        except BaseException:
            row.stop(self.layout)
            raise
        return self.target

    def __exit__(self, *exc: Any) -> None:
        try:
            self.target.close()
        finally:
            self.stop(self.layout)


def write(spec: Any, spec_path: Path, decision: Decision) -> tuple[Path, Any]:
    """Record the decision in the spec file (old one kept as .bak) and build the final engine;
    (the backup, the build result)."""
    from trtspec.builders import build
    from trtspec.spec.loading import load_spec

    extra = decision.fields() if spec.build.backend != "cpu" else {}
    if decision.schedule is None and spec.speculative.draft_len_schedule:
        extra["draft_len_schedule"] = "null"  # a length fixed at every load replaces an older table
    backup = tuning.write_choice(spec_path, decision.max_draft_len, schedule=decision.schedule, extra=extra)
    return backup, build(load_spec(spec_path))


def record(spec: Any, spec_path: Path, result: dict[str, Any], plan: dict[str, Any], out: Path,
           target: str = "local") -> tuple[Decision, dict[str, Any]]:
    """Decide from measure()'s `result`, write the spec and rebuild (`write`), and write the
    report (the dry run's `plan` and what came of it) to <out>/tune.json; (the decision, the report)."""
    from trtspec.artifacts import write_json
    from trtspec.bench.report import clean_json, machine_metadata

    decision = decide(spec, result["rows"], result["baselines"], target)
    backup, built = write(spec, spec_path, decision)
    summary = clean_json({**plan, "choice": decision.max_draft_len, "draft_len_schedule": decision.schedule,
                          "acceptance_gate": dict(zip(("acceptance_window", decision.threshold_field),
                                                      decision.gate, strict=True)) if decision.gate else None,
                          "notes": decision.notes, "prompts_sent": result["prompts_sent"], "rows": result["rows"],
                          "backup": str(backup), "engine": str(built.engine_dir), "machine": machine_metadata()})
    out.mkdir(parents=True, exist_ok=True)
    write_json(out / "tune.json", summary)
    return decision, summary
