"""`trtspec spec check|show`: validate and print the resolved spec."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import click

from trtspec.cli._options import config_option, emit_json, json_option, resolve_spec


@click.group()
def spec() -> None:
    """Check or show the resolved spec."""


@spec.command(epilog="\b\nExamples:\n  trtspec spec check\n  trtspec spec check -c prod.yaml")
@config_option
def check(config_path: str | None) -> None:
    """Validate the spec and what it points at (model sources, prompt files); print one line per
    problem and exit non-zero if any."""
    from trtspec.errors import SpecError
    from trtspec.spec.loading import spec_file

    resolved = resolve_spec(config_path)
    problems = missing_references(resolved)
    if problems:
        raise SpecError(problems)
    source = spec_file(config_path)
    what = f"{source} is valid" if source else "no ./trtspec.yaml here; the built-in defaults are valid"
    click.echo(f"ok: {what} (model {resolved.model.source}, mode {resolved.speculative.mode}, "
               f"backend {resolved.build.backend})")


def missing_references(resolved: Any) -> list[str]:
    """One problem line per model source or prompt file the spec names that is not there.

    Cheap checks only (no weights are read or hashed), so a spec for a 70B model checks instantly.
    """
    from trtspec.models import source_problem
    from trtspec.spec.schema import problem_line

    problems = []
    for field, source in (("model.source", resolved.model.source), ("speculative.draft", resolved.speculative.draft)):
        found = source_problem(source) if source else None
        if found:
            problems.append(problem_line(field, found[0], got=repr(source), fix=found[1]))
        elif source and resolved.build.backend == "cpu" and (Path(source).expanduser() / "config.json").is_file():
            problems += _unrunnable(field, Path(source).expanduser() / "config.json", resolved.build.max_seq_len)
    for field, prompts in (("speculative.eagle3.prompts", resolved.speculative.eagle3.prompts),
                           ("quantization.calibration_prompts", resolved.quantization.calibration_prompts),
                           ("bench.prompts", resolved.bench.prompts)):
        if prompts and not Path(prompts).is_file():
            problems.append(problem_line(field, "no such prompt file", got=repr(prompts),
                                         fix="give a JSONL file, or leave it empty for the packaged set"))
    return problems


def _unrunnable(field: str, config_json: Path, max_seq_len: int) -> list[str]:
    """The problem line for a checkpoint the cpu engine cannot run (config.json alone is read)."""
    import json

    from trtspec.errors import IncompatibleArtifactError
    from trtspec.runtime.checkpoints.architectures import refuse_unrunnable
    from trtspec.spec.schema import problem_line

    try:
        refuse_unrunnable(json.loads(config_json.read_text()), max_seq_len, "build.backend cpu")
    except IncompatibleArtifactError as error:
        return [problem_line(field, error.problem, fix=error.fix)]
    except ValueError:
        return [problem_line(field, "config.json is not valid JSON", fix="restore the file")]
    return []


@spec.command(epilog="\b\nExamples:\n  trtspec spec show\n  trtspec spec show --json")
@config_option
@json_option
def show(config_path: str | None, as_json: bool) -> None:
    """Print the resolved spec with every default filled in."""
    from trtspec.spec.loading import spec_to_yaml

    resolved = resolve_spec(config_path)
    if as_json:
        emit_json(resolved.model_dump(mode="json"))
    else:
        click.echo(spec_to_yaml(resolved), nl=False)
