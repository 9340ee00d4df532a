"""Normal runs print what the user asked for and nothing else: no library warnings.

Runs the demo's own commands as real processes on SmolLM2 (the cached checkpoint) and reads
their stderr line by line.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

TRTSPEC = str(Path(sys.executable).parent / "trtspec")
NOISE = ("warning", "deprecat", "[transformers]", "futurewarning", "userwarning")


def _run(*args: str, cwd: Path) -> subprocess.CompletedProcess:
    env = {**os.environ, "NO_COLOR": "1", "OMP_NUM_THREADS": "1"}
    return subprocess.run([TRTSPEC, *args], capture_output=True, text=True, cwd=cwd, env=env, timeout=600)


@pytest.mark.slow
def test_fetch_and_build_are_quiet_and_the_smoke_sample_is_a_sentence(smollm2, tmp_path):
    (tmp_path / "trtspec.yaml").write_text(yaml.safe_dump({"model": {"source": "smollm2"},
                                                           "build": {"output_dir": str(tmp_path / "engines")}}))
    for args in (["spec", "check"], ["models", "fetch", "smollm2"], ["build"]):
        done = _run(*args, cwd=tmp_path)
        assert done.returncode == 0, done.stderr
        noisy = [line for line in done.stderr.splitlines() if any(word in line.lower() for word in NOISE)]
        assert noisy == [], (args, noisy)
    manifest = json.loads((tmp_path / "engines" / "smollm2-ngram-cpu" / "manifest.json").read_text())
    # A chat-templated question, answered: not the fragment a bare continuation prompt gave.
    assert "Paris" in manifest["smoke"]["text"], manifest["smoke"]
