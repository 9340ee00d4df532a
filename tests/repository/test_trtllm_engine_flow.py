"""The trtllm-engine flow on the real CPU tritonserver 2.51, with stand-ins for what needs a GPU.

A stand-in of the container's /app is built from the contract: each model directory holds
upstream's template as the contract records it (placeholders in place) and a model.py from
tests/repository/ibl_standins/: the C++ engine replaced by a Python model that answers fixed
tokens, and trtspec's own minimal preprocessing, postprocessing and BLS written to the contract's
names (upstream's code is not in this repository); tools/fill_template.py is trtspec's stand-in of
the documented tool. trtspec's own fill_template.sh then builds the repository exactly as in the
container (whole directories copied, tensorrt_llm_draft derived, every placeholder filled, only
`triton_backend` set to python), tritonserver loads it with --model-control-mode=none, and a
request through the ensemble and one through the BLS return text.

What this proves and what it does not: docs/BUILD.md, "What the CPU flow test proves".
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import shutil
import subprocess
import time
from pathlib import Path

import numpy as np
import pytest

from tests.serve.conftest import free_ports
from trtspec.builders import contracts
from trtspec.repository import trtllm_engine as te
from trtspec.repository import trtllm_engine_contract as contract

pytestmark = pytest.mark.e2e
STANDINS = Path(__file__).with_name("ibl_standins")
PROMPT = "The capital of France is"


def _values(draft_target: bool) -> dict:
    return {"tensorrt_llm_version": None, "triton_max_batch_size": 4, "engine_dir": "/e/target",
            "draft_engine_dir": "/e/draft" if draft_target else None, "tokenizer_dir": "/e/hf",
            "decoupled_mode": False, "kv_cache_free_gpu_mem_fraction": 0.9,
            "max_tokens_in_paged_kv_cache": (4096, 1024) if draft_target else (None, None),
            "decoding_mode": "top_k_top_p", "gpu_device_ids": [0], "multi_gpu": "single", "num_draft_tokens": 3,
            "use_draft_logits": False, "max_queue_delay_microseconds": 0, "draft_target": draft_target,
            "instance_count": 1}


def _standin_app(root: Path, version: str) -> Path:
    """/app as the container has it, with upstream's templates and the stand-in model.py files."""
    sec = contract.section(version)
    models = root / "all_models" / "inflight_batcher_llm"
    for model in sec["templates"]:
        version_dir = models / model / "1"
        version_dir.mkdir(parents=True)
        (models / model / "config.pbtxt").write_text(contract.template_text(sec, model))
        if model != "ensemble":
            shutil.copy(STANDINS / f"{model}.py", version_dir / "model.py")
            shutil.copy(STANDINS / "standin_common.py", version_dir)
            (version_dir / "contract.json").write_text(json.dumps({"reads": sec["reads"]}))
    (models / "tensorrt_llm_bls" / "1" / "lib").mkdir()
    (models / "tensorrt_llm_bls" / "1" / "lib" / "decoder_marker.txt").write_text("lib/ must come along\n")
    (root / "tools").mkdir()
    shutil.copy(STANDINS / "fill_template.py", root / "tools" / "fill_template.py")
    return root


def _repository(tmp_path: Path, draft_target: bool, drop_output: str | None = None) -> tuple[dict, Path]:
    """Run trtspec's fill_template.sh on the stand-in /app; `drop_output` removes an output from
    upstream's tensorrt_llm template first (a mutation)."""
    version = contracts.default_version()
    fills = te.fills(_values(draft_target), version)
    for model in ("tensorrt_llm", "tensorrt_llm_draft"):
        if model in fills:
            fills[model]["triton_backend"] = "python"             # the stand-in, not the C++ backend
    app = _standin_app(tmp_path / "app", version)
    if drop_output:
        template = app / "all_models" / "inflight_batcher_llm" / "tensorrt_llm" / "config.pbtxt"
        text = template.read_text()
        block = re.search(r'output \{\n  name: "' + drop_output + r'"\n.*?\n\}\n', text, re.S)
        template.write_text(text.replace(block.group(0), ""))
    script = tmp_path / "fill_template.sh"
    script.write_text(te.fill_script(fills))
    repo = tmp_path / "models"
    subprocess.run(["bash", str(script), str(repo)], check=True, env={**os.environ, "APP": str(app)})
    return fills, repo


@contextlib.contextmanager
def _tritonserver(repo: Path, tmp_path: Path):
    """The CPU tritonserver 2.51 on free loopback ports; yields (process, grpc client, log path)."""
    import tritonclient.grpc as grpcclient

    from trtspec.artifacts import Layout
    from trtspec.serve import setup

    binary = setup.find_tritonserver()
    layout = Layout(workdir=tmp_path / "work", engines_dir=tmp_path / "engines", repository=repo)
    backend_dir = setup.prepare_backends(layout, binary)
    http, grpc, metrics = free_ports(3)
    log_path = tmp_path / "server.log"
    with log_path.open("w") as log:
        server = subprocess.Popen(
            [str(binary), f"--model-repository={repo}", "--model-control-mode=none", f"--http-port={http}",
             f"--grpc-port={grpc}", f"--metrics-port={metrics}", "--http-address=127.0.0.1",
             "--grpc-address=127.0.0.1", f"--backend-directory={backend_dir}", "--disable-auto-complete-config",
             f"--backend-config=python,shm-region-prefix-name=trtspecflow{grpc}_"],
            stdout=log, stderr=subprocess.STDOUT,
            env={**os.environ, **setup.server_env(binary, "python", backend_dir)})
        client = grpcclient.InferenceServerClient(f"127.0.0.1:{grpc}")
        try:
            deadline = time.monotonic() + 90
            while time.monotonic() < deadline and server.poll() is None and not _ready(client):
                time.sleep(0.5)
            yield server, client, log_path
        finally:
            server.terminate()
            try:
                server.wait(timeout=30)
            except subprocess.TimeoutExpired:
                server.kill()


def _ready(client) -> bool:
    try:
        return client.is_server_ready()
    except Exception:  # not listening yet
        return False


@pytest.fixture(params=[True, False], ids=["draft-target", "none"])
def served(request, tmp_path):
    """tritonserver serving the repository trtspec's fill_template.sh built; yields (client, fills, repo)."""
    fills, repo = _repository(tmp_path, request.param)
    with _tritonserver(repo, tmp_path) as (server, client, log_path):
        assert server.poll() is None and _ready(client), log_path.read_text()[-4000:]
        yield client, fills, repo


def _ask(client, model: str, **extra) -> str:
    import tritonclient.grpc as grpcclient

    arrays = {"text_input": np.array([[PROMPT.encode()]], dtype=object),
              "max_tokens": np.array([[7]], dtype=np.int32), **extra}
    inputs = []
    for name, array in arrays.items():
        tensor = grpcclient.InferInput(name, list(array.shape), "BYTES" if array.dtype == object else
                                       {np.int32: "INT32", np.bool_: "BOOL"}[array.dtype.type])
        tensor.set_data_from_numpy(array)
        inputs.append(tensor)
    result = client.infer(model, inputs, outputs=[grpcclient.InferRequestedOutput("text_output")])
    return b"".join(result.as_numpy("text_output").ravel()).decode()


def test_repository_built_by_fill_template_sh_loads_and_answers(served):
    client, fills, repo = served
    # the container's tree came whole: lib/ of the BLS, the draft copy renamed, nothing left unfilled
    assert (repo / "tensorrt_llm_bls" / "1" / "lib" / "decoder_marker.txt").is_file()
    for path in repo.glob("*/config.pbtxt"):
        assert "${" not in path.read_text(), path
    assert {p.name for p in repo.iterdir()} == set(fills)
    for model in fills:
        assert client.is_model_ready(model), model
    # 1. through the ensemble (preprocessing -> tensorrt_llm -> postprocessing, upstream's wiring)
    assert _ask(client, "ensemble").endswith("Paris.")
    # 2. through the BLS: with a draft model, draft/verify calls with upstream's decoder names
    extra = {"num_draft_tokens": np.array([[3]], dtype=np.int32)} if "tensorrt_llm_draft" in fills else {}
    assert _ask(client, "tensorrt_llm_bls", **extra).endswith("Paris.")


def test_a_config_without_an_output_the_decoder_asks_for_does_not_load(tmp_path):
    """Mutation: upstream's tensorrt_llm template without arrival_time_ns (the output issue 23 saw
    refused through the BLS). The stand-ins hold their configs to the contract, so the server does
    not come up, and says which name is missing."""
    _, repo = _repository(tmp_path, True, drop_output="arrival_time_ns")
    with _tritonserver(repo, tmp_path) as (server, client, log_path):
        server.wait(timeout=90)
        log = log_path.read_text()
    assert server.returncode != 0
    assert "failed to load all models" in log
    assert "arrival_time_ns" in log
