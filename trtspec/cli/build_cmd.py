"""`trtspec build` and `trtspec plan`: engines for a backend, and the GPU memory plan."""

from __future__ import annotations

import sys

import click

from trtspec.cli._options import (
    backend_option,
    config_option,
    dry_run_option,
    emit_json,
    fp8_option,
    json_option,
    mode_option,
    resolve_spec,
)

BUILD_EPILOG = """\b
Examples:
  trtspec build                                   # backend, mode and limits from trtspec.yaml
  trtspec build --backend cpu --mode eagle3
  trtspec build --backend trtllm --mode eagle3 --fp8 --dry-run
  trtspec build --backend trtllm --trtllm-version 1.2.1 --gpu h200 --tp-size 2
  trtspec build --backend trtllm-engine --mode draft-target --max-draft-len 8
  trtspec build --json > build.json
"""

PLAN_EPILOG = """\b
Examples:
  trtspec plan                                    # the spec's GPU, tp/pp, limits
  trtspec plan --gpu h200 --fp8 --max-batch-size 64
  trtspec plan --tp-size 2 --json
  trtspec plan -c llama-70b.yaml                  # model.source may hold only config.json
"""


def _print_plan(plan, console) -> None:
    from rich.table import Table

    table = Table(title="GPU memory plan (per GPU)", show_lines=False)
    table.add_column("item")
    table.add_column("per GPU", justify="right")
    for item, value in plan.rows():
        style = None if plan.fits or item != "verdict" else "red"
        table.add_row(item, value, style=style)
    console.print(table)
    if plan.suggestion:
        console.print(f"suggestion: {plan.suggestion}")


def _gpu_layout_options(function):
    """--gpu/--tp-size/--pp-size, shared by build and plan (one definition, same help)."""
    function = click.option("--pp-size", type=int, default=None, help="Override build.pp_size.")(function)
    function = click.option("--tp-size", type=int, default=None, help="Override build.tp_size.")(function)
    return click.option("--gpu", type=click.Choice(["h100", "h200"]), default=None,
                        help="Override build.gpu (what the memory plan is made for).")(function)


@click.command(epilog=BUILD_EPILOG)
@config_option
@backend_option
@mode_option
@fp8_option
@_gpu_layout_options
@click.option("--trtllm-version", type=click.Choice(["1.1.0", "1.2.1"]), default=None,
              help="Override build.trtllm_version: the TensorRT-LLM release GPU artifacts are written for.")
@click.option("--max-draft-len", type=click.IntRange(1, 64), default=None,
              help="Override the mode's draft cap: speculative.max_draft_len (suffix: speculative.suffix.max_draft_len).")
@click.option("--verify", is_flag=True, help="trtllm: load the LLM with tensorrt_llm and generate once (GPU).")
@click.option("--force", is_flag=True, help="Rebuild even when the engine is up to date.")
@dry_run_option
@json_option
def build(config_path, backend, mode, fp8, gpu, tp_size, pp_size, trtllm_version, max_draft_len, verify, force,
          dry_run, as_json) -> None:
    """Build engines/<name>/ (engine.json + backend artifacts) for the cpu, trtllm or trtllm-engine backend.

    GPU backends are planned first and refused when the plan does not fit. --dry-run prints the
    plan and every file and command that would be written or run, and writes nothing.
    """
    from rich.console import Console

    from trtspec.builders import build as run_build

    spec = resolve_spec(config_path, build__backend=backend, speculative__mode=mode, quantization__fp8=fp8,
                        build__gpu=gpu, build__tp_size=tp_size, build__pp_size=pp_size,
                        build__trtllm_version=trtllm_version, speculative__max_draft_len=max_draft_len,
                        speculative__suffix__max_draft_len=max_draft_len)
    console = Console(stderr=True)
    if as_json:
        result = run_build(spec, dry_run=dry_run, verify=verify, force=force)
        emit_json(result.to_dict())
        return
    with console.status(f"Building the {spec.build.backend} engine ({spec.speculative.mode}) ..."):
        result = run_build(spec, dry_run=dry_run, verify=verify, force=force)
    out = Console(file=sys.stdout, soft_wrap=True, highlight=False)
    if result.plan is not None:
        _print_plan(result.plan, out)
    if dry_run:
        import json

        out.print(f"[bold]dry run[/bold]: would write {result.engine_dir}/ (nothing written)")
        out.print(f"--- {result.engine_dir}/engine.json", markup=False)
        out.print(json.dumps(result.engine, indent=2), markup=False)
        for name, content in result.files.items():
            out.print(f"--- {result.engine_dir}/{name}", markup=False)
            out.print(content.rstrip("\n"), markup=False)
        return
    for message in result.messages:
        out.print(message, markup=False)
    if result.smoke and result.smoke.get("status") == "ok":
        out.print(f"smoke generation: {result.smoke['num_tokens']} tokens: {result.smoke['text']!r}", markup=False)
    if not result.skipped:
        out.print(f"built {result.engine_dir}/ (engine.json, backend {spec.build.backend}, mode {spec.speculative.mode})",
                  markup=False)


@click.command(epilog=PLAN_EPILOG)
@config_option
@backend_option
@mode_option
@fp8_option
@_gpu_layout_options
@click.option("--max-batch-size", type=int, default=None, help="Override build.max_batch_size.")
@click.option("--max-seq-len", type=int, default=None, help="Override build.max_seq_len.")
@click.option("--max-draft-len", type=click.IntRange(1, 64), default=None,
              help="Override the mode's draft cap: speculative.max_draft_len (suffix: speculative.suffix.max_draft_len).")
@click.option("--fp8-kv-cache/--no-fp8-kv-cache", default=None, help="Override quantization.fp8_kv_cache.")
@json_option
def plan(config_path, backend, mode, fp8, gpu, tp_size, pp_size, max_batch_size, max_seq_len, max_draft_len,
         fp8_kv_cache, as_json) -> None:
    """Print the GPU memory plan: weights, paged KV cache (target + draft), activations, headroom.

    Reads only the models' config.json (no weights): plan a 70B deployment before downloading it.
    Exits with status 3 when the plan does not fit (after printing it and a suggestion).
    """
    from rich.console import Console

    from trtspec.builders import plan_inputs

    spec = resolve_spec(config_path, build__backend=backend, speculative__mode=mode, quantization__fp8=fp8,
                        build__gpu=gpu, build__tp_size=tp_size, build__pp_size=pp_size,
                        build__max_batch_size=max_batch_size, build__max_seq_len=max_seq_len,
                        speculative__max_draft_len=max_draft_len, speculative__suffix__max_draft_len=max_draft_len,
                        quantization__fp8_kv_cache=fp8_kv_cache)
    result = plan_inputs(spec)
    if as_json:
        emit_json(result.to_dict())
    else:
        _print_plan(result, Console(file=sys.stdout, soft_wrap=True, highlight=False))
    if not result.fits:
        sys.exit(3)
