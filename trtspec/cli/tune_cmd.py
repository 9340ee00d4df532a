"""`trtspec tune`: pick max_draft_len (trees, a schedule by load, layerskip's exit layer) by measured tokens/s."""

from __future__ import annotations

import json
from pathlib import Path

import click
from click.core import ParameterSource

from trtspec.cli._options import config_option, dry_run_option, emit_json, json_option, mode_option, resolve_spec
from trtspec.cli.bench_cmd import _int_list, _print_dry_run, _progress, _writable_dir

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


@click.command(epilog=TUNE_EPILOG)
@config_option
@click.option("--engine", "engine_dir", type=click.Path(file_okay=False), default=None,
              help="cpu engine bundle (default: the one `trtspec build` made for the spec).")
@click.option("--prompts", type=click.Path(dir_okay=False), default=None,
              help="JSONL prompt file (default: bench.prompts, else the packaged set).")
@click.option("--draft-lens", callback=_int_list, default="1,2,3,4,6,8", show_default=True,
              help="Comma-separated max_draft_len candidates (chains; layerskip default 2,4).")
@click.option("--exit-layers", callback=_int_list, default=None,
              help="layerskip: exit layers to measure (default: L/8, L/4, 3L/8, L/2 of the target's L layers); "
                   "the fastest goes into speculative.layerskip.exit_layer.")
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
@click.option("--target", "deploy_target", type=click.Choice(["local", "docker", "k8s", "dynamo", "dynamo-k8s"]),
              default="local", show_default=True,
              help="--served: the deploy target the choice is for: dynamo and dynamo-k8s write the TensorRT-LLM "
                   "1.3 line's schedule and rate gate (acceptance_rate_threshold), the others 1.2.1's; dynamo "
                   "deploys each candidate as a Dynamo stack here and measures through its OpenAI frontend.")
@click.option("--out", "out_dir", type=click.Path(file_okay=False), default=None, help="Report directory.")
@dry_run_option
@json_option
def tune(config_path, engine_dir, prompts, draft_lens, exit_layers, trees, tree_shapes, mode, max_tokens, num_prompts,
         concurrency, repeats, served, raw, deploy_target, out_dir, dry_run, as_json) -> None:
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
    layerskip = spec.speculative.mode == "layerskip"
    if exit_layers and not layerskip:
        raise click.BadParameter("exit layers are a layerskip setting; set --mode layerskip", param_hint="--exit-layers")
    if layerskip and click.get_current_context().get_parameter_source("draft_lens") == ParameterSource.DEFAULT:
        draft_lens = [2, 4]  # an early exit not trained for it accepts little: short chains only
    prompt_set = load_prompts(spec.bench.prompts, "bench", spec.bench.num_prompts)
    spec_path = Path(config_path or DEFAULT_CONFIG)
    if served or spec.build.backend != "cpu":
        if engine_dir or (trees and trees.strip().lower() != "none") or (
                tree_shapes and tree_shapes.strip().lower() != "none"):
            raise click.UsageError("tune --served deploys chains of each --draft-lens (no --engine, --trees, "
                                   "--tree-shapes)")
        out = Path(out_dir) if out_dir else runner.default_out_dir(spec, "tune")
        _tune_served(spec, spec_path, draft_lens, concurrency, prompt_set, repeats, raw, out, dry_run, as_json,
                     deploy_target)
        return
    engine_path = Path(engine_dir) if engine_dir else runner.default_engine_dir(spec)
    exits = tuning.exit_layer_candidates(tuning.bundle_layers(engine_path), exit_layers) if layerskip else []
    shapes = tuning.candidates(draft_lens, tree_list, shape_list, exits)
    out = Path(out_dir) if out_dir else runner.default_out_dir(spec, "tune")
    total = len(prompt_set) * repeats * (len(shapes) + 1) * len(concurrency)
    if dry_run:
        plan = {"engine": str(engine_path), "draft_lens": draft_lens, "trees": tree_list, "tree_shapes": shape_list,
                **({"exit_layers": exits} if layerskip else {}), "num_prompts": len(prompt_set),
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
        shape = f"exit {row['exit_layer']}, {shape}" if row.get("exit_layer") else shape
        mark = mark if row.get("exit_layer") == choice.get("exit_layer") else ""
        table.add_row(str(row["concurrency"]), f"{shape}{mark}", f"{row['output_throughput']:.1f}", f"{row['speedup']:.2f}x",
                      f"{row['mean_tpot_ms']:.1f}", f"{row['spec_decode_acceptance_length']:.2f}",
                      f"{row['spec_decode_acceptance_rate']:.0f}")
    console = Console() if Console().is_terminal else Console(width=150)
    console.print(table)
    what = f" with eagle_choices {json.dumps(choice['eagle_choices'])}" if choice["eagle_choices"] else ""
    what += f" with tree {json.dumps(chosen.tree)}" if chosen.tree else ""
    what += f", draft_len_schedule {json.dumps(schedule)}" if schedule else ""
    if chosen.exit_layer is not None:
        what += f" at exit_layer {chosen.exit_layer}"
        if choice["speedup"] < 1:  # said, not hidden: the fastest early exit still loses to plain decoding
            click.echo(f"note: the fastest exit layer runs {choice['speedup']:.2f}x plain decoding here; "
                       "speculative.mode none is faster on this machine and these prompts")
    click.echo(f"Chose max_draft_len {chosen.max_draft_len}{what} (by tokens/s); wrote {spec_path} "
               f"(old file: {summary['backup']}); report {out / 'tune.json'}. Rebuild with `trtspec build` to serve it.")


def _tune_served(spec, spec_path: Path, draft_lens, concurrency, prompt_set, repeats: int, raw: bool, out: Path,
                 dry_run: bool, as_json: bool, deploy_target: str = "local") -> None:
    """tune --served (trtspec.bench.tune_served): one deployment per draft length and off."""
    from rich.console import Console

    from trtspec.bench import tune_served

    total = len(prompt_set) * repeats * (len(draft_lens) + 1) * len(concurrency)
    plan = {"served": True, "backend": spec.build.backend, "target": deploy_target, "deployments": [0, *draft_lens],
            "concurrency": concurrency,
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
                                     on_phase=lambda text: progress.update(task, description=f"tune {text}"),
                                     target=deploy_target)
    decision, summary = tune_served.record(spec, spec_path, result, plan, out, deploy_target)
    if as_json:
        emit_json(summary)
        return
    for row in result["rows"]:
        click.echo(f"conc {row['concurrency']:>3}  max_draft_len {row['max_draft_len']:>2}  "
                   f"{row['output_throughput']:8.1f} tok/s  {row['speedup']:.2f}x  AL "
                   f"{row['spec_decode_acceptance_length']:.2f}")
    gate = (f", acceptance gate {decision.gate[0]} requests below AL {decision.gate[1]}" if decision.gate_kind == "length"
            else f", acceptance gate {decision.gate[0]} iterations below rate {decision.gate[1]}") if decision.gate else ""
    schedule = f", draft_len_schedule {decision.schedule}" if decision.schedule else ""
    for note in decision.notes:
        click.echo(f"note: {note}")
    click.echo(f"Chose max_draft_len {decision.max_draft_len}{schedule}{gate}; wrote {spec_path} "
               f"(old file: {summary['backup']}) and rebuilt {summary['engine']}; report {out / 'tune.json'}. "
               "Redeploy to serve it.")
