"""`trtspec convert` with the ModelOpt and transformers of the GPU container the Dockerfile names.

The Dockerfile installs trtspec without dependencies into nvcr.io/nvidia/tritonserver:25.12-
trtllm-python-py3, so convert runs there on the container's ModelOpt 0.37.0 and transformers
4.56.0 (version table: trtspec/builders/contract_data/containers.json). This test makes a second
virtualenv with exactly those two versions from PyPI and runs the tiny EAGLE-3 convert + export in
it, then builds the result for TensorRT-LLM 1.1.0 with this checkout's own environment.

What differs from the container: torch stays 2.13.0 (the CPU build from the local file; the
container has 2.9.0a0 with CUDA) and Python is this machine's 3.11 (the container's is 3.12.3).
The virtualenv is cached in ~/.cache/trtspec/venvs/ under a key of these pins, so only the first
run pays the install (measured in docs/BUILD.md); a half-made one is never reused.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from trtspec.builders import contracts

pytestmark = pytest.mark.slow

ROOT = Path(__file__).resolve().parents[2]
# What trtspec's convert imports besides ModelOpt and transformers (installed at their newest).
LIGHT = ("safetensors", "pyyaml", "pydantic>=2.7,<3", "click>=8.1", "rich>=13", "accelerate>=1.0")


def container_pins(tag: str) -> list[str]:
    row = contracts.containers()["containers"][tag]
    return ["torch==2.13.0", f"nvidia-modelopt=={row['modelopt']}", f"transformers=={row['transformers']}"]


def container_venv(tag: str) -> Path:
    """A cached virtualenv with the container's ModelOpt and transformers; built once per pin set."""
    pins = container_pins(tag) + list(LIGHT)
    key = hashlib.sha256(json.dumps([sys.version_info[:2], pins]).encode()).hexdigest()[:12]
    cache = Path(os.environ.get("TRTSPEC_CACHE", Path.home() / ".cache" / "trtspec")) / "venvs"
    venv = cache / f"container-{tag}-{key}"
    if (venv / "pins.json").is_file():
        return venv
    # this process's own staging directory: two test runs on one machine (CI beside a developer's
    # run) would share one, and the second's rmtree would take the first's venv from under its pip
    staging = cache / f".container-{tag}-{key}.partial-{os.getpid()}"
    shutil.rmtree(staging, ignore_errors=True)
    subprocess.run([sys.executable, "-m", "venv", str(staging)], check=True)
    constraints = staging / "constraints.txt"
    constraints.write_text("torch==2.13.0\n")  # never let a dependency pull a CUDA torch
    subprocess.run([str(staging / "bin" / "python"), "-m", "pip", "install", "--quiet", "-c", str(constraints),
                    *pins], check=True)
    (staging / "pins.json").write_text(json.dumps(pins))
    try:
        staging.rename(venv)  # venv scripts keep the staging path in their shebangs; only `bin/python` is used
    except OSError:  # another run finished first: use its venv
        shutil.rmtree(staging, ignore_errors=True)
        if not (venv / "pins.json").is_file():
            raise
    return venv


def _run(python: Path, *args: str, cwd: Path) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    return subprocess.run([str(python), *args], cwd=cwd, env=env, capture_output=True, text=True, timeout=1200)


# the first run on a machine installs the container's venv (~1.5 GB from PyPI) before three subprocesses
# of up to 1200 s each; beside two busy processes that passed pytest's 900 s (issue 71, run 2: in the
# convert after the install), and alone with the venv made it took 775 s here
@pytest.mark.timeout(3600)
def test_eagle3_convert_and_export_run_on_the_containers_modelopt(in_tmp):
    tmp_path = in_tmp
    tag = contracts.default_container()
    python = container_venv(tag) / "bin" / "python"
    versions = _run(python, "-c", "import modelopt, transformers; print(modelopt.__version__, transformers.__version__)",
                    cwd=tmp_path)
    row = contracts.containers()["containers"][tag]
    assert versions.stdout.split() == [row["modelopt"], row["transformers"]], versions.stderr
    # the target is written by the container's transformers (its tokenizer files are what 4.56 reads)
    made = _run(python, "-c", "from trtspec.testing.tiny import make_tiny_llama; "
                f"make_tiny_llama({str(tmp_path / 'target')!r}, seed=0, num_hidden_layers=8)", cwd=tmp_path)
    assert made.returncode == 0, made.stderr[-3000:]
    (tmp_path / "eval.jsonl").write_text('{"prompt": "What is the capital of France?"}\n')
    (tmp_path / "trtspec.yaml").write_text(json.dumps({
        "workdir": str(tmp_path / "work"), "model": {"source": str(tmp_path / "target"), "name": "tiny"},
        "speculative": {"mode": "eagle3", "eagle3": {"num_samples": 6, "answer_tokens": 12, "max_steps": 3,
                                                     "batch_size": 3, "seq_len": 64, "checkpoint_every": 2}},
        "build": {"backend": "trtllm"}}))
    converted = _run(python, "-c", "from trtspec.cli import main; main()", "convert", "-c", "trtspec.yaml",
                     "--eval-prompts", "eval.jsonl", "--eval-tokens", "8", "--json", cwd=tmp_path)
    assert converted.returncode == 0, converted.stderr[-3000:]
    head = tmp_path / "work" / "checkpoints" / "eagle3"
    manifest = json.loads((head / "manifest.json").read_text())
    assert manifest["versions"]["nvidia-modelopt"] == row["modelopt"]
    assert manifest["report"]["export"]["aux_layers"] == [1, 3, 4]  # checked by check_eagle3_export
    assert not (head / "hf_quant_config.json").exists()  # 0.37 writes one with quant_algo null
    # and this environment builds it for the container's TensorRT-LLM: the head under midlayer.*
    from click.testing import CliRunner
    from safetensors import safe_open

    from trtspec.cli import main

    built = CliRunner().invoke(main, ["build", "-c", "trtspec.yaml", "--json"])
    assert built.exit_code == 0, built.output
    engine = json.loads(built.stdout)["engine"]
    assert engine["trtllm"]["tensorrt_llm_version"] == row["tensorrt_llm"]
    with safe_open(str(tmp_path / "engines" / engine["name"] / "draft" / "model.safetensors"), "pt") as handle:
        names = set(handle.keys())
    assert "midlayer.self_attn.q_proj.weight" in names and "fc.weight" in names
