"""Options shared by every command, defined once, and the helpers that apply them."""

from __future__ import annotations

import json
import sys
from typing import Any

import click

from trtspec.backends import NAMES as BACKEND_NAMES
from trtspec.modes import NAMES as MODE_NAMES
from trtspec.spec.loading import load_spec
from trtspec.spec.schema import Spec

config_option = click.option(
    "-c", "--config", "config_path", type=click.Path(dir_okay=False), default=None,
    help="Spec file (default ./trtspec.yaml; built-in defaults when absent).")
dry_run_option = click.option("--dry-run", is_flag=True, help="Print what would be done; write nothing.")
json_option = click.option("--json", "as_json", is_flag=True, help="Print machine-readable JSON on stdout.")
mode_option = click.option("--mode", type=click.Choice(list(MODE_NAMES)),
                           default=None, help="Override speculative.mode.")
backend_option = click.option("--backend", type=click.Choice(list(BACKEND_NAMES)),
                              default=None, help="Override build.backend.")
fp8_option = click.option("--fp8/--no-fp8", default=None, help="Override quantization.fp8.")

# Request options of generate and infer. Their ranges are checked while the command line is
# parsed, so a bad value is refused in one line before any model loads or server is called.


def _check(rule: str, ok, fix: str | None = None):
    """A click callback refusing a value outside `rule` with `must be <rule> (got value); fix`."""
    def callback(ctx: click.Context, param: click.Parameter, value: Any) -> Any:
        if value is not None and not ok(value):
            raise click.BadParameter(f"must be {rule} (got {value})" + (f"; {fix}" if fix else ""),
                                     ctx=ctx, param=param)
        return value
    return callback


def _sampling(name: str):
    """A click callback refusing a `name` (temperature, top_p, top_k) outside trtspec.sampling_rules'
    range, in its words and with its fix: the engine's and the served model's own rule."""
    from trtspec import sampling_rules

    def callback(ctx: click.Context, param: click.Parameter, value: Any) -> Any:
        problem = None if value is None else sampling_rules.sampling_problem(**{name: value})
        if problem:
            raise click.BadParameter(f"{problem[1]}; {sampling_rules.FIXES[name]}", ctx=ctx, param=param)
        return value
    return callback


def request_options(max_tokens: int, temperature: float | None):
    """--max-tokens, --temperature, --top-p, --top-k and --seed, with these two defaults."""
    options = [
        click.option("--max-tokens", type=int, default=max_tokens, show_default=True,
                     callback=_check("at least 1", lambda v: v >= 1), help="New tokens to generate (>= 1)."),
        click.option("--temperature", type=float, default=temperature, show_default=temperature is not None,
                     callback=_sampling("temperature"), help="Sampling temperature; 0 is greedy (the default)."),
        click.option("--top-p", type=float, default=None, callback=_sampling("top_p"),
                     help="Nucleus sampling mass in (0, 1]: keep the fewest tokens holding it (1 = off)."),
        click.option("--top-k", type=int, default=None, callback=_sampling("top_k"),
                     help="Sample from the k most likely tokens (0 = off)."),
        click.option("--seed", type=int, default=None, help="Sampling seed (reproducible runs)."),
    ]

    def decorate(command):
        for option in reversed(options):  # as if stacked in this order: --help lists them so
            command = option(command)
        return command
    return decorate


def resolve_spec(config_path: str | None, **overrides: Any) -> Spec:
    """Load the spec and apply flag overrides given as dotted keys (None means not given)."""
    return load_spec(config_path, {key.replace("__", "."): value for key, value in overrides.items()})


def emit_json(data: Any) -> None:
    """Write one JSON document to stdout (for --json)."""
    sys.stdout.write(json.dumps(data, indent=2, default=str) + "\n")
