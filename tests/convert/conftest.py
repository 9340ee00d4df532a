"""Helpers for convert tests: a spec file around the tiny models, the CLI runner, one torch thread."""

from __future__ import annotations

import contextlib
import json
from pathlib import Path

import pytest
import yaml
from click.testing import CliRunner

EVAL_PROMPTS = [{"prompt": "What is the capital of France?"}, {"prompt": "def add(a, b):"}]


def write_spec(directory: Path, target: Path, **sections) -> Path:
    """trtspec.yaml in `directory` for `target`, tiny EAGLE-3 settings, plus `sections` merged in."""
    spec = {
        "workdir": str(directory / "work"),
        "model": {"source": str(target)},
        "speculative": {"mode": "none", "eagle3": {"num_samples": 6, "answer_tokens": 12, "max_steps": 3,
                                                    "batch_size": 3, "seq_len": 64, "checkpoint_every": 2}},
        "quantization": {"calibration_size": 3},
    }
    for section, values in sections.items():
        if isinstance(values, dict):
            spec.setdefault(section, {}).update(values)
        else:
            spec[section] = values
    path = directory / "trtspec.yaml"
    path.write_text(yaml.safe_dump(spec))
    return path


def run_cli(*args: str):
    from trtspec.cli import main

    return CliRunner().invoke(main, ["convert", *args], catch_exceptions=False)


@contextlib.contextmanager
def one_thread():
    """Tiny models train fastest on one torch thread (10x on a shared 2-core machine)."""
    import torch

    saved = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        yield
    finally:
        torch.set_num_threads(saved)


@pytest.fixture(scope="module", autouse=True)
def one_thread_per_module():
    with one_thread():
        yield


def manifest(path: Path) -> dict:
    return json.loads((path / "manifest.json").read_text())


@pytest.fixture(scope="session")
def eval_prompts_file(tmp_path_factory) -> Path:
    path = tmp_path_factory.mktemp("eval") / "held-out.jsonl"
    path.write_text("".join(json.dumps(p) + "\n" for p in EVAL_PROMPTS))
    return path


@pytest.fixture(scope="session")
def eagle3_run(tmp_path_factory, tiny_llama, eval_prompts_file):
    """One tiny `trtspec convert --mode eagle3 --json` run (reduced vocabulary), shared by tests."""
    directory = tmp_path_factory.mktemp("eagle3")
    spec = write_spec(directory, tiny_llama, speculative={
        "mode": "eagle3", "eagle3": {"num_samples": 6, "answer_tokens": 12, "max_steps": 3, "batch_size": 3,
                                      "seq_len": 64, "checkpoint_every": 2, "draft_vocab_size": 128}})
    with one_thread():
        result = run_cli("-c", str(spec), "--eval-prompts", str(eval_prompts_file), "--eval-tokens", "8",
                         "--acceptance-curve", "--json")
    assert result.exit_code == 0, result.output
    return directory, spec, json.loads(result.stdout)
