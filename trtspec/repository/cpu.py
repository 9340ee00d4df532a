"""The cpu backend's repository: one decoupled Python-backend model `tensorrt_llm`.

Files: `tensorrt_llm/config.pbtxt` (the stock llmapi model's I/O of `build.trtllm_version`, plus
trtspec's optional additions: trtspec.repository.llmapi_io) and
`tensorrt_llm/1/model.py`, a one-line import of trtspec.triton_model.model, so the serving code
lives in the package (the server finds it through PYTHONPATH, see trtspec.serve.server).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from trtspec.repository import llmapi_io, pbtxt
from trtspec.repository.pbtxt import tensor

MODEL_NAME = "tensorrt_llm"
MODEL_PY = '''"""Triton Python model for the trtspec cpu engine (rendered by `trtspec deploy`).

The implementation is trtspec.triton_model.model; this file only points Triton at it. The
backend stub starts an isolated interpreter that ignores PYTHONPATH, so the paths trtspec's
server passes in TRTSPEC_PYTHONPATH (project root, venv site-packages) are added here first.
"""

import os
import site
import sys

_before = list(sys.path)
for _path in os.environ.get("TRTSPEC_PYTHONPATH", "").split(os.pathsep):
    if _path and _path not in sys.path:
        site.addsitedir(_path)  # also runs the .pth files (editable installs)
sys.path[:] = [p for p in sys.path if p not in _before] + _before

from trtspec.triton_model.model import TritonPythonModel  # noqa: E402,F401
'''


def inputs(version: str) -> list[dict[str, Any]]:
    """The stock llmapi model's inputs of TensorRT-LLM `version` (llmapi_io), then trtspec's additions.

    The stock integers are INT32: Triton 2.51's HTTP JSON parser converts a number to the declared
    width by truncation (http_server.cc, "FIXME ... bounds check"), so over HTTP max_tokens
    4294967312 reaches the model as 16; docs/DEPLOY.md ("Stock llmapi I/O") has what was measured.
    gRPC clients send typed tensors, and tritonclient refuses a value numpy cannot hold.
    """
    stock = llmapi_io.stock(version)
    added = [tensor(name, dtype, dims, optional=True) for name, dtype, dims, _ in llmapi_io.ADDED_INPUTS]
    return [dict(entry) for entry in stock["inputs"]] + added


def outputs(version: str) -> list[dict[str, Any]]:
    """The stock outputs (declared; the cpu model sends text_output, finish_reason, stop_reason on
    request, and the speculative counters with perf metrics), then trtspec's additions."""
    stock = llmapi_io.stock(version)
    added = [tensor(name, dtype, dims) for name, dtype, dims, _ in llmapi_io.ADDED_OUTPUTS]
    return [dict(entry) for entry in stock["outputs"]] + added


def model_config(engine: dict[str, Any], spec: Any, engine_path: str) -> dict[str, Any]:
    """The tensorrt_llm ModelConfig as data. `engine_path` is how the server sees the engine dir."""
    build = engine["build_config"]
    return {
        "name": MODEL_NAME,
        "backend": "python",
        # Batching happens inside the model (the engine's in-flight batching loop), not in Triton's batcher.
        "max_batch_size": 0,
        "model_transaction_policy": {"decoupled": spec.serve.streaming},
        "input": inputs(spec.build.trtllm_version),
        "output": outputs(spec.build.trtllm_version),
        "instance_group": [{"count": spec.serve.instance_count, "kind": "KIND_CPU"}],
        "parameters": pbtxt.parameters({
            "engine_dir": engine_path,
            "max_batch_size": build["max_batch_size"],
            "max_seq_len": build["max_seq_len"],
            "max_draft_len": build["max_draft_len"],
            "max_queue_size": spec.serve.max_queue_size,
            "mode": engine["mode"],
            "stream_interval": spec.serve.stream_interval,
        }),
    }


def render(engine: dict[str, Any], spec: Any, engine_path: str, dest: Path,
           engine_dir: Path | None = None) -> list[Path]:  # engine_dir: read only by trtllm-engine's renderer
    """Write the cpu repository into `dest` (an empty staging directory); return the files."""
    model_dir = dest / MODEL_NAME
    (model_dir / "1").mkdir(parents=True)
    config = model_dir / "config.pbtxt"
    config.write_text(pbtxt.render(model_config(engine, spec, engine_path)))
    model_py = model_dir / "1" / "model.py"
    model_py.write_text(MODEL_PY)
    return [config, model_py]
