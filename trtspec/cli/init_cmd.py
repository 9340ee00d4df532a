"""`trtspec init`: write a commented example spec."""

from __future__ import annotations

from pathlib import Path

import click

from trtspec.errors import TrtSpecError


@click.command(epilog="\b\nExamples:\n  trtspec init\n  trtspec init -o my-model.yaml --force")
@click.option("-o", "--output", default="trtspec.yaml", show_default=True, type=click.Path(dir_okay=False),
              help="Where to write the spec.")
@click.option("--force", is_flag=True, help="Overwrite an existing file.")
def init(output: str, force: bool) -> None:
    """Write a commented trtspec.yaml whose defaults run the demo as is."""
    from trtspec.spec.template import render_template

    path = Path(output)
    if path.exists() and not force:
        raise TrtSpecError(f"{path} already exists", fix="pass --force to overwrite it")
    if path.parent.exists() and not path.parent.is_dir():
        raise TrtSpecError(f"{path}: {path.parent} is a file, not a directory", fix="choose another -o")
    if not path.parent.is_dir():
        raise TrtSpecError(f"{path}: the directory {path.parent} does not exist",
                           fix=f"create it first (mkdir -p {path.parent}) or choose another -o")
    partial = path.with_name(f".{path.name}.part")  # renamed into place: no half-written spec
    try:
        partial.write_text(render_template(), encoding="utf-8")
        partial.replace(path)
    except OSError as error:
        partial.unlink(missing_ok=True)
        raise TrtSpecError(f"{path}: cannot write the spec ({(error.strerror or str(error)).lower()})",
                           fix="choose a writable location with -o") from None
    click.echo(f"Wrote {path}. Next: trtspec spec check -c {path}")
