"""`trtspec models list|fetch|show`: model sources and the cache."""

from __future__ import annotations

import click

from trtspec.cli._options import emit_json, json_option


@click.group()
def models() -> None:
    """List, fetch and inspect model sources (HF directory, .gguf file, alias)."""


@models.command("list", epilog="\b\nExamples:\n  trtspec models list\n  trtspec models list --json")
@json_option
def list_models(as_json: bool) -> None:
    """Show the built-in aliases and the models already in the cache."""
    from trtspec.models import ALIASES, cached_models

    cached = {row["name"]: row for row in cached_models()}
    rows = [{"name": name, "kind": "alias", "description": alias.description, "cached": name in cached}
            for name, alias in ALIASES.items()]
    rows += [{"name": name, "kind": "cache", "description": row["source"], "cached": True}
             for name, row in cached.items() if name not in ALIASES]
    if as_json:
        emit_json(rows)
        return
    for row in rows:
        mark = "cached" if row["cached"] else "not fetched"
        click.echo(f"{row['name']:<12} {row['kind']:<6} {mark:<12} {row['description']}")


@models.command(epilog="\b\nExamples:\n  trtspec models fetch smollm2\n  trtspec models fetch ./model.gguf")
@click.argument("source")
@json_option
def fetch(source: str, as_json: bool) -> None:
    """Fetch and convert a model source once; print where the checkpoint is."""
    from trtspec.models import resolve_model

    info = resolve_model(source)
    if as_json:
        emit_json(info.summary())
    else:
        click.echo(f"{info.name}: {info.path} (sha256 {info.sha256[:12]}, {info.architecture})")


@models.command(epilog="\b\nExamples:\n  trtspec models show smollm2\n  trtspec models show ./my-hf-dir --json")
@click.argument("source")
@json_option
def show(source: str, as_json: bool) -> None:
    """Print a model's shape: layers, hidden size, heads, vocabulary, weights hash."""
    from trtspec.models import resolve_model

    summary = resolve_model(source, quiet=as_json).summary()
    if as_json:
        emit_json(summary)
        return
    for key, value in summary.items():
        click.echo(f"{key:<24} {value}")
