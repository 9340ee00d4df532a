"""`trtspec init`: write a commented spec, the demo's or one for the model you name."""

from __future__ import annotations

from pathlib import Path

import click

from trtspec.cli._options import backend_option, mode_option
from trtspec.errors import TrtSpecError

EPILOG = """\b
Examples:
  trtspec init
  trtspec init -o my-model.yaml --force
  trtspec init --model meta-llama/Llama-3.1-8B-Instruct --head yuhuili/EAGLE3-LLaMA3.1-Instruct-8B --backend trtllm
  trtspec init --model ./my-model --draft ./my-small-model            # draft-target
  trtspec init --model smollm2 --mode ngram
"""


@click.command(epilog=EPILOG)
@click.option("-o", "--output", default="trtspec.yaml", show_default=True, type=click.Path(dir_okay=False),
              help="Where to write the spec.")
@click.option("--force", is_flag=True, help="Overwrite an existing file.")
@click.option("--model", "model", default=None, metavar="SOURCE",
              help="Target model: a directory, a Hugging Face hub id, a .gguf file or smollm2 (model.source).")
@mode_option
@click.option("--head", default=None, metavar="DIR|HUB_ID",
              help="An existing EAGLE-3 head, any layout (speculative.eagle3.head; implies --mode eagle3).")
@click.option("--draft", default=None, metavar="SOURCE",
              help="A draft model (speculative.draft; implies --mode draft-target).")
@backend_option
def init(output: str, force: bool, model, mode, head, draft, backend) -> None:
    """Write a commented trtspec.yaml: the demo's defaults, or the spec for --model."""
    from trtspec.modes import draft_cap_field
    from trtspec.spec.schema import Spec
    from trtspec.spec.template import render_template

    path = Path(output)
    if path.exists() and not force:
        raise TrtSpecError(f"{path} already exists", fix="pass --force to overwrite it")
    if path.parent.exists() and not path.parent.is_dir():
        raise TrtSpecError(f"{path}: {path.parent} is a file, not a directory", fix="choose another -o")
    if not path.parent.is_dir():
        raise TrtSpecError(f"{path}: the directory {path.parent} does not exist",
                           fix=f"create it first (mkdir -p {path.parent}) or choose another -o")
    chosen = {"model": model, "mode": mode, "head": head, "draft": draft, "backend": backend}
    spec = _spec(**chosen) if any(value is not None for value in chosen.values()) else None
    command = "trtspec init" + "".join(f" --{k} {v}" for k, v in chosen.items() if v is not None)
    partial = path.with_name(f".{path.name}.part")  # renamed into place: no half-written spec
    try:
        partial.write_text(render_template(spec, command), encoding="utf-8")
        partial.replace(path)
    except OSError as error:
        partial.unlink(missing_ok=True)
        raise TrtSpecError(f"{path}: cannot write the spec ({(error.strerror or str(error)).lower()})",
                           fix="choose a writable location with -o") from None
    s = (spec or Spec()).speculative
    drafts = "no drafts" if s.mode == "none" else f"drafts of at most {s.draft_cap} tokens, {draft_cap_field(s.mode)}"
    click.echo(f"Wrote {path} (speculative.mode {s.mode}: {drafts}). Next: trtspec spec check -c {path}")


def _spec(*, model, mode, head, draft, backend):
    """The spec those flags describe, validated as a spec file would be (one line per problem)."""
    from trtspec.models import source_problem
    from trtspec.spec.schema import validate_spec

    mode = mode or ("eagle3" if head else "draft-target" if draft else None)
    for field, source in (("model.source", model), ("speculative.draft", draft)):
        problem = source_problem(source) if source else None
        if problem:
            raise TrtSpecError(f"{field}: {problem[0]} (got {source!r})", fix=problem[1])
    data: dict = {"model": {"source": model}, "speculative": {"mode": mode, "draft": draft, "eagle3": {"head": head}},
                  "build": {"backend": backend}}
    for section in data.values():  # flags not given keep the defaults
        for key in [k for k, v in section.items() if v is None or v == {"head": None}]:
            del section[key]
    return validate_spec({k: v for k, v in data.items() if v})
