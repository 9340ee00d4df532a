"""Fixtures for the deploy tests: real engines built by `trtspec build`, a real tritonserver.

`served` starts one tritonserver per test module on free loopback ports, serving the tiny
target's cpu engine (n-gram mode), and stops it at the end. Nothing here mocks Triton.
"""

from __future__ import annotations

import contextlib
import socket
import time
from pathlib import Path

import pytest


def free_ports(count: int) -> list[int]:
    sockets, ports = [], []
    for _ in range(count):
        sock = socket.socket()
        sock.bind(("127.0.0.1", 0))
        sockets.append(sock)
        ports.append(sock.getsockname()[1])
    for sock in sockets:
        sock.close()
    return ports


def make_spec(root: Path, source: Path, *, backend: str = "cpu", mode: str = "ngram", draft: Path | None = None,
              name: str = "tiny", **sections):
    from trtspec.spec.schema import validate_spec

    http, grpc, metrics = free_ports(3)
    data = {"model": {"source": str(source), "name": name},
            "speculative": {"mode": mode, **({"draft": str(draft)} if draft else {})},
            "build": {"backend": backend, "max_batch_size": 8, "max_input_len": 256, "max_seq_len": 512,
                      "output_dir": str(root / "engines")},
            "serve": {"http_port": http, "grpc_port": grpc, "metrics_port": metrics,
                      "repository": str(root / "model_repository"), "startup_timeout_s": 120},
            "workdir": str(root / "work")}
    for section, values in sections.items():
        data.setdefault(section, {}).update(values)
    return validate_spec(data)


@pytest.fixture(scope="session")
def spec_factory():
    """make_spec(root, source, backend=, mode=, draft=, **sections) -> Spec on free loopback ports."""
    return make_spec


@pytest.fixture(scope="session")
def tiny_cpu_engine(tmp_path_factory, tiny_llama):
    """(spec, engine_dir): the tiny target built with `trtspec build --backend cpu`, n-gram mode."""
    from trtspec.builders import build

    root = tmp_path_factory.mktemp("deploy-cpu")
    spec = make_spec(root, tiny_llama)
    return spec, build(spec).engine_dir


@contextlib.contextmanager
def serving_tiny(root: Path, tiny_llama: Path, *, env: dict[str, str] | None = None,
                 build_fields: dict | None = None, model_fields: dict | None = None,
                 speculative_fields: dict | None = None, **serve):
    """Build the tiny cpu engine under `root` (extra `build_fields`, `model_fields`,
    `speculative_fields`: the mode and its settings), serve it (extra
    `serve` fields, extra server `env`) and yield (spec, client, engine_dir); stop the server at the end."""
    from trtspec import repository
    from trtspec.artifacts import Layout
    from trtspec.builders import build
    from trtspec.client.triton import TritonLLMClient
    from trtspec.serve import server

    spec = make_spec(root, tiny_llama, serve=serve, build=build_fields or {}, model=model_fields or {},
                     speculative=speculative_fields or {})
    engine_dir = build(spec).engine_dir
    layout = Layout.from_spec(spec)
    repository.render(engine_dir, spec, layout.repository)
    with pytest.MonkeyPatch.context() as patch:
        for name, value in (env or {}).items():
            patch.setenv(name, value)
        server.start_local(spec, layout.repository, layout)
    client = TritonLLMClient(f"127.0.0.1:{spec.serve.grpc_port}",
                             metrics_url=f"http://127.0.0.1:{spec.serve.metrics_port}/metrics")
    try:
        yield spec, client, engine_dir
    finally:
        client.close()
        server.stop_local(layout)


def counted_as_cancelled(leave_a_stream, cancelled, attempts: int = 3, wait_s: float = 10.0) -> bool:
    """Whether the server's cancelled counter (`cancelled()`) rose by one after `leave_a_stream()`
    (start a long stream, read one piece, close it), in one of `attempts` tries.

    The tiny model writes 1,000 tokens in ~0.4 s and a cancel reached its engine in 0.03-0.08 s
    through the OpenAI frontend (2026-11-28), so a loaded machine can finish an answer before the
    cancel arrives: that try proves nothing either way and the next one is made. Broken cancelling
    fails every try. The servers these tests use sleep a few ms after each step
    (TRTSPEC_INJECT_STEP_DELAY_S) so an answer lasts 2 s or more whatever the machine's load."""
    for _ in range(attempts):
        before = cancelled()
        leave_a_stream()
        deadline = time.monotonic() + wait_s
        while cancelled() == before and time.monotonic() < deadline:
            time.sleep(0.05)
        if cancelled() == before + 1:
            return True
    return False


def metrics_when(client, condition, timeout: float = 10.0) -> dict[str, float]:
    """The server's metrics once `condition(metrics)` holds (or at the timeout, for the caller's
    assertion to fail on). The cpu model sends its gauges and its step and prefix counters at most
    every 0.1 s while requests run and always when the engine goes idle, which can be just after a
    request's last response (trtspec.triton_model.model.METRICS_INTERVAL_S)."""
    deadline = time.monotonic() + timeout
    while True:
        metrics = client.server_metrics()
        if condition(metrics) or time.monotonic() >= deadline:
            return metrics
        time.sleep(0.05)


@pytest.fixture(scope="module")
def served(tmp_path_factory, tiny_llama):
    """A running tritonserver serving the tiny cpu engine: (spec, client, engine_dir)."""
    # 5 ms after every engine step (TRTSPEC_INJECT_STEP_DELAY_S): the cancel tests' 400-token answers
    # then last 2 s or more, longer than a loaded machine takes to deliver the cancel (without it,
    # all three tries finished first at load 3-5 on 2 cores, with 400 tokens and with 960; at 1 ms,
    # 0.4 s, all three tries of the sync cancel test finished first beside two busy processes, issue 71)
    with serving_tiny(tmp_path_factory.mktemp("served"), tiny_llama, instance_count=1,
                      env={"TRTSPEC_INJECT_STEP_DELAY_S": "0.005"}) as running:
        yield running


def _respec(spec, root: Path, **serve):
    """`spec` on fresh free loopback ports with its workdir and repository under `root`."""
    from trtspec.spec.schema import validate_spec

    http, grpc, metrics = free_ports(3)
    data = spec.model_dump(mode="json")
    data["serve"].update(http_port=http, grpc_port=grpc, metrics_port=metrics,
                         repository=str(root / "model_repository"), **serve)
    data["workdir"] = str(root / "work")
    return validate_spec(data)


@contextlib.contextmanager
def _serving(spec, engine_dir: Path):
    """Render the repository and start a supervised tritonserver for `spec`; stop it at the end.

    Yields (layout, record)."""
    from trtspec import repository
    from trtspec.artifacts import Layout
    from trtspec.serve import server

    layout = Layout.from_spec(spec)
    repository.render(engine_dir, spec, layout.repository)
    record = server.start_local(spec, layout.repository, layout)
    try:
        yield layout, record
    finally:
        server.stop_local(layout)


@pytest.fixture(scope="session")
def respec():
    """respec(spec, root, **serve) -> the spec on fresh free loopback ports, workdir under root."""
    return _respec


@pytest.fixture(scope="session")
def serving():
    """serving(spec, engine_dir): a context manager running a supervised server for one test."""
    return _serving
