"""The OpenAI frontend process beside a local tritonserver: its command, start, health and stop.

The supervisor (trtspec.serve.supervisor) starts it once the Triton model serves, when
serve.openai_port is not 0, watches it with the server and ends it first on stop or failure.
The process is `python -m trtspec.serve.openai_app` (FastAPI + uvicorn) on serve.host, forwarding
to the Triton gRPC port; its log is <workdir>/server/openai.log.
"""

from __future__ import annotations

import sys
import time
from pathlib import Path
from typing import Any

APP_MODULE = "trtspec.serve.openai_app"
TRITON_MODEL = "tensorrt_llm"


def served_names(spec: Any) -> list[str]:
    """Names a client may send as `model`: the spec's model name, then the model source when it is
    a hub id (as AIPerf and vLLM clients send; a local path is not published), then the Triton
    model's."""
    source = spec.model.source if not Path(spec.model.source).expanduser().exists() else None
    names = [spec.model_name, source, TRITON_MODEL]
    return [n for i, n in enumerate(names) if n and n not in names[:i]]


def command(spec: Any, *, python: str | None = None) -> list[str]:
    from trtspec.serve.ports import connect_host

    serve = spec.serve
    argv = [python or sys.executable, "-m", APP_MODULE, "--triton-url", f"{connect_host(serve.host)}:{serve.grpc_port}",
            "--model", TRITON_MODEL, "--host", serve.host, "--port", str(serve.openai_port)]
    for name in served_names(spec):
        argv += ["--served-model-name", name]
    return argv


def log_path(record: dict[str, Any]) -> Path:
    return Path(record["log"]).with_name("openai.log")


def start(spec: Any, record: dict[str, Any]) -> int:
    from trtspec import subproc

    return subproc.start(command(spec), log_path=log_path(record), env=record.get("env"))


def health(host: str, port: int, timeout: float = 2.0) -> int | None:
    from trtspec.serve.ports import connect_host, http_get

    return http_get(f"http://{connect_host(host)}:{port}/health", timeout=timeout)[0]


def wait_healthy(spec: Any, pid: int, timeout_s: float, stop_requested: Any) -> str | None:
    """None once GET /health answers 200; else "stop" or why not."""
    from trtspec import subproc

    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if stop_requested():
            return "stop"
        if not subproc.is_running(pid):
            return "the OpenAI frontend exited during startup; see openai.log"
        if health(spec.serve.host, spec.serve.openai_port) == 200:
            return None
        time.sleep(0.25)
    return f"the OpenAI frontend did not answer /health within {timeout_s:.0f} s"
