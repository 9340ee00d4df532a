"""`trtspec bench` and `trtspec tune`: measure latency, throughput and acceptance; pick max_draft_len."""

from __future__ import annotations

import json
from pathlib import Path

import click

from trtspec.cli._options import config_option, dry_run_option, emit_json, json_option, mode_option, resolve_spec

BENCH_EPILOG = """\b
Examples:
  trtspec bench --baseline                          # the server `trtspec deploy` started
  trtspec bench --url 127.0.0.1:8001 --concurrency 1,2,4,8 --max-tokens 128 --baseline
  trtspec bench --url 10.0.0.5:18821 --metrics-url http://10.0.0.5:18822/metrics --baseline
  trtspec bench --engine engines/smollm2-ngram-cpu --baseline --repeats 3   # in-process, no server
  trtspec bench --prompts my-prompts.jsonl --num-prompts 16 --out reports/mine --json
  trtspec bench --url 127.0.0.1:8001 --engine engines/smollm2-ngram-cpu --concurrency 1   # serving overhead
  trtspec bench --concurrency 8,16 --baseline --requests-per-slot 8   # near steady state: 64 / 128 per block
\b
Writes bench.json (keys as `vllm bench serve`), bench.csv, requests.jsonl, throughput.png and
acceptance.png to --out (default <workdir>/reports/bench-<UTC time>/).
"""

TUNE_EPILOG = """\b
Examples:
  trtspec tune                                      # engine from the spec, draft lengths 1,2,3,4,6,8
  trtspec tune --draft-lens 2,4,8 --num-prompts 8 --max-tokens 64 --repeats 2
  trtspec tune --engine engines/smollm2-ngram-cpu --dry-run
  trtspec tune --mode eagle3 --trees '[[[0],[1],[0,0]], [[0],[0,0],[0,0,0]]]'   # EAGLE-3 tree shapes
  trtspec tune --concurrency 1,2,4,8 --draft-lens 1,2,4   # draft length by load: draft_len_schedule
  trtspec tune --mode eagle3 --concurrency 1,4,8 --tree-shapes '4,3,8;8,4,16'   # dynamic trees by load
  trtspec tune --served --concurrency 1,4,16 --draft-lens 2,4   # deploy each length; GPU backends always
\b
Runs in-process on the cpu engine. --served (always on the GPU backends, whose draft length is
fixed when the engine loads) builds and deploys each draft length and off here, measures through
the server and writes the release's draft_len_schedule and acceptance gate (TensorRT-LLM 1.2.1
draft-target and ngram) or the fixed best length, then rebuilds.
For EAGLE-3, static draft trees are measured beside the chains (three small ones unless
--trees says otherwise). The choice goes into speculative.max_draft_len (and eagle_choices for
EAGLE-3) of the spec, the old file kept as <spec>.bak; with several concurrencies the fastest
draft length at each (0 where plain decoding was faster) goes into
speculative.draft_len_schedule. Dynamic trees (--tree-shapes topk,depth,num_draft_tokens; EAGLE-3,
or a draft model when given) compete with the chains at every concurrency: a tree row reads [concurrency, topk, depth, nodes]. Rebuild with `trtspec build` and redeploy to serve it.
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


def _tree_shapes(value: str | None) -> list[list[int]]:
    """--tree-shapes: 'topk,depth,num_draft_tokens' shapes separated by ';', 'none', or the defaults."""
    from trtspec.bench.tune import DEFAULT_TREE_SHAPES

    if value is None:
        return DEFAULT_TREE_SHAPES
    if value.strip().lower() == "none":
        return []
    try:
        shapes = [[int(v) for v in part.split(",")] for part in value.split(";") if part.strip()]
        if not shapes or any(len(s) != 3 or min(s) < 1 for s in shapes):
            raise ValueError
    except ValueError:
        raise click.BadParameter("expected shapes like '4,3,8;8,4,16' (topk,depth,num_draft_tokens), or none",
                                 param_hint="--tree-shapes") from None
    return shapes


def _trees(value: str | None) -> list[list[list[int]]]:
    """--trees: a JSON list of trees (each a list of index paths), 'none', or the defaults."""
    from trtspec.bench.tune import DEFAULT_TREES

    if value is None:
        return DEFAULT_TREES
    if value.strip().lower() == "none":
        return []
    try:
        trees = json.loads(value)
        if not all(isinstance(t, list) and t and all(isinstance(p, list) and p for p in t) for t in trees):
            raise ValueError
    except ValueError:
        raise click.BadParameter("expected a JSON list of trees like '[[[0],[1],[0,0]]]', or none",
                                 param_hint="--trees") from None
    return trees


def _progress(console, total: int, description: str):
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

    return Progress(TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(),
                    console=console, transient=True)


@click.command(epilog=BENCH_EPILOG)
@config_option
@click.option("--url", default=None, help="Triton gRPC address (default: the spec's serve.host:grpc_port).")
@click.option("--metrics-url", default=None,
              help="The server's Prometheus metrics (default: http://<--url host>:<serve.metrics_port>/metrics).")
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
@click.option("--out", "out_dir", type=click.Path(file_okay=False), default=None, help="Report directory.")
@dry_run_option
@json_option
def bench(config_path, url, metrics_url, engine_dir, prompts, concurrency, max_tokens, num_prompts, baseline, repeats,
          requests_per_slot, temperature, raw, out_dir, dry_run, as_json) -> None:
    """Measure TTFT, TPOT, ITL, end-to-end latency, tokens/s and acceptance per concurrency.

    Streams every prompt at each concurrency over tritonclient gRPC (or in-process with
    --engine). With --baseline the same prompts run with speculation off in the same run,
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
    variants = ["a", "b"] if baseline or (url and engine_dir) else ["a"]
    total = sum(len(numbers) for *_, numbers in schedule(len(prompt_set), spec.bench.concurrency, repeats, variants,
                                                          requests_per_slot))
    where = " vs ".join(([f"triton {url or runner.default_url(spec)}"] if url or not engine_dir else [])
                        + ([f"in-process {engine_dir}"] if engine_dir else []))
    plan = {"target": where, "prompts": spec.bench.prompts or "packaged", "num_prompts": len(prompt_set),
            "concurrency": spec.bench.concurrency, "max_tokens": spec.bench.max_tokens, "repeats": repeats,
            "requests_per_slot": requests_per_slot, "baseline": baseline, "requests": total, "out": str(out)}
    if url or not engine_dir:
        plan["metrics"] = runner.metrics_address(spec, url, metrics_url)
    if dry_run:
        _print_dry_run(plan, as_json)
        return
    _writable_dir(out)
    console = Console(stderr=True)
    with console.status(f"Connecting to {where} ..."):
        variant_targets, ratio, description = runner.plan_variants(spec, url, engine_dir, baseline, metrics_url, raw)
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


@click.command(epilog=TUNE_EPILOG)
@config_option
@click.option("--engine", "engine_dir", type=click.Path(file_okay=False), default=None,
              help="cpu engine bundle (default: the one `trtspec build` made for the spec).")
@click.option("--prompts", type=click.Path(dir_okay=False), default=None,
              help="JSONL prompt file (default: bench.prompts, else the packaged set).")
@click.option("--draft-lens", callback=_int_list, default="1,2,3,4,6,8", show_default=True,
              help="Comma-separated max_draft_len candidates (chains).")
@click.option("--trees", default=None,
              help="EAGLE-3: JSON list of eagle_choices trees to measure too; 'none' for chains only "
                   "(default: three small trees).")
@click.option("--tree-shapes", default=None,
              help="Dynamic tree shapes 'topk,depth,num_draft_tokens;...' to measure too; 'none' for none "
                   "(EAGLE-3 default: 4,3,8;4,4,16; draft-target: none unless given).")
@mode_option
@click.option("--max-tokens", type=int, default=None, help="New tokens per request (bench.max_tokens).")
@click.option("--num-prompts", type=int, default=None, help="Use only the first N prompts.")
@click.option("--concurrency", callback=_int_list, default="1", show_default=True,
              help="Comma-separated; with several, a draft length per concurrency (draft_len_schedule).")
@click.option("--repeats", type=click.IntRange(1, 100), default=1, show_default=True)
@click.option("--served", is_flag=True,
              help="Deploy each draft length (and off) and measure through the server (always on GPU backends).")
@click.option("--raw", is_flag=True, help="--served: send the prompts without the target's chat template.")
@click.option("--out", "out_dir", type=click.Path(file_okay=False), default=None, help="Report directory.")
@dry_run_option
@json_option
def tune(config_path, engine_dir, prompts, draft_lens, trees, tree_shapes, mode, max_tokens, num_prompts, concurrency,
         repeats, served, raw, out_dir, dry_run, as_json) -> None:
    """Measure tokens/s for each max_draft_len and record the fastest in the spec.

    Chooses by tokens/s, not by acceptance length: longer drafts accept more tokens per step
    but make every verification pass dearer. The baseline (no speculation) runs beside them.
    """

    from rich.console import Console

    from trtspec.bench import runner
    from trtspec.bench import tune as tuning
    from trtspec.errors import TrtSpecError
    from trtspec.prompts import load_prompts
    from trtspec.spec.schema import DEFAULT_CONFIG, TREE_MODES

    spec = resolve_spec(config_path, bench__prompts=prompts, bench__max_tokens=max_tokens,
                        bench__num_prompts=num_prompts, speculative__mode=mode)
    if spec.speculative.mode == "none":
        raise TrtSpecError("tune: speculative.mode is none, so there is no draft length to tune",
                           fix="set speculative.mode (ngram, eagle3, draft-target) and build the engine")
    bad = [k for k in draft_lens if k > 64]
    if bad:
        raise click.BadParameter(f"draft lengths must be 1..64 (got {bad})", param_hint="--draft-lens")
    eagle3 = spec.speculative.mode == "eagle3"
    tree_list = _trees(trees) if eagle3 else []
    if trees and trees.strip().lower() != "none" and not eagle3:
        raise click.BadParameter("draft trees are an EAGLE-3 feature; set --mode eagle3", param_hint="--trees")
    # dynamic trees: EAGLE-3 measures the default shapes unless told otherwise; a draft model only
    # the shapes asked for (each of its tree depths is a forward of the whole draft model)
    grows_trees = spec.speculative.mode in TREE_MODES
    shape_list = _tree_shapes(tree_shapes) if eagle3 or (grows_trees and tree_shapes) else []
    if tree_shapes and tree_shapes.strip().lower() != "none" and not grows_trees:
        raise click.BadParameter("dynamic trees grow from an EAGLE-3 head or a draft model; set --mode eagle3 "
                                 "or draft-target", param_hint="--tree-shapes")
    prompt_set = load_prompts(spec.bench.prompts, "bench", spec.bench.num_prompts)
    spec_path = Path(config_path or DEFAULT_CONFIG)
    if served or spec.build.backend != "cpu":
        if engine_dir or (trees and trees.strip().lower() != "none") or (
                tree_shapes and tree_shapes.strip().lower() != "none"):
            raise click.UsageError("tune --served deploys chains of each --draft-lens (no --engine, --trees, "
                                   "--tree-shapes)")
        out = Path(out_dir) if out_dir else runner.default_out_dir(spec, "tune")
        _tune_served(spec, spec_path, draft_lens, concurrency, prompt_set, repeats, raw, out, dry_run, as_json)
        return
    shapes = tuning.candidates(draft_lens, tree_list, shape_list)
    engine_path = Path(engine_dir) if engine_dir else runner.default_engine_dir(spec)
    out = Path(out_dir) if out_dir else runner.default_out_dir(spec, "tune")
    total = len(prompt_set) * repeats * (len(shapes) + 1) * len(concurrency)
    if dry_run:
        plan = {"engine": str(engine_path), "draft_lens": draft_lens, "trees": tree_list, "tree_shapes": shape_list,
                "num_prompts": len(prompt_set),
                "max_tokens": spec.bench.max_tokens, "concurrency": concurrency, "repeats": repeats,
                "requests": total, "spec": str(spec_path), "out": str(out)}
        _print_dry_run(plan, as_json)
        return
    _writable_dir(out)
    from trtspec.runtime import load_engine

    console = Console(stderr=True)
    with console.status(f"Loading {engine_path} ..."):
        engine = load_engine(engine_path)
    with _progress(console, total, "tune") as progress:
        task = progress.add_task(f"tune {engine_path.name}", total=total)
        result = tuning.measure(engine, prompt_set, shapes, max_tokens=spec.bench.max_tokens,
                                concurrency=concurrency, repeats=repeats, on_request=lambda r: progress.advance(task))
    chosen, summary = tuning.record(spec_path, result, out, set_choices=eagle3, set_tree=grows_trees,
                                    context={"engine": str(engine_path), "num_prompts": len(prompt_set),
                                             "repeats": repeats, "max_tokens": spec.bench.max_tokens,
                                             "concurrency": concurrency})
    if as_json:
        emit_json(summary)
        return
    from rich.table import Table

    table = Table(title=f"tune {engine_path.name}: output tokens/s per max_draft_len "
                        f"({len(prompt_set)} prompts x {repeats}, concurrency {','.join(map(str, concurrency))})")
    for name in ("conc", "draft shape", "tokens/s", "speedup", "TPOT ms", "AL", "accept %"):
        table.add_column(name, justify="right")
    choice, schedule = result["choice"], chosen.schedule
    picks = [tuple(r) for r in schedule] if schedule else [tuple(tuning.schedule_row(choice, choice["concurrency"]))]
    for row in result["rows"]:
        picked = tuple(tuning.schedule_row(row, row["concurrency"])) in picks
        mark = " *" if picked and row["eagle_choices"] == choice["eagle_choices"] else ""
        shape = f"tree {json.dumps(row['eagle_choices'])}" if row["eagle_choices"] else f"chain {row['max_draft_len']}"
        shape = f"dynamic tree {','.join(map(str, row['tree']))}" if row.get("tree") else shape
        table.add_row(str(row["concurrency"]), f"{shape}{mark}", f"{row['output_throughput']:.1f}", f"{row['speedup']:.2f}x",
                      f"{row['mean_tpot_ms']:.1f}", f"{row['spec_decode_acceptance_length']:.2f}",
                      f"{row['spec_decode_acceptance_rate']:.0f}")
    console = Console() if Console().is_terminal else Console(width=150)
    console.print(table)
    what = f" with eagle_choices {json.dumps(choice['eagle_choices'])}" if choice["eagle_choices"] else ""
    what += f" with tree {json.dumps(chosen.tree)}" if chosen.tree else ""
    what += f", draft_len_schedule {json.dumps(schedule)}" if schedule else ""
    click.echo(f"Chose max_draft_len {chosen.max_draft_len}{what} (by tokens/s); wrote {spec_path} "
               f"(old file: {summary['backup']}); report {out / 'tune.json'}. Rebuild with `trtspec build` to serve it.")


def _tune_served(spec, spec_path: Path, draft_lens, concurrency, prompt_set, repeats: int, raw: bool, out: Path,
                 dry_run: bool, as_json: bool) -> None:
    """tune --served (trtspec.bench.tune_served): one deployment per draft length and off."""
    from rich.console import Console

    from trtspec.bench import tune_served

    total = len(prompt_set) * repeats * (len(draft_lens) + 1) * len(concurrency)
    plan = {"served": True, "backend": spec.build.backend, "deployments": [0, *draft_lens], "concurrency": concurrency,
            "num_prompts": len(prompt_set), "max_tokens": spec.bench.max_tokens, "repeats": repeats,
            "requests": total, "spec": str(spec_path), "out": str(out)}
    if dry_run:
        _print_dry_run(plan, as_json)
        return
    _writable_dir(out)
    console = Console(stderr=True)
    with _progress(console, total, "tune") as progress:
        task = progress.add_task("tune (served)", total=total)
        result = tune_served.measure(spec, draft_lens, prompt_set, concurrency=concurrency,
                                     max_tokens=spec.bench.max_tokens, repeats=repeats, raw=raw,
                                     on_request=lambda r: progress.advance(task),
                                     on_phase=lambda text: progress.update(task, description=f"tune {text}"))
    decision, summary = tune_served.record(spec, spec_path, result, plan, out)
    if as_json:
        emit_json(summary)
        return
    for row in result["rows"]:
        click.echo(f"conc {row['concurrency']:>3}  max_draft_len {row['max_draft_len']:>2}  "
                   f"{row['output_throughput']:8.1f} tok/s  {row['speedup']:.2f}x  AL "
                   f"{row['spec_decode_acceptance_length']:.2f}")
    gate = f", acceptance gate {decision.gate[0]} requests below AL {decision.gate[1]}" if decision.gate else ""
    schedule = f", draft_len_schedule {decision.schedule}" if decision.schedule else ""
    for note in decision.notes:
        click.echo(f"note: {note}")
    click.echo(f"Chose max_draft_len {decision.max_draft_len}{schedule}{gate}; wrote {spec_path} "
               f"(old file: {summary['backup']}) and rebuilt {summary['engine']}; report {out / 'tune.json'}. "
               "Redeploy to serve it.")


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
