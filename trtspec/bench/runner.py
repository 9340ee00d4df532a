"""Glue between the CLI and the bench parts: open a target, run, assemble, write, plot.

The CLI parses and prints; this module decides where the bench sends requests and which files
it writes. It never formats terminal output (report.render_table does).
"""

from __future__ import annotations

import sys
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from trtspec.errors import TrtSpecError


def default_url(spec: Any) -> str:
    """The gRPC address of the server `trtspec deploy` starts for this spec."""
    host = spec.serve.host if spec.serve.host not in ("0.0.0.0", "::", "") else "127.0.0.1"
    return f"{host}:{spec.serve.grpc_port}"


def default_engine_dir(spec: Any) -> Path:
    from trtspec.artifacts import Layout, engine_name

    return Layout.from_spec(spec).engine_dir(
        engine_name(spec.model_name, spec.speculative.mode, spec.build.backend, spec.quantization.fp8))


def default_out_dir(spec: Any, kind: str) -> Path:
    from trtspec.artifacts import Layout

    return Layout.from_spec(spec).report_dir(f"{kind}-{time.strftime('%Y%m%d-%H%M%S', time.gmtime())}")


def open_target(spec: Any, url: str | None, engine_dir: str | None) -> tuple[Any, dict[str, Any]]:
    """(target, description) for --engine (in-process) or --url / the spec's server (Triton)."""
    if engine_dir:
        from trtspec.bench.targets import EngineTarget
        from trtspec.runtime import load_engine

        engine = load_engine(engine_dir)
        return EngineTarget(engine), {"target": f"in-process engine {engine_dir}", "mode": engine.mode,
                                      "max_draft_len": engine.max_draft_len}
    from trtspec.bench.targets import TritonTarget

    address = url or default_url(spec)
    host = address.rsplit(":", 1)[0]
    target = TritonTarget(address, metrics_url=f"http://{host}:{spec.serve.metrics_port}/metrics")
    return target, {"target": f"triton {address}", "mode": spec.speculative.mode,
                    "max_draft_len": spec.speculative.max_draft_len}


def run(target: Any, description: dict[str, Any], prompts: Sequence[Any], *, spec: Any, concurrency: list[int],
        max_tokens: int, baseline: bool, repeats: int, temperature: float, out_dir: Path, prompts_source: str,
        plots: bool = True, on_request: Callable | None = None) -> tuple[dict[str, Any], dict[str, Path]]:
    """Run the benchmark and write bench.json, bench.csv, requests.jsonl and the PNGs."""
    from trtspec.bench import plots as plotting
    from trtspec.bench.load import run_bench
    from trtspec.bench.report import assemble_report, machine_metadata, write_reports

    started = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
    result = run_bench(target, prompts, concurrency, max_tokens=max_tokens, baseline=baseline, repeats=repeats,
                       temperature=temperature, on_request=on_request)
    failed = [r for r in result.records if not r.ok]
    if failed and len(failed) == len(result.records):
        raise TrtSpecError(f"all {len(failed)} requests failed (first: {failed[0].error})",
                           fix="check the server with `trtspec infer` or the engine with `trtspec generate`")
    metadata = {"model": spec.model_name, **description, "num_prompts": len(prompts), "prompts": prompts_source,
                "concurrency": concurrency, "max_tokens": max_tokens, "temperature": temperature,
                "repeats": repeats, "baseline": baseline, "started": started, "command": " ".join(sys.argv),
                "interleaving": "ABBA blocks of 2 x concurrency prompts per variant; throughput = median over "
                                "repeats; speedup = median of per-repeat ratios",
                "machine": machine_metadata()}
    report = assemble_report(result.records, result.durations, metadata, result.counters_delta,
                             result.cell_counters)
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
