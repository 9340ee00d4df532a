"""`trtspec convert`: the target checkpoint, FP8, the EAGLE-3 head or the draft, as the spec asks."""

from __future__ import annotations

import contextlib
import sys
import time

import click

from trtspec.cli._options import (
    config_option,
    dry_run_option,
    emit_json,
    fp8_option,
    json_option,
    mode_option,
    resolve_spec,
)

EPILOG = """\b
Examples:
  trtspec convert                                  # as trtspec.yaml says
  trtspec convert --mode eagle3                    # train + export an EAGLE-3 head (15-minute budget)
  trtspec convert --fp8                            # FP8 PTQ: HF + TensorRT-LLM checkpoints + quality report
  trtspec convert --mode draft-target --draft ./small-model
  trtspec convert --mode eagle3 --eval-prompts held-out.jsonl --json
  trtspec convert --dry-run                        # list what would be written, write nothing
  trtspec convert --mode eagle3 --head yuhuili/EAGLE3-LLaMA3.1-Instruct-8B   # an existing head, any layout
  trtspec convert --mode eagle3 --head ./my-speculators-head                  # checked, then canonical

\b
EAGLE-3 on your data, GPUs and nodes:
  trtspec convert --mode eagle3 --data sharegpt.jsonl --max-minutes 120
  trtspec convert --mode eagle3 --generate-url 127.0.0.1:8001 --generate-concurrency 32
  trtspec convert --mode eagle3 --nproc-per-node 8                  # torchrun, one process per GPU
  trtspec convert --mode eagle3 --nproc-per-node 8 --nnodes 2 --rdzv-endpoint node0:29400
  trtspec convert --mode eagle3 --nproc-per-node 8 --dry-run        # print the torchrun command

\b
Writes <workdir>/checkpoints/{target, target-fp8, target-fp8-trtllm, eagle3, draft, draft-fp8}/,
each with manifest.json. A re-run with unchanged inputs skips and says so.
"""

LAUNCH_OPTIONS = {"nproc_per_node", "nnodes", "rdzv_endpoint", "dry_run"}


@click.command(epilog=EPILOG)
@config_option
@mode_option
@fp8_option
@click.option("--draft", "draft_source", default=None, help="Draft model source (overrides speculative.draft).")
@click.option("--head", "head", default=None, metavar="DIR|HUB_ID",
              help="Use an existing EAGLE-3 head (a directory or a Hugging Face hub id, any layout) instead of "
                   "training one; checked against the target (overrides speculative.eagle3.head; implies --mode eagle3).")
@click.option("--data", type=click.Path(), default=None,
              help="EAGLE-3 training conversations: JSONL/JSON file or directory, ShareGPT, OpenAI messages or "
                   "{\"prompt\"} records (overrides speculative.eagle3.data).")
@click.option("--generate-url", default=None, metavar="HOST:PORT",
              help="gRPC address of a running trtspec/Triton server of this target that generates the answers "
                   "(overrides speculative.eagle3.generate_url).")
@click.option("--generate-concurrency", type=click.IntRange(1, 1024), default=None,
              help="Requests in flight per process with --generate-url.")
@click.option("--device", type=click.Choice(["auto", "cpu", "cuda"]), default=None,
              help="Where EAGLE-3 features and training run (overrides speculative.eagle3.device).")
@click.option("--max-minutes", type=click.FloatRange(min=0, min_open=True), default=None,
              help="Wall-clock budget of the whole EAGLE-3 stage (answers, features, training, report); "
                   "fewer answers where they would take over half of it; every process stops at the same step.")
@click.option("--max-steps", type=click.IntRange(min=1), default=None, help="EAGLE-3 optimizer steps at most.")
@click.option("--nproc-per-node", type=click.IntRange(min=1), default=None,
              help="Run EAGLE-3 training as N data-parallel processes on this node, started by torchrun "
                   "(one per GPU; gloo on CPUs).")
@click.option("--nnodes", type=click.IntRange(min=1), default=1, show_default=True,
              help="Nodes in a multi-node run (run the same command on each; needs --rdzv-endpoint).")
@click.option("--rdzv-endpoint", default=None, metavar="HOST:PORT", help="torchrun rendezvous address for --nnodes > 1.")
@click.option("--eval-prompts", type=click.Path(dir_okay=False), default=None,
              help="Held-out JSONL prompts for the EAGLE-3 acceptance report (default: the packaged "
                   "calibration set, which EAGLE-3 training never sees).")
@click.option("--eval-tokens", type=click.IntRange(4, 4096), default=48, show_default=True,
              help="Greedy tokens per held-out prompt in the EAGLE-3 acceptance report.")
@click.option("--acceptance-curve", is_flag=True,
              help="After EAGLE-3 training, also measure every saved snapshot (acceptance vs training time).")
@dry_run_option
@json_option
@click.pass_context
def convert(ctx, config_path, mode, fp8, draft_source, head, data, generate_url, generate_concurrency, device, max_minutes,
            max_steps, nproc_per_node, nnodes, rdzv_endpoint, eval_prompts, eval_tokens, acceptance_curve, dry_run,
            as_json) -> None:
    """ModelOpt conversion: record the target, FP8 PTQ, EAGLE-3 head training, draft pairing."""
    from trtspec.convert.eagle3.distributed import launched_by_torchrun

    spec = resolve_spec(config_path, speculative__mode=mode or ("eagle3" if head else None), quantization__fp8=fp8,
                        speculative__draft=draft_source, speculative__eagle3__head=head,
                        speculative__eagle3__data=data, speculative__eagle3__generate_url=generate_url,
                        speculative__eagle3__generate_concurrency=generate_concurrency,
                        speculative__eagle3__device=device, speculative__eagle3__max_minutes=max_minutes,
                        speculative__eagle3__max_steps=max_steps)
    if (nproc_per_node or nnodes > 1 or rdzv_endpoint) and not launched_by_torchrun():
        _launch(ctx, spec, nproc_per_node or 1, nnodes, rdzv_endpoint, dry_run=dry_run, as_json=as_json)
        return
    from rich.console import Console

    from trtspec.convert import launch
    from trtspec.convert.pipeline import planned_kinds, run_convert, summary

    placement, dist = launch.processes(spec)
    console = Console(stderr=True, quiet=not dist.is_main)
    if not as_json:
        where = f" (EAGLE-3 on {placement.describe()}, {dist.describe()})" if placement else ""
        console.print(f"convert: {', '.join(planned_kinds(spec))} for {spec.model.source}{where}"
                      + (" (dry run)" if dry_run else ""), soft_wrap=True)
    try:
        # ModelOpt and transformers print progress to stdout; keep stdout for our own output (--json).
        with contextlib.redirect_stdout(sys.stderr), Bars(console) as bars:
            results = run_convert(spec, report=bars, dry_run=dry_run, eval_prompts_path=eval_prompts,
                                  eval_tokens=eval_tokens, dist=dist, placement=placement)
            curve = None
            if acceptance_curve and spec.speculative.mode == "eagle3" and not dry_run and dist.is_main:
                curve = _curve(spec, eval_prompts, eval_tokens, bars)
    finally:
        dist.close()
    if not dist.is_main:
        return
    if as_json:
        emit_json({**summary(results), **({"acceptance_curve": curve} if curve is not None else {})})
        return
    _print_results(results, curve)


def _launch(ctx, spec, nproc_per_node: int, nnodes: int, rdzv_endpoint: str | None, *, dry_run: bool,
            as_json: bool) -> None:
    """Run (or with --dry-run print) the torchrun command that starts this convert as N processes."""
    from trtspec import subproc
    from trtspec.convert import launch

    command = launch.torchrun_plan(spec, _forwarded(ctx), nproc_per_node=nproc_per_node, nnodes=nnodes,
                                   rdzv_endpoint=rdzv_endpoint)
    if dry_run:
        if as_json:
            emit_json({"launcher": "torchrun", "command": command, "command_line": subproc.format_command(command)})
        else:
            click.echo(subproc.format_command(command))
        return
    launch.run(command)


def _forwarded(ctx) -> list[str]:
    """The options given on this command line, as each worker's `trtspec convert` takes them
    (the launch options themselves left out)."""
    from click.core import ParameterSource

    forwarded: list[str] = []
    for param in ctx.command.params:
        if param.name in LAUNCH_OPTIONS or ctx.get_parameter_source(param.name) != ParameterSource.COMMANDLINE:
            continue
        value = ctx.params[param.name]
        if getattr(param, "is_flag", False):
            forwarded.append(param.opts[-1] if value or not param.secondary_opts else param.secondary_opts[0])
        else:
            forwarded += [param.opts[-1], str(value)]
    return forwarded


class Bars:
    """Draws convert's progress events (trtspec.convert.progress): one bar per phase with
    tokens/s and the time left. Where stderr is not a terminal (a batch job's log), one plain
    line per phase every LOG_EVERY_S seconds and at its end instead."""

    LOG_EVERY_S = 30.0

    def __init__(self, console):
        self.console = console
        self.logged: dict[str, float] = {}
        from rich.progress import (
            BarColumn,
            MofNCompleteColumn,
            Progress,
            TextColumn,
            TimeElapsedColumn,
            TimeRemainingColumn,
        )

        self.progress = Progress(TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(),
                                 TextColumn("{task.fields[unit]}"), TextColumn("{task.fields[rate]}"),
                                 TimeRemainingColumn(), TimeElapsedColumn(), TextColumn("{task.fields[info]}"),
                                 console=console, transient=False)
        self.tasks: dict[str, tuple[int, float]] = {}

    def __enter__(self) -> Bars:
        self.progress.start()
        return self

    def __exit__(self, *exc) -> None:
        self.progress.stop()

    def __call__(self, event) -> None:
        from trtspec.convert.progress import Note

        if isinstance(event, Note):
            self.console.print(event.text, soft_wrap=True)
            return
        if event.phase not in self.tasks:
            task = self.progress.add_task(event.phase, total=event.total, unit=event.unit, rate="", info="")
            self.tasks[event.phase] = (task, time.monotonic())
        task, started = self.tasks[event.phase]
        seconds = time.monotonic() - started
        rate = f"{event.tokens / seconds:,.0f} tok/s" if event.tokens and seconds > 0 else ""
        self.progress.update(task, completed=event.completed, total=event.total, rate=rate, info=event.info)
        if not self.console.is_terminal and (event.completed >= event.total or
                                             seconds - self.logged.get(event.phase, -1e9) >= self.LOG_EVERY_S):
            self.logged[event.phase] = seconds
            self.console.print(f"{event.phase}: {event.completed}/{event.total} {event.unit} {rate} "
                               f"{seconds:.0f} s {event.info}".rstrip(), soft_wrap=True)


def _print_results(results, curve) -> None:
    for result in results:
        message = {"skipped": "up to date, skipped (inputs unchanged)", "planned": "would be written",
                   "written": "written"}[result.status]
        click.echo(f"{result.kind:<18} {message}: {result.path}")
        report = result.report or {}
        if "greedy_token_agreement" in report:
            click.echo(f"{'':<18} FP8 vs original: greedy agreement {report['greedy_token_agreement']:.1%}, "
                       f"perplexity {report['perplexity_fp8']} vs {report['perplexity_original']}")
        if "acceptance" in report:
            acc, training = report["acceptance"], report.get("training")
            trained = (f"{training['steps']} steps in {training['seconds']} s ({training.get('dtype', 'float32')} "
                       f"on {training.get('device', 'cpu')}{_machine(training.get('machine'))}, "
                       f"{training.get('processes', 1)} process(es), "
                       f"{training.get('tokens_per_s') or '-'} tokens/s); " if training else "")
            click.echo(f"{'':<18} mean acceptance length {acc['mean_acceptance_length']} at max_draft_len "
                       f"{acc['max_draft_len']} (bonus included), per position {acc['acceptance_per_position']}, "
                       f"{trained}method: {acc['method']}")
            if tuned := report.get("fine_tune"):
                click.echo(f"{'':<18} fine-tuned from {tuned['warm_start']['head']} (loaded bit for bit): held-out "
                           f"mean acceptance length {tuned['before']['mean_acceptance_length']} before, "
                           f"{tuned['after']['mean_acceptance_length']} kept (step {tuned['kept_step']}, the best of "
                           f"{len(tuned['candidates'])} snapshots by acceptance)")
            if acc.get("speed"):
                speed = acc["speed"]
                click.echo(f"{'':<18} on this machine, concurrency 1, {speed['draft']}: "
                           f"{speed['speculative_tokens_per_s']} tokens/s with the head, "
                           f"{speed['plain_tokens_per_s']} without ({speed['speedup']}x)")
        if "head" in report:
            head = report["head"]
            click.echo(f"{'':<18} imported EAGLE-3 head: {head['layout']} layout, reads the outputs of target layers "
                       f"{head['layer_ids']} ({head['layer_ids_from']}), {head['forward']} forward")
            for line in head["notes"]:
                click.echo(f"{'':<18} note: {line}")
        if "budget" in report:
            click.echo(f"{'':<18} {_budget(report)}")
        if report.get("warning"):
            click.secho(f"warning: {report['warning']}", fg="yellow", err=True)
    for point in curve or []:
        click.echo(f"curve: step {point['step']:>5} {point['seconds']:>7.0f} s  mean acceptance length "
                   f"{point['mean_acceptance_length']}  per position {point['acceptance_per_position']}")


def _budget(report: dict) -> str:
    """The eagle3 stage's time against its budget: what was planned, what each part took."""
    plan, timings, data = report["budget"]["plan"], report.get("timings", {}), report.get("data", {})

    def minutes(name: str) -> str:
        return f"{timings[name] / 60:.1f}" if name in timings else "-"

    return (f"{minutes('total_s')} of {plan['budget_s'] / 60:.1f} min: data {minutes('data_s')} "
            f"({plan['samples']} of {plan['requested']} samples), features {minutes('features_s')}, training "
            f"{minutes('training_s')}, export and acceptance {minutes('finish_s')}; draft vocabulary "
            f"{data.get('draft_vocab_size', 0):,} tokens ({data.get('draft_vocab_coverage', 0):.2%} of the answers)")


def _machine(machine: dict | None) -> str:
    """' (AMD EPYC, AVX2, 2 threads on 2 cores)' for the training line; '' for older reports."""
    if not machine:
        return ""
    return f" ({machine['cpu']}, {machine['isa']}, {machine['threads']} threads on {machine['cores']} cores)"


def _curve(spec, eval_prompts, eval_tokens, report):
    from trtspec.artifacts import Layout
    from trtspec.convert.eagle3.curve import acceptance_curve
    from trtspec.convert.pipeline import held_out_prompts

    layout = Layout.from_spec(spec)
    return acceptance_curve(spec, layout, layout.checkpoint("target"), held_out_prompts(spec, eval_prompts),
                            new_tokens=eval_tokens, report=report)
