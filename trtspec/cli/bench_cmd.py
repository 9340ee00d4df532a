"""`trtspec bench`: measure latency, throughput and acceptance (and every mode, with --compare-modes)."""

from __future__ import annotations

from pathlib import Path

import click

from trtspec.cli._options import config_option, dry_run_option, emit_json, json_option, resolve_spec

BENCH_EPILOG = """\b
Examples:
  trtspec bench --baseline                          # the server `trtspec deploy` started
  trtspec bench --url 127.0.0.1:8001 --concurrency 1,2,4,8 --max-tokens 128 --baseline
  trtspec bench --url 10.0.0.5:18821 --metrics-url http://10.0.0.5:18822/metrics --baseline
  trtspec bench --concurrency 1,8                   # the Dynamo stack `deploy --target dynamo` started
  trtspec bench --openai-url http://10.0.0.5:8000/v1 --metrics-url http://10.0.0.6:9090/metrics,http://10.0.0.7:9090/metrics
  trtspec bench --engine engines/smollm2-ngram-cpu --baseline --repeats 3   # in-process, no server
  trtspec bench --prompts my-prompts.jsonl --num-prompts 16 --out reports/mine --json
  trtspec bench --url 127.0.0.1:8001 --engine engines/smollm2-ngram-cpu --concurrency 1   # serving overhead
  trtspec bench --concurrency 8,16 --baseline --requests-per-slot 8   # near steady state: 64 / 128 per block
  trtspec bench --engine engines/smollm2-ngram-cpu --compare-modes ngram,lookahead,layerskip --repeats 3
\b
Writes bench.json (keys as `vllm bench serve`), bench.csv, requests.jsonl, throughput.png and
acceptance.png to --out (default <workdir>/reports/bench-<UTC time>/).
"""

def _int_list(ctx, param, value: str | None) -> list[int] | None:
    if value is None:
        return None
    try:
        numbers = [int(part) for part in value.split(",") if part.strip()]
    except ValueError:
        raise click.BadParameter(f"expected comma-separated integers like 1,2,4 (got {value!r})") from None
    if not numbers or min(numbers) < 1:
        raise click.BadParameter(f"expected positive integers (got {value!r})")
    return numbers


def _progress(console, total: int, description: str):
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

    return Progress(TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(),
                    console=console, transient=True)


@click.command(epilog=BENCH_EPILOG)
@config_option
@click.option("--url", default=None, help="Triton gRPC address (default: the spec's serve.host:grpc_port).")
@click.option("--openai-url", default=None,
              help="An OpenAI-API server's base URL (.../v1), e.g. a Dynamo frontend (default, with no --url or "
                   "--engine: the Dynamo stack this workdir runs). Speculative only: no --baseline.")
@click.option("--metrics-url", default=None,
              help="The server's Prometheus metrics (default: http://<--url host>:<serve.metrics_port>/metrics); "
                   "with --openai-url the workers' /metrics, comma-separated (their vllm:spec_decode_* counters).")
@click.option("--engine", "engine_dir", type=click.Path(file_okay=False), default=None,
              help="Run in-process on this cpu engine bundle instead of a server.")
@click.option("--prompts", type=click.Path(dir_okay=False), default=None,
              help="JSONL prompt file (default: bench.prompts, else the packaged set).")
@click.option("--concurrency", callback=_int_list, default=None, help="Comma-separated, e.g. 1,2,4,8.")
@click.option("--max-tokens", type=int, default=None, help="New tokens per request (bench.max_tokens).")
@click.option("--num-prompts", type=int, default=None, help="Use only the first N prompts.")
@click.option("--baseline", is_flag=True, help="Also run with speculation off, interleaved, and report the speedup.")
@click.option("--repeats", type=click.IntRange(1, 100), default=1, show_default=True,
              help="Run everything N times; tokens/s is the median, speedup the median ratio.")
@click.option("--requests-per-slot", type=click.IntRange(1, 100), default=2, show_default=True,
              help="Each interleaved block sends N x concurrency requests (prompts cycled when there are fewer). "
                   "Blocks drain at their end; a larger N keeps the server nearer full (see 'in flight').")
@click.option("--temperature", type=click.FloatRange(0.0), default=0.0, show_default=True)
@click.option("--raw", is_flag=True,
              help="Send each prompt as given (default: one user turn through the target's chat template, applied "
                   "by the client; in process by the engine).")
@click.option("--compare-modes", default=None, metavar="MODES|all",
              help="In process: plain decoding and each of these modes' drafters over the engine's target, "
                   "interleaved; per mode acceptance length, per-position acceptance and tokens/s vs plain "
                   "(writes modes.json; a mode without its artifacts is skipped, saying what to convert).")
@click.option("--out", "out_dir", type=click.Path(file_okay=False), default=None, help="Report directory.")
@dry_run_option
@json_option
def bench(config_path, url, openai_url, metrics_url, engine_dir, prompts, concurrency, max_tokens, num_prompts, baseline, repeats,
          requests_per_slot, temperature, raw, compare_modes, out_dir, dry_run, as_json) -> None:
    """Measure TTFT, TPOT, ITL, end-to-end latency, tokens/s and acceptance per concurrency.

    Streams every prompt at each concurrency over tritonclient gRPC (or in-process with
    --engine; or through an OpenAI-API server: --openai-url, or the Dynamo stack `deploy --target
    dynamo` started). With --baseline the same prompts run with speculation off in the same run,
    interleaved block by block so machine noise hits both, and the speedup is reported. With
    both --url and --engine it measures the serving overhead instead: Triton / in-process.
    """
    from rich.console import Console

    from trtspec.bench import runner
    from trtspec.bench.load import schedule
    from trtspec.prompts import load_prompts
    if baseline and url and engine_dir:
        raise click.UsageError("--baseline measures one target; with both --url and --engine bench measures "
                               "the serving overhead. Run them separately.")
    spec = resolve_spec(config_path, bench__prompts=prompts, bench__concurrency=concurrency,
                        bench__max_tokens=max_tokens, bench__num_prompts=num_prompts)
    prompt_set = load_prompts(spec.bench.prompts, "bench", spec.bench.num_prompts)
    out = Path(out_dir) if out_dir else runner.default_out_dir(spec, "bench")
    if compare_modes:
        if url or raw or openai_url:
            raise click.UsageError("--compare-modes runs in process on the cpu engine (no --url, --openai-url, --raw)")
        _compare_modes(spec, Path(engine_dir) if engine_dir else runner.default_engine_dir(spec), compare_modes,
                       prompt_set, repeats, temperature, out, dry_run, as_json)
        return
    variants = ["a", "b"] if baseline or (url and engine_dir) else ["a"]
    total = sum(len(numbers) for *_, numbers in schedule(len(prompt_set), spec.bench.concurrency, repeats, variants,
                                                          requests_per_slot))
    openai = openai_url or (not url and not engine_dir and runner.serves_openai(spec))
    where = " vs ".join(([f"triton {url or runner.default_url(spec)}"] if (url or not engine_dir) and not openai
                         else []) + ([f"in-process {engine_dir}"] if engine_dir else []))
    if openai:
        if baseline or url or engine_dir:
            raise click.UsageError("an OpenAI-API server (--openai-url, or this workdir's Dynamo stack) is benched "
                                   "alone: no --baseline, --url or --engine (its API has no switch for speculation; "
                                   "`trtspec tune --served --target dynamo` deploys a baseline)")
        where = f"openai {openai_url}" if openai_url else "the Dynamo stack of this workdir"
    plan = {"target": where, "prompts": spec.bench.prompts or "packaged", "num_prompts": len(prompt_set),
            "concurrency": spec.bench.concurrency, "max_tokens": spec.bench.max_tokens, "repeats": repeats,
            "requests_per_slot": requests_per_slot, "baseline": baseline, "requests": total, "out": str(out)}
    if (url or not engine_dir) and not openai:
        plan["metrics"] = runner.metrics_address(spec, url, metrics_url)
    if dry_run:
        _print_dry_run(plan, as_json)
        return
    _writable_dir(out)
    console = Console(stderr=True)
    with console.status(f"Connecting to {where} ..."):
        variant_targets, ratio, description = runner.plan_variants(spec, url, engine_dir, baseline, metrics_url, raw,
                                                                   openai_url)
    for problem in {t.metrics_problem() for t, _ in variant_targets.values()} - {None}:
        console.print(f"[yellow]warning:[/] {problem}: the report will lack the load policy's steps, acceptance "
                      "per position and the engine's thread fallbacks; pass --metrics-url (or -c the server's spec)")
    with _progress(console, total, "bench") as progress:
        task = progress.add_task(f"bench {where}", total=total)
        report, paths = runner.run(variant_targets, ratio, description, prompt_set, spec=spec,
                                   concurrency=spec.bench.concurrency, max_tokens=spec.bench.max_tokens,
                                   repeats=repeats, requests_per_slot=requests_per_slot,
                                   temperature=temperature, out_dir=out,
                                   prompts_source=plan["prompts"], on_request=lambda record: progress.advance(task))
    if as_json:
        from trtspec.bench.report import clean_json

        emit_json({"report": clean_json(report), "files": {k: str(v) for k, v in paths.items()}})
        return
    from trtspec.bench.report import render_table

    console = Console()
    if not console.is_terminal:  # piped or captured: wide enough that the table stays one line a row
        console = Console(width=150)
    console.print(render_table(report))
    click.echo("Wrote " + ", ".join(str(p) for p in paths.values()))


def _compare_modes(spec, engine_dir: Path, value: str, prompt_set, repeats: int, temperature: float, out: Path,
                   dry_run: bool, as_json: bool) -> None:
    """bench --compare-modes (trtspec.bench.modes_compare)."""
    from rich.console import Console

    from trtspec.bench import modes_compare

    wanted = modes_compare.parse_modes(value)
    total = len(prompt_set) * repeats * (len(wanted) + 1) * len(spec.bench.concurrency)
    plan = {"engine": str(engine_dir), "modes": ["none", *wanted], "num_prompts": len(prompt_set),
            "concurrency": spec.bench.concurrency, "max_tokens": spec.bench.max_tokens, "repeats": repeats,
            "requests": f"at most {total}", "out": str(out / "modes.json")}
    if dry_run:
        _print_dry_run(plan, as_json)
        return
    _writable_dir(out)
    with _progress(Console(stderr=True), total, "bench") as progress:
        task = progress.add_task(f"compare modes on {engine_dir.name}", total=total)
        report, path = modes_compare.run(spec, engine_dir, wanted, prompt_set, concurrency=spec.bench.concurrency,
                                         max_tokens=spec.bench.max_tokens, repeats=repeats, temperature=temperature,
                                         out_dir=out, prompts_source=spec.bench.prompts or "packaged",
                                         on_request=lambda record: progress.advance(task))
    if as_json:
        emit_json({"report": report, "files": {"modes_json": str(path)}})
        return
    click.echo(modes_compare.render_text(report))
    click.echo(f"Wrote {path}")


def _print_dry_run(plan: dict, as_json: bool) -> None:
    """What a run would do, as JSON or one line; nothing is written."""
    if as_json:
        emit_json({"dry_run": True, **plan})
    else:
        click.echo("Would run: " + ", ".join(f"{k} {v}" for k, v in plan.items()) + "; nothing written.")


def _writable_dir(out: Path) -> None:
    """Create the report directory and prove it takes a file before minutes of measuring."""
    import tempfile

    out.mkdir(parents=True, exist_ok=True)  # OSError: one line from cli/_errors.py
    with tempfile.NamedTemporaryFile(dir=out, prefix=".write-check-"):
        pass
