"""Glue between the CLI and the bench parts: open a target, run, assemble, write, plot.

The CLI parses and prints; this module decides where the bench sends requests and which files
it writes. It never formats terminal output (report.render_table does).
"""

from __future__ import annotations

import json
import sys
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from trtspec import artifacts
from trtspec.errors import TrtSpecError


def default_url(spec: Any) -> str:
    """The gRPC address of the server `trtspec deploy` starts for this spec."""
    host = spec.serve.host if spec.serve.host not in ("0.0.0.0", "::", "") else "127.0.0.1"
    return f"{host}:{spec.serve.grpc_port}"


def metrics_address(spec: Any, url: str | None, metrics_url: str | None = None) -> str:
    """Where bench reads the server's counters: `metrics_url`, else the server's host (`url`, or the
    spec's) at the spec's serve.metrics_port."""
    host = (url or default_url(spec)).rsplit(":", 1)[0]
    return metrics_url or f"http://{host}:{spec.serve.metrics_port}/metrics"


def default_engine_dir(spec: Any) -> Path:
    from trtspec.artifacts import Layout, engine_name

    return Layout.from_spec(spec).engine_dir(
        engine_name(spec.model_name, spec.speculative.mode, spec.build.backend, spec.quantization.fp8))


def default_out_dir(spec: Any, kind: str) -> Path:
    from trtspec.artifacts import Layout

    return Layout.from_spec(spec).report_dir(f"{kind}-{time.strftime('%Y%m%d-%H%M%S', time.gmtime())}")


def open_engine(engine_dir: str, raw: bool = False) -> tuple[Any, dict[str, Any]]:
    from trtspec.bench.targets import EngineTarget
    from trtspec.client.prompting import RAW
    from trtspec.runtime import load_engine

    engine = load_engine(engine_dir)
    bundle = json.loads((Path(engine_dir) / artifacts.ENGINE_JSON).read_text())
    runtime = bundle.get("runtime") or {}
    sent = RAW if raw else "chat template of the engine's tokenizer, applied in process (where it has one)"
    description = {"target": f"in-process engine {engine_dir}", "mode": engine.mode, "prompts_sent": sent,
                   "max_draft_len": engine.max_draft_len, "dtype": runtime.get("dtype", "float32"),
                   **head_profile(Path(engine_dir) / "draft" if engine.mode == "eagle3" else None),
                   **context_of((bundle.get("build_config") or {}).get("max_seq_len"),
                                Path(engine_dir) / "draft" if engine.mode == "eagle3" else None)}
    return EngineTarget(engine, chat=False if raw else None), description


def head_profile(head_dir: Path | None) -> dict[str, Any]:
    """{"head_profile": the speculation_profile.json convert wrote beside the EAGLE-3 head (the
    engine bundle links the head's directory as draft/)}, or {} where there is none."""
    from trtspec.convert.eagle3.profile import read_profile

    found = read_profile(head_dir) if head_dir is not None else None
    return {"head_profile": found} if found else {}


def context_of(max_seq_len: int | None, head_dir: Path | None) -> dict[str, Any]:
    """{"max_seq_len", "head_max_position_embeddings"} for the report's acceptance by context length
    (trtspec.bench.context_buckets); the head's only where there is an EAGLE-3 head."""
    from trtspec.bench.context_buckets import head_config

    config = head_config(head_dir) or {}
    return {"max_seq_len": max_seq_len,
            **({"head_max_position_embeddings": config["max_position_embeddings"]}
               if config.get("max_position_embeddings") else {})}


def open_triton(spec: Any, url: str | None, metrics_url: str | None = None, raw: bool = False
                ) -> tuple[Any, dict[str, Any]]:
    """The server at `url` (default: the spec's), its counters read from `metrics_url` (default: the
    same host at the spec's serve.metrics_port). Prompts go through the target's chat template,
    applied client-side (trtspec.client.prompting), unless `raw`."""
    from trtspec.bench.targets import TritonTarget
    from trtspec.client.prompting import renderer

    address = url or default_url(spec)
    metrics_url = metrics_address(spec, url, metrics_url)
    render = renderer(spec, raw)
    target = TritonTarget(address, metrics_url=metrics_url, render=render)
    if not target.client.is_ready():
        from trtspec.errors import ServerError

        raise ServerError(f"no ready model {target.client.model!r} at {address}",
                          fix="start one with `trtspec deploy`, pass --url, or bench in-process with --engine DIR")
    return target, {"target": f"triton {address}", "mode": spec.speculative.mode,
                    "max_draft_len": spec.speculative.draft_cap, "dtype": spec.model.dtype,
                    "metrics_url": metrics_url, "prompts_sent": render.describe(), **served_head(spec)}


def served_head(spec: Any) -> dict[str, Any]:
    """head_profile and context_of for a server of this spec (Triton or OpenAI-API): its EAGLE-3
    head is the workdir's checkpoint, where there is one (a remote server's may not be here)."""
    from trtspec.artifacts import Layout

    eagle3 = Layout.from_spec(spec).checkpoint("eagle3") if spec.speculative.mode == "eagle3" else None
    return {**head_profile(eagle3), **context_of(spec.build.max_seq_len, eagle3)}


def serves_openai(spec: Any) -> bool:
    """Whether this workdir runs a deploy target that speaks OpenAI's API (a Dynamo stack: the
    targets table's `speaks`), so bench and infer without --url go to its frontend."""
    from trtspec.artifacts import Layout
    from trtspec.serve import targets

    return targets.running(Layout.from_spec(spec)).speaks == "openai"


def open_openai(spec: Any, openai_url: str | None, metrics_url: str | None = None, raw: bool = False
                ) -> tuple[Any, dict[str, Any]]:
    """An OpenAI-API server: `openai_url` (its .../v1; counters from the comma-separated worker
    `metrics_url`s), else the Dynamo stack this workdir runs (its record names every worker)."""
    from trtspec.bench.openai_target import OpenAITarget, dynamo_target
    from trtspec.client.prompting import token_counter

    if openai_url:
        urls = [u.strip() for u in (metrics_url or "").split(",") if u.strip()]
        target = OpenAITarget(openai_url, spec.model_name, urls, raw)
        described = {"target": target.name, "metrics_url": ", ".join(urls) or None,
                     "prompts_sent": target.prompts_sent}
    else:
        from trtspec.artifacts import Layout

        target, described = dynamo_target(spec, Layout.from_spec(spec), raw)
    # prompt lengths for the phases without prefilling (trtspec.bench.phases): the built engine's tokenizer
    counter = token_counter(spec, raw) if target.acceptance_by_phase else None
    if counter is not None:
        target.count_prompt_tokens, target.prompt_tokens_source = counter, counter.describe()
    return target, {"mode": spec.speculative.mode, "max_draft_len": spec.speculative.draft_cap,
                    "dtype": spec.model.dtype, "acceptance_source": target.acceptance_source, **described,
                    **served_head(spec)}


def plan_variants(spec: Any, url: str | None, engine_dir: str | None, baseline: bool, metrics_url: str | None = None,
                  raw: bool = False, openai_url: str | None = None
                  ) -> tuple[dict[str, tuple[Any, bool]], tuple[str, str], dict[str, Any]]:
    """(variants, ratio, description) for the ways bench runs:

    - `--engine` or `--url` (default: the spec's server): speculative, plus baseline if asked;
      ratio speculative / baseline.
    - `--engine` and `--url` together: the serving overhead, the same speculative requests
      through Triton and in-process, interleaved; ratio triton / in-process (goal >= 0.9).
    - `--openai-url`, or neither while the workdir runs a Dynamo stack: its OpenAI frontend,
      speculative only (OpenAI's API has no per-request switch for speculation).
    """
    from trtspec.bench.metrics import BASELINE, SPECULATIVE

    if openai_url or (not url and not engine_dir and serves_openai(spec)):
        if baseline or engine_dir or url:
            raise TrtSpecError("bench through an OpenAI-API server measures it alone: no --baseline, --url or "
                               "--engine beside it (its API has no switch for speculation)",
                               fix="bench a speculative.mode none deployment for the baseline, or "
                                   "`trtspec tune --served --target dynamo`, which deploys both")
        target, description = open_openai(spec, openai_url, metrics_url, raw)
        return {SPECULATIVE: (target, True)}, (SPECULATIVE, BASELINE), description
    if engine_dir and url:
        if baseline:
            raise TrtSpecError("--baseline cannot be combined with --url and --engine together",
                               fix="measure the overhead (both) and the speedup (one of them) in two runs")
        triton, described = open_triton(spec, url, metrics_url, raw)
        engine, engine_described = open_engine(engine_dir, raw)
        description = {**described, "target": f"{described['target']} vs {engine_described['target']}",
                       "mode": engine_described["mode"], "max_draft_len": engine_described["max_draft_len"],
                       "dtype": engine_described["dtype"]}
        return {"triton": (triton, True), "in-process": (engine, True)}, ("triton", "in-process"), description
    target, description = open_engine(engine_dir, raw) if engine_dir else open_triton(spec, url, metrics_url, raw)
    variants = {SPECULATIVE: (target, True)}
    if baseline:
        variants[BASELINE] = (target, False)
    return variants, (SPECULATIVE, BASELINE), description


def run(variants: dict[str, tuple[Any, bool]], ratio: tuple[str, str], description: dict[str, Any],
        prompts: Sequence[Any], *, spec: Any, concurrency: list[int], max_tokens: int, repeats: int,
        temperature: float, out_dir: Path, prompts_source: str, requests_per_slot: int = 2, plots: bool = True,
        on_request: Callable | None = None) -> tuple[dict[str, Any], dict[str, Path]]:
    """Run the benchmark and write bench.json, bench.csv, requests.jsonl and the PNGs."""
    from trtspec.bench import phases
    from trtspec.bench import plots as plotting
    from trtspec.bench.load import run_variants
    from trtspec.bench.report import assemble_report, machine_metadata, write_reports

    started = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
    options = {"max_tokens": max_tokens, "repeats": repeats, "temperature": temperature,
               "requests_per_slot": requests_per_slot, "on_request": on_request}
    # answers that count no drafts (an OpenAI-API server): each category and bucket run alone (bench.phases)
    result = (phases.run_phased(variants, prompts, concurrency, max_seq_len=description.get("max_seq_len"), **options)
              if phases.wanted(variants) else run_variants(variants, prompts, concurrency, **options))
    failed = [r for r in result.records if not r.ok]
    if failed and len(failed) == len(result.records):
        raise TrtSpecError(f"all {len(failed)} requests failed (first: {failed[0].error})",
                           fix="check the server with `trtspec infer` or the engine with `trtspec generate`")
    metadata = {"model": spec.model_name, **description, "num_prompts": len(prompts), "prompts": prompts_source,
                "concurrency": concurrency, "max_tokens": max_tokens, "temperature": temperature,
                "repeats": repeats, "variants": list(variants), "started": started, "command": " ".join(sys.argv),
                "requests_per_slot": requests_per_slot,
                "interleaving": f"ABBA blocks of {requests_per_slot} x concurrency requests per variant (prompts "
                                "cycled when fewer); throughput = median over repeats; ratios = median of per-repeat "
                                "ratios",
                "machine": machine_metadata()}
    report = assemble_report(result.records, result.durations, metadata, result.counters_delta,
                             result.cell_counters, ratio=ratio, phases=getattr(result, "phases", None),
                             prompt_lengths=getattr(result, "prompt_lengths", None))
    # where acceptance comes from on this backend and release; zeros it cannot trust left out
    from trtspec.bench import acceptance

    report["metadata"]["acceptance_source"] = description.get("acceptance_source") or (
        acceptance.source(spec) if "in-process" not in description["target"] else "in-process engine statistics")
    untrusted = acceptance.mark(report["results"], spec, {label for label, (_, on) in variants.items() if on})
    if untrusted:
        report["metadata"]["acceptance_untrusted"] = untrusted
    paths = write_reports(out_dir, report, [r.to_dict() for r in result.records])
    if plots:
        title = (f"{spec.model_name} {description.get('mode')} via {description['target']}, "
                 f"{len(prompts)} prompts x {repeats}, {metadata['machine']['cpu_count']} CPUs, {started}")
        paths["throughput_png"] = plotting.plot_throughput(report["results"], report["speedup"],
                                                           Path(out_dir) / "throughput.png", title)
        acceptance = plotting.plot_acceptance(report["results"], Path(out_dir) / "acceptance.png", title)
        if acceptance is not None:
            paths["acceptance_png"] = acceptance
    return report, paths
