"""The cpu backend's repository: one decoupled Python-backend model `tensorrt_llm`.

Files: `tensorrt_llm/config.pbtxt` (the LLM-API I/O contract plus `speculative`) and
`tensorrt_llm/1/model.py`, a one-line import of trtspec.repository.cpu_model, so the serving code
lives in the package (the server finds it through PYTHONPATH, see trtspec.serve.server).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from trtspec.repository import pbtxt
from trtspec.repository.pbtxt import tensor

MODEL_NAME = "tensorrt_llm"
MODEL_PY = '''"""Triton Python model for the trtspec cpu engine (rendered by `trtspec deploy`).

The implementation is trtspec.repository.cpu_model; this file only points Triton at it. The
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

from trtspec.repository.cpu_model import TritonPythonModel  # noqa: E402,F401
'''


def inputs() -> list[dict[str, Any]]:
    """The LLM-API model's inputs (DESIGN.md), every one optional but text_input.

    The integers are INT64 where the stock LLM-API config says INT32: Triton 2.51 converts HTTP
    JSON numbers to the declared width by truncation (http_server.cc, "FIXME ... bounds check"),
    so max_tokens 4294967312 reached an INT32 model as 16 and was served. As INT64 the model sees
    the value sent and refuses it. Clients that read the config (trtspec's, perf_analyzer) adapt;
    a gRPC client hard-coding INT32 gets Triton's "unexpected datatype" error, not a wrong answer.
    """
    return [tensor("text_input", "BYTES", [1]),
            tensor("streaming", "BOOL", [1], optional=True),
            tensor("sampling_param_max_tokens", "INT64", [1], optional=True),
            tensor("sampling_param_temperature", "FP32", [1], optional=True),
            tensor("sampling_param_top_p", "FP32", [1], optional=True),
            tensor("sampling_param_top_k", "INT64", [1], optional=True),
            tensor("sampling_param_seed", "UINT64", [1], optional=True),
            tensor("sampling_param_stop", "BYTES", [-1], optional=True),
            tensor("sampling_param_return_perf_metrics", "BOOL", [1], optional=True),
            tensor("speculative", "BOOL", [1], optional=True)]


def outputs() -> list[dict[str, Any]]:
    return [tensor("text_output", "BYTES", [-1]),
            tensor("finish_reason", "BYTES", [-1]),
            tensor("acceptance_rate", "FP32", [1]),
            tensor("total_accepted_draft_tokens", "INT64", [1]),
            tensor("total_draft_tokens", "INT64", [1]),
            tensor("num_drafts", "INT64", [1]),
            tensor("num_output_tokens", "INT64", [1])]


def model_config(engine: dict[str, Any], spec: Any, engine_path: str) -> dict[str, Any]:
    """The tensorrt_llm ModelConfig as data. `engine_path` is how the server sees the engine dir."""
    build = engine["build_config"]
    return {
        "name": MODEL_NAME,
        "backend": "python",
        # Batching happens inside the model (the engine's in-flight batching loop), not in Triton's batcher.
        "max_batch_size": 0,
        "model_transaction_policy": {"decoupled": spec.serve.streaming},
        "input": inputs(),
        "output": outputs(),
        "instance_group": [{"count": spec.serve.instance_count, "kind": "KIND_CPU"}],
        "parameters": pbtxt.parameters({
            "engine_dir": engine_path,
            "max_batch_size": build["max_batch_size"],
            "max_seq_len": build["max_seq_len"],
            "max_draft_len": build["max_draft_len"],
            "max_queue_size": spec.serve.max_queue_size,
            "mode": engine["mode"],
        }),
    }


def render(engine: dict[str, Any], spec: Any, engine_path: str, dest: Path) -> list[Path]:
    """Write the cpu repository into `dest` (an empty staging directory); return the files."""
    model_dir = dest / MODEL_NAME
    (model_dir / "1").mkdir(parents=True)
    config = model_dir / "config.pbtxt"
    config.write_text(pbtxt.render(model_config(engine, spec, engine_path)))
    model_py = model_dir / "1" / "model.py"
    model_py.write_text(MODEL_PY)
    return [config, model_py]
