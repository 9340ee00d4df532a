"""`trtspec spec check|show`: validate and print the resolved spec."""

from __future__ import annotations

import click

from trtspec.cli._options import config_option, emit_json, json_option, resolve_spec


@click.group()
def spec() -> None:
    """Check or show the resolved spec."""


@spec.command(epilog="\b\nExamples:\n  trtspec spec check\n  trtspec spec check -c prod.yaml")
@config_option
def check(config_path: str | None) -> None:
    """Validate the spec; print one line per problem and exit non-zero if any."""
    resolved = resolve_spec(config_path)
    click.echo(f"ok: {config_path or 'trtspec.yaml (or defaults)'} is valid "
               f"(model {resolved.model.source}, mode {resolved.speculative.mode}, backend {resolved.build.backend})")


@spec.command(epilog="\b\nExamples:\n  trtspec spec show\n  trtspec spec show --json")
@config_option
@json_option
def show(config_path: str | None, as_json: bool) -> None:
    """Print the resolved spec with every default filled in."""
    from trtspec.spec import spec_to_yaml

    resolved = resolve_spec(config_path)
    if as_json:
        emit_json(resolved.model_dump(mode="json"))
    else:
        click.echo(spec_to_yaml(resolved), nl=False)
