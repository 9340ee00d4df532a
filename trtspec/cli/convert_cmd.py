"""`trtspec convert`: the target checkpoint, FP8, the EAGLE-3 head or the draft, as the spec asks."""

from __future__ import annotations

import contextlib
import sys

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
  trtspec convert --mode eagle3                    # train + export an EAGLE-3 head (<= 15 min CPU)
  trtspec convert --fp8                            # FP8 PTQ: HF + TensorRT-LLM checkpoints + quality report
  trtspec convert --mode draft-target --draft ./small-model
  trtspec convert --mode eagle3 --eval-prompts held-out.jsonl --json
  trtspec convert --dry-run                        # list what would be written, write nothing

\b
Writes <workdir>/checkpoints/{target, target-fp8, target-fp8-trtllm, eagle3, draft, draft-fp8}/,
each with manifest.json. A re-run with unchanged inputs skips and says so.
"""


@click.command(epilog=EPILOG)
@config_option
@mode_option
@fp8_option
@click.option("--draft", "draft_source", default=None, help="Draft model source (overrides speculative.draft).")
@click.option("--eval-prompts", type=click.Path(dir_okay=False), default=None,
              help="Held-out JSONL prompts for the EAGLE-3 acceptance report (default: the packaged "
                   "calibration set, which EAGLE-3 training never sees).")
@click.option("--eval-tokens", type=click.IntRange(4, 4096), default=48, show_default=True,
              help="Greedy tokens per held-out prompt in the EAGLE-3 acceptance report.")
@click.option("--acceptance-curve", is_flag=True,
              help="After EAGLE-3 training, also measure every saved snapshot (acceptance vs training time).")
@dry_run_option
@json_option
def convert(config_path, mode, fp8, draft_source, eval_prompts, eval_tokens, acceptance_curve, dry_run,
            as_json) -> None:
    """ModelOpt conversion: record the target, FP8 PTQ, EAGLE-3 head training, draft pairing."""
    from rich.console import Console

    from trtspec.convert.pipeline import planned_kinds, run_convert, summary

    spec = resolve_spec(config_path, speculative__mode=mode, quantization__fp8=fp8, speculative__draft=draft_source)
    console = Console(stderr=True)
    if not as_json:
        console.print(f"convert: {', '.join(planned_kinds(spec))} for {spec.model.source}"
                      + (" (dry run)" if dry_run else ""))
    # ModelOpt and transformers print progress to stdout; keep stdout for our own output (--json).
    with contextlib.redirect_stdout(sys.stderr):
        results = run_convert(spec, console=console, dry_run=dry_run, eval_prompts_path=eval_prompts,
                              eval_tokens=eval_tokens)
    curve = None
    if acceptance_curve and spec.speculative.mode == "eagle3" and not dry_run:
        curve = _curve(spec, eval_prompts, eval_tokens, console)
    if as_json:
        emit_json({**summary(results), **({"acceptance_curve": curve} if curve is not None else {})})
        return
    for result in results:
        message = {"skipped": "up to date, skipped (inputs unchanged)", "planned": "would be written",
                   "written": "written"}[result.status]
        click.echo(f"{result.kind:<18} {message}: {result.path}")
        report = result.report or {}
        if "greedy_token_agreement" in report:
            click.echo(f"{'':<18} FP8 vs original: greedy agreement {report['greedy_token_agreement']:.1%}, "
                       f"perplexity {report['perplexity_fp8']} vs {report['perplexity_original']}")
        if "acceptance" in report:
            acc = report["acceptance"]
            click.echo(f"{'':<18} mean acceptance length {acc['mean_acceptance_length']} at max_draft_len "
                       f"{acc['max_draft_len']} (bonus included), per position {acc['acceptance_per_position']}, "
                       f"{report['training']['steps']} steps in {report['training']['seconds']} s "
                       f"({report['training'].get('dtype', 'float32')}); "
                       f"method: {acc['method']}")
    for point in curve or []:
        click.echo(f"curve: step {point['step']:>5} {point['seconds']:>7.0f} s  mean acceptance length "
                   f"{point['mean_acceptance_length']}  per position {point['acceptance_per_position']}")


def _curve(spec, eval_prompts, eval_tokens, console):
    from trtspec.artifacts import Layout
    from trtspec.convert.curve import acceptance_curve
    from trtspec.convert.pipeline import held_out_prompts

    layout = Layout.from_spec(spec)
    with contextlib.redirect_stdout(sys.stderr):
        return acceptance_curve(spec, layout, layout.checkpoint("target"), held_out_prompts(spec, eval_prompts),
                                new_tokens=eval_tokens, console=console)
