"""`trtspec export-head`: the spec's EAGLE-3 head in another tool's layout (eagle, modelopt, speculators)."""

from __future__ import annotations

from pathlib import Path

import click

from trtspec.cli._options import config_option, emit_json, json_option, resolve_spec

EPILOG = """\b
Examples:
  trtspec export-head --format eagle ./head-for-vllm        # midlayer.*, d2t + t2d: vLLM, SGLang, TensorRT-LLM
  trtspec export-head --format speculators ./head-spec      # vllm serve ./head-spec
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
@json_option
def export_head(config_path, fmt, directory, force, as_json) -> None:
    """Write the EAGLE-3 head of checkpoints/eagle3 in another tool's layout."""
    from trtspec import artifacts
    from trtspec.artifacts import Layout
    from trtspec.convert.eagle3.heads.export import export_head as write
    from trtspec.errors import TrtSpecError

    spec = resolve_spec(config_path)
    layout = Layout.from_spec(spec)
    head, target = layout.checkpoint("eagle3"), layout.checkpoint("target")
    if not (head / "config.json").is_file() or not (target / "config.json").is_file():
        raise TrtSpecError(f"no EAGLE-3 head in {head} (or no target in {target})",
                           fix="run `trtspec convert --mode eagle3` (with --head SOURCE to import one) first")
    out = Path(directory)
    if out.exists() and not force:
        raise TrtSpecError(f"{out} already exists", fix="pass --force to replace it, or choose another directory")
    with artifacts.atomic_dir(out) as staging:
        summary = write(head, staging, fmt, target_config=artifacts.read_json(target / "config.json"),
                        verifier=spec.model.source, max_draft_len=spec.speculative.max_draft_len)
    summary["path"] = str(out)
    if as_json:
        emit_json(summary)
        return
    ids = summary["layer_ids"]
    click.echo(f"Wrote {out} ({fmt} layout, {summary['tensors']} tensors) for {summary['consumers']}; target "
               f"layers: outputs of {ids['output_of_layer']} = inputs of {ids['input_of_layer']}")
    for note in summary["notes"]:
        click.secho(f"note: {note}", fg="yellow", err=True)
