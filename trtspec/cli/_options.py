"""Options shared by every command, defined once, and the helpers that apply them."""

from __future__ import annotations

import json
import sys
from typing import Any

import click

from trtspec.spec import Spec, load_spec

config_option = click.option(
    "-c", "--config", "config_path", type=click.Path(dir_okay=False), default=None,
    help="Spec file (default ./trtspec.yaml; built-in defaults when absent).")
dry_run_option = click.option("--dry-run", is_flag=True, help="Print what would be done; write nothing.")
json_option = click.option("--json", "as_json", is_flag=True, help="Print machine-readable JSON on stdout.")
mode_option = click.option("--mode", type=click.Choice(["eagle3", "draft-target", "ngram", "none"]),
                           default=None, help="Override speculative.mode.")
backend_option = click.option("--backend", type=click.Choice(["cpu", "trtllm", "trtllm-engine"]),
                              default=None, help="Override build.backend.")
fp8_option = click.option("--fp8/--no-fp8", default=None, help="Override quantization.fp8.")


def resolve_spec(config_path: str | None, **overrides: Any) -> Spec:
    """Load the spec and apply flag overrides given as dotted keys (None means not given)."""
    return load_spec(config_path, {key.replace("__", "."): value for key, value in overrides.items()})


def emit_json(data: Any) -> None:
    """Write one JSON document to stdout (for --json)."""
    sys.stdout.write(json.dumps(data, indent=2, default=str) + "\n")
