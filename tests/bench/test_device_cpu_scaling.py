"""scripts/device_cpu_scaling.sh runs on the device machine only (its 16-core CPU): here, that it
parses, that every script, comparison (python -m benchmarks NAME) and flag it calls exists, and that
its parts run on a tiny model (random_smollm2.py's cache, decode-forward's variants, linear-kernels)."""

from __future__ import annotations

import json
import os
import re
import shlex
import subprocess
import sys
from pathlib import Path

import pytest

from trtspec.runtime.kernels import native
from trtspec.testing.tiny import make_tiny_llama

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "scripts" / "device_cpu_scaling.sh"


def _python(*argv: str, env: dict | None = None, timeout: int = 300) -> subprocess.CompletedProcess:
    """`python ARGV` in the repository root: a script of scripts/ or `-m benchmarks NAME`."""
    return subprocess.run([sys.executable, *argv], capture_output=True, text=True,
                          timeout=timeout, env={**os.environ, **(env or {})}, cwd=ROOT)


def _harness(name: str, *args: str, **kwargs) -> subprocess.CompletedProcess:
    return _python("-m", "benchmarks", name, *args, **kwargs)


def test_script_parses_and_refuses_an_unknown_verb():
    assert subprocess.run(["bash", "-n", str(SCRIPT)]).returncode == 0
    result = subprocess.run(["bash", str(SCRIPT), "nonsense"], capture_output=True, text=True)
    assert result.returncode == 2 and "prepare" in result.stdout


def _calls() -> list[list[str]]:
    """argv (after `python3`) of every script and comparison the run step calls, the forward
    variants expanded."""
    text = SCRIPT.read_text().replace("\\\n", " ")
    calls = [shlex.split(match) for match in re.findall(r"python3 ((?:scripts/\S+\.py|-m benchmarks \S+)[^>\n]*)", text)]
    variants = re.search(r"for variant in (.*?); do", text, re.S).group(1)
    calls += [["-m", "benchmarks", "decode-forward", *shlex.split(v)] for v in shlex.split(variants)]
    return [c for c in calls if "$variant" not in c]


def _program(call: list[str]) -> list[str]:
    """The part of a call that names what runs: [script] or ["-m", "benchmarks", NAME]."""
    return call[:3] if call[0] == "-m" else call[:1]


def test_every_called_script_takes_the_flags_it_is_given():
    calls = _calls()
    assert {" ".join(_program(c)) for c in calls} >= {
        "scripts/random_smollm2.py", "-m benchmarks linear-kernels", "-m benchmarks decode-forward",
        "-m benchmarks threads", "-m benchmarks scaling-ceiling"}
    helps: dict[str, str] = {}
    for call in calls:
        program = " ".join(_program(call))
        assert call[0] == "-m" or (ROOT / call[0]).is_file(), program
        if program not in helps:
            result = _python(*_program(call), "--help", timeout=60)
            assert result.returncode == 0, result.stderr
            helps[program] = result.stdout
        for flag in (a.split("=")[0] for a in call[len(_program(call)):] if a.startswith("--")):
            assert re.search(rf"{re.escape(flag)}\b", helps[program]), f"{program} has no {flag}"


@pytest.fixture(scope="module")
def random_cache(tmp_path_factory):
    """A TRTSPEC_CACHE whose smollm2 is random_smollm2.py's output, shaped like a tiny Llama."""
    like = make_tiny_llama(tmp_path_factory.mktemp("like"), vocab_size=1100)
    cache = tmp_path_factory.mktemp("cache")
    result = _python("scripts/random_smollm2.py", "--like", str(like), env={"TRTSPEC_CACHE": str(cache)})
    assert result.returncode == 0, result.stderr
    return cache


def test_random_smollm2_writes_a_marked_cache_and_never_over_a_real_one(random_cache, tmp_path):
    target = random_cache / "models" / "smollm2"
    assert "random weights" in json.loads((target / "manifest.json").read_text())["note"]
    assert (target / "model.safetensors").is_file() and (target / "tokenizer.json").is_file()
    real = tmp_path / "models" / "smollm2"
    real.mkdir(parents=True)
    (real / "manifest.json").write_text(json.dumps({"kind": "model"}))  # the real model's cache has no note
    result = _python("scripts/random_smollm2.py", "--like", str(target), env={"TRTSPEC_CACHE": str(tmp_path)})
    assert result.returncode != 0 and "holds the real SmolLM2" in result.stderr
    assert sorted(p.name for p in real.iterdir()) == ["manifest.json"]


@pytest.mark.slow
@pytest.mark.parametrize("variant", [["engine", "1", "--onednn-linear"], ["hf", "1"]])
def test_decode_forward_variants_print_their_result(random_cache, variant):
    result = _harness("decode-forward", *variant, env={"TRTSPEC_CACHE": str(random_cache)})
    assert result.returncode == 0, result.stderr[-2000:]
    if "--onednn-linear" in variant:  # the "before": every layer on oneDNN, whatever load chose
        kernels = [x for x in result.stdout.splitlines() if x.startswith("linear kernels")][-1]
        assert "'onednn'" in kernels and "'mkl'" not in kernels
    line = [x for x in result.stdout.splitlines() if x.startswith("RESULT")][-1]
    b1, b8 = (float(v) for v in re.search(r"b1=([\d.]+)ms b8=([\d.]+)ms", line).groups())
    assert b1 > 0 and b8 > 0 and line.split()[1] == variant[0]


@pytest.mark.slow
def test_linear_kernels_table_has_both_kernels_for_every_layer():
    result = _harness("linear-kernels", "--threads", "1")
    assert result.returncode == 0, result.stderr[-2000:]
    rows = [line.split("|")[1:-1] for line in result.stdout.splitlines() if re.match(r"\| \d+ x \d+", line)]
    assert len(rows) == 10 and {r[2].strip() for r in rows} == {"onednn", "mkl"}
    assert all(float(r[3]) > 0 and r[6].strip() in {"1", "2", "4", "8", "-"} for r in rows)


@pytest.mark.skipif(not native.available(), reason="the row kernel cannot be built here")
def test_linear_sequence_table_compares_the_row_kernel_with_onednn():
    result = _harness("linear-sequence", "--threads", "1", "--rows", "1,8", "--rounds", "1", "--layers", "1")
    assert result.returncode == 0, result.stderr[-2000:]
    rows = [line.split("|")[1:-1] for line in result.stdout.splitlines() if re.match(r"\| \d+ \|", line)]
    assert [r[0].strip() for r in rows] == ["1", "8"]
    assert all(float(r[1]) > 0 and float(r[2]) > 0 and float(r[3]) > 0 for r in rows)
    assert "8 layers" in result.stdout
