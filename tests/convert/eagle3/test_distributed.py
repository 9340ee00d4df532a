"""Data-parallel EAGLE-3 training, for real: torchrun starts `trtspec convert` as gloo processes.

One process trains the tiny head as the reference. From the same rows and features (copied),
two torchrun processes must reach the same weights within float32 rounding (the global batch is
the same; each process trains half of it); a two-process run killed mid-training (every process
SIGKILLed, as when a node dies) must resume in ONE process and end at the reference weights; and
two processes starting from the target alone share out the answers and the features, and a time
budget stops both at the same step (otherwise one waits in DDP's all-reduce forever and the run
times out).
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import sys
import time
from pathlib import Path

import pytest
import yaml

from tests.convert.conftest import manifest, one_thread, run_cli, write_spec

pytestmark = pytest.mark.slow

STEPS = 60  # long enough (seconds) that the kill lands mid-training
EAGLE3 = {"num_samples": 10, "answer_tokens": 12, "max_steps": STEPS, "batch_size": 4, "seq_len": 64,
          "checkpoint_every": 4, "draft_vocab_size": 128, "train_dtype": "float32", "learning_rate": 0.003}


def _state(directory: Path) -> dict:
    import torch

    return torch.load(directory / "work" / "checkpoints" / ".eagle3-work" / "state.pt", weights_only=False)


def _fork(reference: Path, destination: Path, **eagle3) -> Path:
    """A copy of the reference run's target, rows and features, without its training or export."""
    shutil.copytree(reference / "work", destination / "work",
                    ignore=shutil.ignore_patterns("state.pt", "snapshots", "eagle3", "reports"))
    spec = yaml.safe_load((reference / "trtspec.yaml").read_text())
    spec["workdir"] = str(destination / "work")
    spec["speculative"]["eagle3"].update(eagle3)
    (destination / "trtspec.yaml").write_text(yaml.safe_dump(spec))
    return destination / "trtspec.yaml"


def _torchrun_cli(*args: str) -> list[str]:
    return [sys.executable, "-m", "trtspec", "convert", *args, "--nproc-per-node", "2"]


def _assert_same_head(a: dict, b: dict, start: dict) -> None:
    """Equal within float32 rounding, measured against how far training moved the weights."""
    worst = moved = 0.0
    for name, tensor in a.items():
        if tensor.dtype.is_floating_point:
            worst = max(worst, float((tensor - b[name]).abs().max()))
            moved = max(moved, float((tensor - start[name]).abs().max()))
    assert moved > 1e-3, "training must move the weights for the comparison to mean anything"
    assert worst < 1e-4 * moved + 1e-6, (worst, moved)


@pytest.fixture(scope="module")
def reference(tmp_path_factory, tiny_llama, eval_prompts_file):
    """The one-process run: rows, features, STEPS steps of training, export (one torch thread)."""

    directory = tmp_path_factory.mktemp("ddp-reference")
    spec = write_spec(directory, tiny_llama, speculative={"mode": "eagle3", "eagle3": EAGLE3})
    with one_thread():
        result = run_cli("-c", str(spec), "--eval-prompts", str(eval_prompts_file), "--eval-tokens", "4", "--json")
    assert result.exit_code == 0, result.output
    return directory


def test_two_gloo_processes_train_the_weights_of_one(reference, tmp_path, eval_prompts_file):
    from trtspec import subproc

    spec = _fork(reference, tmp_path)
    run = subproc.run(_torchrun_cli("-c", str(spec), "--eval-prompts", str(eval_prompts_file), "--eval-tokens", "4",
                                    "--json"), timeout=600)
    summary = json.loads(run.stdout)  # one JSON document: only rank 0 prints
    training = manifest(tmp_path / "work" / "checkpoints" / "eagle3")["report"]["training"]
    assert (training["processes"], training["backend"], training["global_batch"]) == (2, "gloo", 4)
    assert training["steps"] == STEPS and [c["kind"] for c in summary["checkpoints"]] == ["target", "eagle3"]
    one, two = _state(reference), _state(tmp_path)
    start = _snapshot(reference, 4)
    _assert_same_head(one["head"], two["head"], start)
    # every process logged the same global figures as the single process
    assert [r["loss"] for r in two["history"]] == pytest.approx([r["loss"] for r in one["history"]], rel=1e-4)


def _snapshot(directory: Path, step: int) -> dict:
    import torch

    path = directory / "work" / "checkpoints" / ".eagle3-work" / "snapshots" / f"step-{step:06d}.pt"
    return torch.load(path, weights_only=False)["head"]


def _descendants(pid: int) -> list[int]:
    """trtspec -> torchrun -> workers: every process under `pid`."""
    path = Path(f"/proc/{pid}/task/{pid}/children")
    children = [int(child) for child in path.read_text().split()] if path.exists() else []
    return [grand for child in children for grand in (child, *_descendants(child))]


def test_killed_two_process_run_resumes_in_one_process(reference, tmp_path, eval_prompts_file):
    """SIGKILL every process of a torchrun run after its first state; resume with one process."""

    from trtspec import subproc

    spec = _fork(reference, tmp_path)
    work = tmp_path / "work" / "checkpoints"
    pid = subproc.start(_torchrun_cli("-c", str(spec), "--eval-prompts", str(eval_prompts_file)),
                        log_path=tmp_path / "torchrun.log")
    deadline = time.monotonic() + 300
    while not (work / ".eagle3-work" / "snapshots" / "step-000004.pt").exists():
        assert time.monotonic() < deadline and subproc.is_running(pid), (tmp_path / "torchrun.log").read_text()
        time.sleep(0.05)
    # torchrun starts its workers in their own sessions: kill them, torchrun and trtspec, all at once
    victims = [pid, *_descendants(pid)]
    assert len(victims) == 4, victims
    for victim in victims:
        os.kill(victim, signal.SIGKILL)
    for victim in victims:
        while subproc.is_running(victim):
            time.sleep(0.05)
    subproc.stop(pid)
    killed_at = _state(tmp_path)["step"]
    assert 4 <= killed_at < STEPS and not (work / "eagle3").exists()

    with one_thread():
        result = run_cli("-c", str(spec), "--eval-prompts", str(eval_prompts_file), "--eval-tokens", "4")
    assert result.exit_code == 0, result.output
    training = manifest(work / "eagle3")["report"]["training"]
    assert (training["resumed_from"], training["steps"], training["processes"]) == (killed_at, STEPS, 1)
    _assert_same_head(_state(reference)["head"], _state(tmp_path)["head"], _snapshot(reference, 4))


def test_two_processes_make_their_own_rows_and_features_and_stop_together_on_time(reference, tmp_path,
                                                                                  eval_prompts_file, tiny_llama):
    """From the target alone: each process answers its share of the samples and computes the
    features of its block of rows, rank 0 merges the shards in sample order; then a time budget
    stops both processes at the same step (else one would wait in DDP's all-reduce for ever)."""
    from transformers import AutoTokenizer

    from trtspec import subproc
    from trtspec.chat import prompt_ids
    from trtspec.prompts import prompt_texts

    spec = _fork(reference, tmp_path, max_steps=100_000, checkpoint_every=100_000)
    shutil.rmtree(tmp_path / "work" / "checkpoints" / ".eagle3-work")
    subproc.run(_torchrun_cli("-c", str(spec), "--eval-prompts", str(eval_prompts_file), "--eval-tokens", "4",
                              "--max-minutes", "0.05"), timeout=600)
    work = tmp_path / "work" / "checkpoints"
    rows = [json.loads(line) for line in (work / ".eagle3-work" / "sequences.jsonl").read_text().splitlines()]
    tokenizer = AutoTokenizer.from_pretrained(tiny_llama)
    prompts = prompt_texts(None, "train")
    assert [row["i"] for row in rows] == list(range(EAGLE3["num_samples"]))
    for row in rows:  # sample i answers prompt i: its row starts with the ids the engine serves
        context = prompt_ids(tokenizer, prompts[row["i"]])
        assert row["ids"][:len(context)] == context and len(row["ids"]) > len(context)
    assert json.loads((work / ".eagle3-work" / "features" / "meta.json").read_text())["complete"] is True
    report = manifest(work / "eagle3")["report"]
    training = report["training"]
    assert training["stopped_by"] == "time_budget" and 0 < training["steps"] < 100_000
    # the 3 s are the whole stage's: training got what the data step left (at least a tenth)
    assert 0.3 <= report["budget"]["training_s"] <= 3.0
    assert report["budget"]["training_s"] <= training["seconds"] < report["budget"]["training_s"] + 60
    assert training["processes"] == 2


def test_torchrun_command_for_one_node_and_two(tiny_llama, in_tmp):
    from click.testing import CliRunner

    from trtspec.cli import main

    spec = write_spec(in_tmp, tiny_llama, speculative={"mode": "eagle3"})
    runner = CliRunner()
    one = runner.invoke(main, ["convert", "-c", str(spec), "--max-steps", "5", "--nproc-per-node", "8", "--dry-run"])
    assert one.exit_code == 0, one.output
    assert "-m torch.distributed.run --nproc-per-node=8 --standalone -m trtspec convert" in one.output
    assert f"--config {spec} --max-steps 5" in one.output and "--dry-run" not in one.output.split("convert", 1)[1]
    two = runner.invoke(main, ["convert", "-c", str(spec), "--nproc-per-node", "8", "--nnodes", "2",
                               "--rdzv-endpoint", "node0:29400", "--dry-run", "--json"])
    command = json.loads(two.stdout)["command"]
    assert command[1:7] == ["-m", "torch.distributed.run", "--nproc-per-node=8", "--nnodes=2",
                            "--rdzv-backend=c10d", "--rdzv-endpoint=node0:29400"]
    for args, message in ((["--nnodes", "2"], "--nnodes 2 needs --rdzv-endpoint"),
                          (["--nnodes", "2", "--rdzv-endpoint", "node0"], "is not host:port")):
        bad = runner.invoke(main, ["convert", "-c", str(spec), "--nproc-per-node", "2", *args, "--dry-run"])
        assert bad.exit_code != 0 and message in bad.output
