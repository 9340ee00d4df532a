"""scripts/gpu-smoke.sh cannot run here (no GPU, no TensorRT-LLM): what can be checked is that it
parses, that --dry-run prints the pipeline, and that every trtspec command and flag it would run
exists in this CLI."""

from __future__ import annotations

import shlex
import subprocess
from pathlib import Path

import click
import pytest

from trtspec.cli import main

SCRIPT = Path(__file__).resolve().parents[2] / "scripts" / "gpu-smoke.sh"


def _run(*args: str, cwd: Path) -> subprocess.CompletedProcess:
    return subprocess.run(["bash", str(SCRIPT), *args], cwd=cwd, capture_output=True, text=True, timeout=60)


def test_script_parses():
    assert subprocess.run(["bash", "-n", str(SCRIPT)]).returncode == 0


def _resolve(argv: list[str]) -> click.Command:
    """The click command an argv reaches, checking each --flag is one of its options."""
    command, args = main, argv[1:]
    ctx = click.Context(main)
    while isinstance(command, click.Group) and args and not args[0].startswith("-"):
        command = command.get_command(ctx, args[0])
        assert command is not None, f"no trtspec command {argv}"
        args = args[1:]
    if isinstance(command, click.Group) and args and args[0].startswith("-"):
        # options before a subcommand (trtspec deploy -c x stop) are not used by the script
        pass
    options = {opt for param in command.params for opt in getattr(param, "opts", [])}
    for arg in args:
        if arg.startswith("--"):
            assert arg.split("=")[0] in options, f"{arg} is not an option of trtspec {command.name}"
        elif arg == "-c":
            assert "-c" in options
    return command


@pytest.mark.parametrize("extra", [[], ["--model", "/models/llama-1b", "--draft", "/models/llama-1b",
                                        "--modes", "none draft-target eagle3", "--trtllm-version", "1.2.1"]])
def test_dry_run_prints_the_pipeline_with_real_commands_and_flags(extra, tmp_path):
    result = _run("--dry-run", *extra, cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    lines = [shlex.split(line) for line in result.stdout.splitlines() if line.strip()]
    assert lines and all(line[0] == "trtspec" for line in lines)
    commands = [" ".join(a for a in line[1:3] if not a.startswith("-")) for line in lines]
    for needed in ("build", "deploy", "infer", "bench", "deploy stop"):
        assert any(c.split()[:len(needed.split())] == needed.split() for c in commands), needed
    # trtllm builds load the package with TensorRT-LLM (--verify); trtllm-engine builds real engines
    builds = {line[line.index("-c") + 1]: line for line in lines if line[1] == "build"}
    assert all(("--verify" in line) == ("/trtllm-engine-" not in spec) for spec, line in builds.items())
    # each trtllm-engine deploy is asked through the ensemble and through the BLS
    engine_specs = {spec for spec in builds if "/trtllm-engine-" in spec}
    assert engine_specs
    for spec in engine_specs:
        asked = {line[line.index("--model") + 1] for line in lines
                 if line[1] == "infer" and line[line.index("-c") + 1] == spec}
        assert asked == {"ensemble", "tensorrt_llm_bls"}, spec
    for line in lines:
        _resolve(line)
    assert ("--trtllm-version" in result.stdout) == bool(extra)
    assert not any(tmp_path.iterdir()), "--dry-run wrote something"


def test_unknown_argument_and_help(tmp_path):
    bad = _run("--bogus", cwd=tmp_path)
    assert bad.returncode == 2 and "unknown argument --bogus" in bad.stderr
    helped = _run("--help", cwd=tmp_path)
    assert helped.returncode == 0 and "verified by contract" in helped.stdout
