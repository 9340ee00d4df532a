"""trtspec's heads where users load them: speculators' and vLLM's own venvs, run as subprocesses.

`make test` installs .venv-speculators (tests skip in one line without it); .venv-vllm is
`make peers-venv` only (a large install), and its tests skip in one line without it. The target
is a seeded tiny Llama with head_dim 32 (vLLM's CPU attention takes no smaller head) and 8 layers
(every tool's default layer ids fit); the head is one `trtspec convert --mode eagle3` trains on it.
"""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest

from tests.convert.conftest import one_thread, write_spec

ROOT = Path(__file__).resolve().parents[2]
SPECULATORS_PYTHON = ROOT / ".venv-speculators" / "bin" / "python"


@pytest.fixture(scope="session")
def speculators_python() -> Path:
    if not (SPECULATORS_PYTHON.is_file() and (ROOT / ".venv-speculators" / ".installed").is_file()):
        pytest.skip("speculators venv missing: make .venv-speculators/.installed")
    return SPECULATORS_PYTHON


@pytest.fixture(scope="session")
def vllm_python() -> Path:
    from benchmarks.vllm_peer import INSTALL, vllm_python

    python = vllm_python()
    if python is None:
        pytest.skip(f"vLLM venv missing: {INSTALL}")
    return python


@pytest.fixture(scope="session")
def peer_target(tmp_path_factory) -> Path:
    from trtspec.testing.tiny import make_tiny_llama

    return make_tiny_llama(tmp_path_factory.mktemp("peer-target") / "target", seed=7, hidden_size=128,
                           intermediate_size=256, num_attention_heads=4, num_key_value_heads=2,
                           num_hidden_layers=8, max_position_embeddings=2048)


@pytest.fixture(scope="session")
def peer_spec(tmp_path_factory, peer_target) -> Path:
    """A spec whose workdir holds a head `trtspec convert` trained (seeded, reduced vocabulary)."""
    from click.testing import CliRunner

    from trtspec.cli import main

    directory = tmp_path_factory.mktemp("peer-head")
    spec = write_spec(directory, peer_target, speculative={
        "mode": "eagle3", "max_draft_len": 4,
        "eagle3": {"num_samples": 24, "answer_tokens": 32, "max_steps": 40, "batch_size": 4, "seq_len": 96,
                   "checkpoint_every": 40, "draft_vocab_size": 128}})
    with one_thread():
        result = CliRunner().invoke(main, ["convert", "-c", str(spec)], catch_exceptions=False)
    assert result.exit_code == 0, result.output
    return spec


def export(spec: Path, fmt: str, out: Path, *extra: str) -> Path:
    from click.testing import CliRunner

    from trtspec.cli import main

    result = CliRunner().invoke(main, ["export-head", "-c", str(spec), "--format", fmt, str(out), *extra])
    assert result.exit_code == 0, result.output
    return out


def run_json(python: Path, *args: str, timeout: float = 600) -> dict:
    """The last stdout line of `python args...` as JSON; the output in the failure message."""
    done = subprocess.run([str(python), *args], capture_output=True, text=True, timeout=timeout, cwd=ROOT,
                          env={"HF_HUB_OFFLINE": "1", "PATH": "/usr/bin:/bin", "OMP_NUM_THREADS": "1"})
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    return json.loads(done.stdout.strip().splitlines()[-1])
