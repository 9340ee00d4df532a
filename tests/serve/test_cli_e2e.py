"""`trtspec deploy`, `deploy status`, `infer`, `deploy stop` through the CLI against a real server."""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

import pytest
import yaml
from click.testing import CliRunner

from trtspec import subproc
from trtspec.cli import main

pytestmark = pytest.mark.e2e


def _run(*args: str):
    result = CliRunner().invoke(main, list(args), catch_exceptions=False)
    return result


def test_deploy_infer_status_stop_end_only_our_server(tiny_cpu_engine, tmp_path, spec_factory, tiny_llama,
                                                      monkeypatch):
    # As under `make demo`: the venv's bin first on PATH (the stub must not take its home from it).
    monkeypatch.setenv("PATH", f"{Path(sys.executable).parent}{os.pathsep}{os.environ.get('PATH', '')}")
    built, _ = tiny_cpu_engine
    ports = spec_factory(tmp_path, tiny_llama).serve   # fresh free ports
    data = built.model_dump(mode="json")
    data["serve"].update(http_port=ports.http_port, grpc_port=ports.grpc_port, metrics_port=ports.metrics_port,
                         repository=str(tmp_path / "model_repository"))
    data["workdir"] = str(tmp_path / "work")
    config = tmp_path / "trtspec.yaml"
    config.write_text(yaml.safe_dump(data))

    dry = _run("deploy", "-c", str(config), "--dry-run", "--json")
    assert dry.exit_code == 0 and not (tmp_path / "model_repository").exists()
    assert "tensorrt_llm/config.pbtxt" in json.loads(dry.output)["files"]
    frontend = json.loads(_run("deploy", "-c", str(config), "--dry-run", "--json", "--openai-port", "18297").output)
    assert "-m trtspec.serve.openai_app" in frontend["command"] and "--port 18297" in frontend["command"]

    bystander = subproc.start([sys.executable, "-c", "import time; time.sleep(120)"], log_path=tmp_path / "b.log")
    try:
        started = _run("deploy", "-c", str(config), "--json")
        assert started.exit_code == 0, started.output
        record = json.loads(started.output)
        assert record["startup_s"] > 0 and (tmp_path / "model_repository" / "tensorrt_llm" / "config.pbtxt").exists()

        status = json.loads(_run("deploy", "status", "-c", str(config), "--json").output)
        assert status["running"] and status["ready"] and status["pid"] == record["pid"]
        again = CliRunner().invoke(main, ["deploy", "-c", str(config)])
        assert again.exit_code == 1 and "already running" in again.output

        answer = _run("infer", "-c", str(config), "--json", "--max-tokens", "8", "the quick brown fox")
        assert answer.exit_code == 0, answer.output
        reply = json.loads(answer.output)
        assert reply["model"] == "tensorrt_llm" and reply["num_output_tokens"] >= 1
        assert {"ttft_s", "total_s", "acceptance_rate", "total_draft_tokens", "total_accepted_draft_tokens"} <= set(reply)

        streamed = _run("infer", "-c", str(config), "--max-tokens", "8", "the quick brown fox")
        assert streamed.exit_code == 0 and reply["text"] in streamed.output

        # the prompt as one user turn through the chat template, applied by the client; --raw as typed
        from transformers import AutoTokenizer

        from trtspec.chat import prompt_ids

        tokenizer = AutoTokenizer.from_pretrained(tiny_llama)
        assert reply["prompt_sent"].startswith("chat template of ")
        assert reply["num_input_tokens"] == len(prompt_ids(tokenizer, "the quick brown fox"))
        raw = json.loads(_run("infer", "-c", str(config), "--json", "--raw", "--max-tokens", "8",
                              "the quick brown fox").output)
        assert raw["prompt_sent"].startswith("raw")
        assert raw["num_input_tokens"] == len(tokenizer("the quick brown fox")["input_ids"]) < reply["num_input_tokens"]

        stopped = json.loads(_run("deploy", "stop", "-c", str(config), "--json").output)
        assert stopped == {"stopped": True, "pid": record["pid"]}
        assert not subproc.is_running(record["pid"])
        assert subproc.is_running(bystander), "deploy stop ended a process it did not start"
        assert json.loads(_run("deploy", "status", "-c", str(config), "--json").output)["running"] is False
    finally:
        subproc.stop(bystander)
        _run("deploy", "stop", "-c", str(config))
