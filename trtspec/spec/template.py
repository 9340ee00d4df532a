"""Render the spec's defaults as a commented YAML file (what `trtspec init` writes).

The comments are the field docstrings of trtspec.spec.schema, so the example can never drift from the
schema.
"""

from __future__ import annotations

from typing import Any

import yaml
from pydantic import BaseModel

from trtspec.spec.schema import Spec

HEADER = """\
# trtspec.yaml: one file drives convert, build, deploy, infer and bench.
# The defaults run the embedded demo as is: SmolLM2-135M, n-gram speculation, cpu backend,
# a real Triton server on 127.0.0.1. Every command takes -c FILE; its flags override this file.
# Check it with `trtspec spec check`; see every resolved value with `trtspec spec show`.
"""


def render_template(spec: Spec | None = None, command: str | None = None) -> str:
    """The commented spec: the defaults, or `spec`'s values (what `trtspec init --model ...` chose)."""
    lines = [HEADER if spec is None else HEADER.splitlines()[0] + "\n"
             f"# Written by `{command or 'trtspec init'}`: the values below are that model's, the rest defaults.\n"
             + "\n".join(HEADER.splitlines()[3:]) + "\n"]
    _render_model(spec or Spec(), lines, indent=0)
    return "\n".join(lines) + "\n"


def _render_model(model: BaseModel, lines: list[str], indent: int) -> None:
    pad = "  " * indent
    for name, field in type(model).model_fields.items():
        value = getattr(model, name)
        for doc_line in (field.description or "").splitlines():
            lines.append(f"{pad}# {doc_line.strip()}")
        if name == "mode" and indent == 1:  # speculative.mode: the mode x backend table, a row a line
            from trtspec.modes import comment_rows

            lines.extend(f"{pad}#   {row}" for row in comment_rows())
        if isinstance(value, BaseModel):
            lines.append(f"{pad}{name}:")
            _render_model(value, lines, indent + 1)
            if indent == 0:
                lines.append("")
        else:
            lines.append(f"{pad}{name}: {_scalar(value)}")


def _scalar(value: Any) -> str:
    return yaml.safe_dump(value, default_flow_style=True).strip().removesuffix("...").strip()
