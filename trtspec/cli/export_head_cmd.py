"""`trtspec export-head`: the spec's EAGLE-3 head in another tool's layout (eagle, modelopt, speculators)."""

from __future__ import annotations

from pathlib import Path

import click

from trtspec.cli._options import config_option, emit_json, json_option, resolve_spec

EPILOG = """\b
Examples:
  trtspec export-head --format eagle ./head-for-vllm        # midlayer.*, d2t + t2d: vLLM, SGLang, TensorRT-LLM
  trtspec export-head --format speculators ./head-spec      # vllm serve ./head-spec
  trtspec export-head --format speculators ./h --verifier HuggingFaceTB/SmolLM2-135M-Instruct
  trtspec export-head --format modelopt ./head-mo --force   # ModelOpt >= 0.43 layout

\b
Reads <workdir>/checkpoints/eagle3 (trained, fine-tuned or imported by `trtspec convert`); the
layer ids are written in each reader's own convention, the tensors bit for bit.
"""


@click.command(epilog=EPILOG)
@config_option
@click.option("--format", "fmt", type=click.Choice(["eagle", "modelopt", "speculators"]), required=True,
              help="Layout to write (see the examples for who reads each).")
@click.argument("directory", type=click.Path(file_okay=False))
@click.option("--force", is_flag=True, help="Replace DIRECTORY if it exists.")
@click.option("--verifier", default=None, metavar="PATH_OR_HUB_ID",
              help="speculators: the target the head names (default: the model's hub id, else its local "
                   "directory, else the converted target, as an absolute path).")
@json_option
def export_head(config_path, fmt, directory, force, verifier, as_json) -> None:
    """Write the EAGLE-3 head of checkpoints/eagle3 in another tool's layout."""
    from trtspec.convert.eagle3.heads.export import export_checkpoint

    out = Path(directory)
    summary = export_checkpoint(resolve_spec(config_path), out, fmt, force=force, verifier=verifier)
    if as_json:
        emit_json(summary)
        return
    ids = summary["layer_ids"]
    click.echo(f"Wrote {out} ({fmt} layout, {summary['tensors']} tensors) for {summary['consumers']}; target "
               f"layers: outputs of {ids['output_of_layer']} = inputs of {ids['input_of_layer']}")
    for note in summary["notes"]:
        click.secho(f"note: {note}", fg="yellow", err=True)
