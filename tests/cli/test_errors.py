"""Every user mistake ends in one `error: ...` line and a non-zero exit, never a traceback.

Each case of issue 13 item 2 is run through the real CLI (CliRunner in an empty directory; a few
also as a real `trtspec` process, to show stderr holds exactly one line and the exit code).
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
import yaml
from click.testing import CliRunner

from trtspec import modes
from trtspec.cli import main
from trtspec.cli._errors import as_cli_error

TRTSPEC = str(Path(sys.executable).parent / "trtspec")


def one_line(result, exit_code: int) -> str:
    """The single error line of a CliRunner result: the last line on stderr and the only one
    starting `error:` (a command may report progress on stderr before it fails)."""
    assert result.exit_code == exit_code, result.output
    assert "Traceback" not in result.output and "Usage:" not in result.output
    lines = [line for line in result.stderr.splitlines() if line.strip()]
    errors = [line for line in lines if line.startswith("error: ")]
    assert len(errors) == 1 and lines[-1] == errors[0], result.stderr
    return errors[0]


def run(*args: str):
    return CliRunner().invoke(main, list(args))


# 1. Files that are not UTF-8 text.

NOT_UTF8 = {"binary": b"\x89PNG\r\n\x1a\n\x00\x00\x00\rIHDR\xff\xfe",
            "utf-16": "model:\n  source: smollm2\n".encode("utf-16")}


@pytest.mark.parametrize("kind", NOT_UTF8)
def test_spec_file_not_utf8(in_tmp, kind):
    (in_tmp / "spec.yaml").write_bytes(NOT_UTF8[kind])
    line = one_line(run("spec", "check", "-c", "spec.yaml"), 2)
    assert line.startswith("error: spec.yaml: the spec file is not UTF-8 text") and "save it as UTF-8" in line


@pytest.mark.parametrize("command", [["bench", "--prompts", "bad.jsonl"], ["tune", "--prompts", "bad.jsonl"],
                                     ["convert", "--mode", "eagle3", "--dry-run", "--eval-prompts", "bad.jsonl"]])
def test_prompt_file_not_utf8(in_tmp, command):
    (in_tmp / "bad.jsonl").write_bytes('{"prompt": "hi"}\n'.encode("utf-16"))
    line = one_line(run(*command), 1)
    assert line == "error: bad.jsonl: the prompt file is not UTF-8 text (byte 0); save it as UTF-8 text"


def test_training_prompts_named_by_the_spec_not_utf8(in_tmp, tiny_llama):
    (in_tmp / "bad.jsonl").write_bytes(NOT_UTF8["binary"])
    (in_tmp / "trtspec.yaml").write_text(yaml.safe_dump(
        {"model": {"source": str(tiny_llama)}, "speculative": {"mode": "eagle3", "eagle3": {"prompts": "bad.jsonl"}}}))
    assert "bad.jsonl: the prompt file is not UTF-8 text" in one_line(run("convert", "--dry-run"), 1)


# 2. Output paths that cannot be written.

def test_init_into_a_missing_directory(in_tmp):
    line = one_line(run("init", "-o", "missing-dir/x.yaml"), 1)
    assert line == ("error: missing-dir/x.yaml: the directory missing-dir does not exist; "
                    "create it first (mkdir -p missing-dir) or choose another -o")


def test_init_under_a_file(in_tmp):
    (in_tmp / "afile").write_text("")
    assert "afile is a file, not a directory" in one_line(run("init", "-o", "afile/x.yaml"), 1)


def test_init_into_an_unwritable_directory(in_tmp):
    # /sys refuses new files even to root; where it is absent the directory check answers.
    line = one_line(run("init", "-o", "/sys/trtspec-test.yaml"), 1)
    assert line.startswith("error: /sys/trtspec-test.yaml: ")
    assert not Path("/sys/trtspec-test.yaml").exists() and not Path("/sys/.trtspec-test.yaml.part").exists()


@pytest.mark.parametrize("command, key, value", [
    (["build"], "build", {"output_dir": "afile/engines"}),
    (["convert"], "workdir", "afile/work"),
])
def test_output_under_a_file_is_one_line(in_tmp, tiny_llama, command, key, value):
    (in_tmp / "afile").write_text("")
    (in_tmp / "trtspec.yaml").write_text(yaml.safe_dump({"model": {"source": str(tiny_llama)}, key: value}))
    line = one_line(run(*command), 1)
    assert line.startswith("error: afile/") and "not a directory" in line and "TRTSPEC_DEBUG=1" in line


@pytest.mark.parametrize("command", [
    ["bench", "--url", "127.0.0.1:9", "--num-prompts", "1"],  # nothing listens: the out check comes first
    ["tune", "--engine", "no-such-engine", "--num-prompts", "1"],
])
def test_report_directory_is_checked_before_measuring(in_tmp, command):
    (in_tmp / "afile").write_text("")
    line = one_line(run(*command, "--out", "afile/report"), 1)
    assert line.startswith("error: afile/report: not a directory"), line


def test_debug_shows_the_traceback_of_a_mapped_os_error(in_tmp, tiny_llama, monkeypatch):
    (in_tmp / "afile").write_text("")
    (in_tmp / "trtspec.yaml").write_text(yaml.safe_dump({"model": {"source": str(tiny_llama)},
                                                         "build": {"output_dir": "afile/engines"}}))
    monkeypatch.setenv("TRTSPEC_DEBUG", "1")
    result = run("build")
    assert result.exit_code != 0 and isinstance(result.exception, NotADirectoryError)


def test_a_bug_keeps_its_traceback():
    assert as_cli_error(RuntimeError("internal invariant")) is None
    assert as_cli_error(KeyError("x")) is None


# 3. Unknown spec keys name the closest real key; (got ...) comes before the fix.

@pytest.mark.parametrize("text, expected", [
    ("speculative:\n  max_draft_lenn: 5\n", "speculative.max_draft_lenn: unknown key; did you mean max_draft_len?"),
    ("build:\n  max_draft_len: 5\n", "build.max_draft_len: unknown key; did you mean speculative.max_draft_len or "
     "speculative.suffix.max_draft_len?"),
    ("speculativ:\n  mode: ngram\n", "speculativ: unknown key; did you mean speculative?"),
    ("build:\n  backend: trtlm\n",
     "build.backend: must be one of 'cpu', 'trtllm' or 'trtllm-engine' (got 'trtlm'); did you mean trtllm?"),
    ("speculative:\n  mode: eagle3\nbuild:\n  backend: trtllm-engine\n",
     "speculative.mode: eagle3 cannot run on build.backend trtllm-engine (EAGLE-3 needs the LLM-API backend) "
     "(got eagle3); use build.backend: trtllm"),
])
def test_spec_problem_lines(in_tmp, text, expected):
    (in_tmp / "trtspec.yaml").write_text(text)
    assert one_line(run("spec", "check"), 2) == f"error: {expected}"


# 4. Unknown commands and click's usage errors, in the same style.

@pytest.mark.parametrize("args, expected", [
    (["biuld"], "error: no such command 'biuld'; did you mean 'build'?"),
    (["spec", "chek"], "error: no such command 'chek'; did you mean 'check'?"),
    (["frobnicate"], "error: no such command 'frobnicate'; see 'trtspec --help'"),
    (["--bogus"], "error: no such option '--bogus'; see 'trtspec --help'"),
    (["generate", "--temprature", "1", "hi"], "error: no such option '--temprature'; did you mean '--temperature'?"),
    (["generate"], "error: missing argument 'PROMPT'; see 'trtspec generate --help'"),
    (["build", "--mode", "warp"],
     f"error: --mode: 'warp' is not one of {', '.join(repr(name) for name in modes.NAMES)}; "
     "see 'trtspec build --help'"),
    (["infer", "--max-tokens", "many", "hi"], "error: --max-tokens: 'many' is not a valid integer; "
                                              "see 'trtspec infer --help'"),
])
def test_usage_errors_are_one_line(in_tmp, args, expected):
    assert one_line(run(*args), 2) == expected


# 5. Request arguments are refused while parsing, before any model loads.

BAD_REQUESTS = [
    (["--top-p", "0"], "--top-p: must be in (0, 1] (got 0.0); use 1.0 to disable top-p"),
    (["--top-p", "1.5"], "--top-p: must be in (0, 1] (got 1.5); use 1.0 to disable top-p"),
    (["--max-tokens", "0"], "--max-tokens: must be at least 1 (got 0); see 'trtspec {command} --help'"),
    (["--temperature", "-1"], "--temperature: must be >= 0 (got -1.0); use 0 for greedy"),
    (["--temperature", "1e-40"], "--temperature: must be 0 (greedy) or at least 1e-05; smaller values overflow "
                                 "the logits (got 1e-40); use 0 for greedy"),
    (["--temperature", "nan"], "--temperature: must be a finite number, 0 for greedy (got nan); use 0 for greedy"),
    (["--top-k", "-1"], "--top-k: must be >= 0, 0 meaning off (got -1); use 0 to disable top-k"),
]


@pytest.mark.parametrize("command", ["generate", "infer"])
@pytest.mark.parametrize("flags, problem", BAD_REQUESTS, ids=[" ".join(f) for f, _ in BAD_REQUESTS])
def test_bad_request_arguments(in_tmp, command, flags, problem):
    # No engine and no server exist here: only the argument check can answer.
    assert one_line(run(command, *flags, "hi"), 2) == "error: " + problem.format(command=command)


def test_bad_request_argument_imports_no_model_code(in_tmp):
    code = ("import sys\nfrom trtspec.cli import main\ntry:\n    main(['generate', '--top-p', '0', 'hi'])\n"
            "except SystemExit as e:\n    print('EXIT', e.code)\n"
            "print('HEAVY', [m for m in ('torch', 'transformers', 'tritonclient') if m in sys.modules])")
    completed = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=in_tmp)
    assert "EXIT 2" in completed.stdout and "HEAVY []" in completed.stdout, completed
    assert completed.stderr.strip() == "error: --top-p: must be in (0, 1] (got 0.0); use 1.0 to disable top-p"


# 6. spec check names its file and checks what the spec points at.

def test_spec_check_names_the_file_or_the_defaults(in_tmp):
    assert run("spec", "check").output.startswith("ok: no ./trtspec.yaml here; the built-in defaults are valid")
    run("init", "-o", "mine.yaml")
    assert run("spec", "check", "-c", "mine.yaml").output.startswith("ok: mine.yaml is valid")
    run("init")
    assert run("spec", "check").output.startswith("ok: trtspec.yaml is valid")


def test_spec_check_refuses_sources_and_prompt_files_that_are_not_there(in_tmp, tiny_llama):
    (in_tmp / "empty-dir").mkdir()
    (in_tmp / "trtspec.yaml").write_text(yaml.safe_dump({
        "model": {"source": "./no-such-model"},
        "speculative": {"mode": "draft-target", "draft": "empty-dir"},
        "bench": {"prompts": "missing.jsonl"}}))
    result = run("spec", "check")
    assert result.exit_code == 2
    assert result.stderr.splitlines() == [
        "error: model.source: not a directory, a .gguf file or a known alias (smollm2) (got './no-such-model'); "
        "give a Hugging Face checkpoint directory",
        "error: speculative.draft: no config.json (got 'empty-dir'); point at a Hugging Face checkpoint directory",
        "error: bench.prompts: no such prompt file (got 'missing.jsonl'); "
        "give a JSONL file, or leave it empty for the packaged set"]
    (in_tmp / "trtspec.yaml").write_text(yaml.safe_dump({
        "model": {"source": str(tiny_llama)}, "speculative": {"mode": "draft-target", "draft": "smollm2"}}))
    assert run("spec", "check").exit_code == 0


# 7. serve.host: an address or a resolvable name; beyond loopback, deploy warns.

@pytest.mark.parametrize("host, problem", [("no such host", "not an IP address or a host name"),
                                           ("nowhere.invalid", "the host name does not resolve on this machine"),
                                           ("", "not an IP address or a host name")])
def test_serve_host_must_be_an_address(in_tmp, host, problem):
    (in_tmp / "trtspec.yaml").write_text(yaml.safe_dump({"serve": {"host": host}}))
    line = one_line(run("spec", "check"), 2)
    assert line.startswith(f"error: serve.host: {problem} (got {host!r}); use 127.0.0.1")


@pytest.mark.parametrize("host", ["127.0.0.1", "localhost", "::1", "0.0.0.0", "10.1.2.3"])
def test_serve_host_addresses_and_names_pass(in_tmp, host):
    (in_tmp / "trtspec.yaml").write_text(yaml.safe_dump({"serve": {"host": host}}))
    assert run("spec", "check").exit_code == 0


@pytest.mark.parametrize("host, warned", [("0.0.0.0", True), ("127.0.0.1", False), ("localhost", False)])
def test_deploy_warns_when_listening_beyond_loopback(in_tmp, tiny_llama, host, warned):
    (in_tmp / "trtspec.yaml").write_text(yaml.safe_dump({"model": {"source": str(tiny_llama)},
                                                         "serve": {"host": host}}))
    assert run("build").exit_code == 0
    result = run("deploy", "--dry-run", "--json")
    assert result.exit_code == 0, result.output
    warning = [line for line in result.stderr.splitlines() if line.startswith("warning:")]
    assert len(warning) == warned
    if warned:
        assert "0.0.0.0 would listen beyond this machine" in warning[0] and "no authentication" in warning[0]


# 8. The same through a real `trtspec` process: exit code and exactly one line on stderr.

@pytest.mark.parametrize("args, exit_code, fragment", [
    (["spec", "check", "-c", "utf16.yaml"], 2, "utf16.yaml: the spec file is not UTF-8 text"),
    (["init", "-o", "missing-dir/x.yaml"], 1, "the directory missing-dir does not exist"),
    (["biuld"], 2, "did you mean 'build'?"),
    (["generate", "--top-p", "0", "hi"], 2, "--top-p: must be in (0, 1]"),
])
def test_real_process_exit_code_and_one_stderr_line(in_tmp, args, exit_code, fragment):
    (in_tmp / "utf16.yaml").write_bytes(NOT_UTF8["utf-16"])
    env = {**os.environ, "NO_COLOR": "1"}
    env.pop("TRTSPEC_DEBUG", None)
    completed = subprocess.run([TRTSPEC, *args], capture_output=True, text=True, cwd=in_tmp, env=env, timeout=60)
    assert completed.returncode == exit_code
    assert completed.stdout == ""
    assert len(completed.stderr.splitlines()) == 1 and fragment in completed.stderr, completed.stderr
