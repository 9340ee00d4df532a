"""The CLI: instant help, init/spec round trip, one-line errors, exit codes."""

from __future__ import annotations

import subprocess
import sys

from click.testing import CliRunner

from trtspec.cli import COMMANDS, main


def test_help_lists_every_stage():
    """What keeps --help instant is that it imports no heavy module (the next test); a wall-clock
    bound here measured the machine's load, not the CLI (docs/TEST-AUDIT.md)."""
    completed = subprocess.run([sys.executable, "-c", "import sys; from trtspec.cli import main; "
                                "main(['--help'])"], capture_output=True, text=True)
    for command in ("init", "spec", "models", "convert", "build", "deploy", "infer", "bench"):
        assert f"  {command}" in completed.stdout


def test_help_imports_no_heavy_module():
    code = ("import sys\nfrom trtspec.cli import main\ntry:\n    main(['--help'])\nexcept SystemExit:\n    pass\n"
            "heavy = [m for m in ('torch', 'transformers', 'modelopt', 'tritonclient', 'tensorrt_llm') if m in sys.modules]\n"
            "print('HEAVY', heavy)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True).stdout
    assert "HEAVY []" in out


def test_every_registered_command_loads_and_has_help():
    runner = CliRunner()
    for name in COMMANDS:
        result = runner.invoke(main, [name, "--help"])
        assert result.exit_code == 0, (name, result.output)
        assert "Usage:" in result.output


def test_init_then_check_then_show(in_tmp):
    runner = CliRunner()
    assert runner.invoke(main, ["init"]).exit_code == 0
    assert (in_tmp / "trtspec.yaml").exists()
    again = runner.invoke(main, ["init"])
    assert again.exit_code != 0 and "--force" in again.output
    check = runner.invoke(main, ["spec", "check"])
    assert check.exit_code == 0 and "ok:" in check.output
    show = runner.invoke(main, ["spec", "show", "--json"])
    assert '"mode": "ngram"' in show.output


def test_bad_spec_gives_one_line_per_problem_and_exit_2(in_tmp):
    (in_tmp / "bad.yaml").write_text("build:\n  max_draft_len: 0\n")
    result = CliRunner().invoke(main, ["spec", "check", "-c", "bad.yaml"])
    assert result.exit_code == 2
    lines = [line for line in result.output.splitlines() if line.strip()]
    assert lines == ["error: build.max_draft_len: unknown key; did you mean speculative.max_draft_len or "
                     "speculative.suffix.max_draft_len?"]
    assert "Traceback" not in result.output


def test_debug_env_shows_the_traceback(in_tmp, monkeypatch):
    monkeypatch.setenv("TRTSPEC_DEBUG", "1")
    (in_tmp / "bad.yaml").write_text("speculative:\n  mode: warp\n")
    result = CliRunner().invoke(main, ["spec", "check", "-c", "bad.yaml"])
    assert result.exit_code != 0
    assert result.exception is not None and type(result.exception).__name__ == "SpecError"
