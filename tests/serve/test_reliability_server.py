"""The supervised server when its processes die, when two deploys race, when deploy is
interrupted (issue 15, findings 2, 3 and 6). Real tritonserver on free loopback ports.

Docstrings of the form "Fault: ... / Behaviour: ..." feed the Reliability table in docs/DEPLOY.md
(scripts/reliability_table.py).
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest
import yaml

from trtspec import subproc
from trtspec.artifacts import Layout
from trtspec.errors import ServerError
from trtspec.serve import server

pytestmark = pytest.mark.e2e
TRTSPEC = str(Path(sys.executable).parent / "trtspec")  # the console script of this environment


def _wait_for(condition, timeout: float, what: str):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = condition()
        if value:
            return value
        time.sleep(0.2)
    raise AssertionError(f"not within {timeout:.0f} s: {what}")


def _client(spec, timeout_s: float = 120.0):
    from trtspec.client.triton import TritonLLMClient

    return TritonLLMClient(f"127.0.0.1:{spec.serve.grpc_port}", timeout_s=timeout_s)


def test_killed_stub_errors_in_flight_clients_and_the_server_restarts(tiny_cpu_engine, tmp_path, respec, serving,
                                                                      monkeypatch):
    """Fault: the model's Python stub is killed while a client streams (it used to wait 90 s
    for nothing while /v2/health/ready, model-ready and `deploy status` all said ready).
    Behaviour: the supervisor sees the stub gone within a second, kills tritonserver so the
    client gets an error at once, removes the shared-memory regions, and (serve.restart:
    on-failure) starts the server again; `deploy status` says restarting until a one-token probe
    answers again."""
    from trtspec.artifacts import shm_regions

    built, engine_dir = tiny_cpu_engine
    spec = respec(built, tmp_path)
    # 5 ms after every step: the answer lasts 2 s, so the kill lands mid-stream on any machine (at load 3
    # the tiny model had sent all 400 tokens before the kill; TRTSPEC_INJECT_STEP_DELAY_S, scheduler)
    monkeypatch.setenv("TRTSPEC_INJECT_STEP_DELAY_S", "0.005")
    with serving(spec, engine_dir) as (layout, record):
        client = _client(spec)
        events = client.stream("1 2 3 4 5 6 7 8 9 10", max_tokens=400, speculative=False)
        assert not next(events).final
        old_prefix = record["shm_prefix"]
        assert shm_regions(old_prefix)
        outcome: dict = {}

        def drain() -> None:
            try:
                for _ in events:
                    pass
                outcome["error"] = None
            except ServerError as error:
                outcome["error"] = error
            outcome["at"] = time.monotonic()

        reader = threading.Thread(target=drain)
        reader.start()
        killed_at = time.monotonic()
        os.kill(record["stub_pids"][0], signal.SIGKILL)
        reader.join(timeout=60)
        assert isinstance(outcome.get("error"), ServerError), outcome
        assert outcome["at"] - killed_at < 30, "the client waited instead of getting an error"
        _wait_for(lambda: (server.read_record(layout) or {}).get("state") != "ready", 10, "supervisor noticed")
        assert not server.status(layout)["ready"]
        restarted = _wait_for(lambda: (r := server.read_record(layout)) and r.get("state") == "ready" and r, 180,
                              "the server serves again")
        assert restarted["restarts"] == 1 and restarted["pid"] != record["pid"]
        # Killed mid-request, the stub sometimes takes tritonserver down with it (SIGABRT): either is seen.
        assert any(why in restarted["failures"][-1]["reason"] for why in ("Python stub", "exited (signal"))
        assert not shm_regions(old_prefix)
        now = server.status(layout)
        assert now["ready"] and now["probe"]["ok"]
        assert _client(spec).generate("hello", max_tokens=2)["num_output_tokens"] >= 1


def test_dead_stub_is_reported_dead_with_restart_never(tiny_cpu_engine, tmp_path, respec, serving):
    """Fault: the model's Python stub dies while the server is idle, with serve.restart: never
    (tritonserver itself keeps running and answering ready).
    Behaviour: within a second the supervisor ends tritonserver and records it dead with the
    reason, exits and frees the ports; the shared-memory regions are removed; `deploy status`
    says dead and exits 1."""
    from trtspec.artifacts import shm_regions
    from trtspec.serve.ports import PortLocks

    built, engine_dir = tiny_cpu_engine
    spec = respec(built, tmp_path, restart="never")
    with serving(spec, engine_dir) as (layout, record):
        prefix = record["shm_prefix"]
        os.kill(record["stub_pids"][0], signal.SIGKILL)
        dead = _wait_for(lambda: (r := server.read_record(layout)) and r.get("state") == "dead" and r, 30, "dead")
        assert f"Python stub (pid {record['stub_pids'][0]}) died" in dead["reason"], dead["reason"]
        assert "serve.restart is never" in dead["reason"]
        assert not subproc.is_running(record["pid"])
        _wait_for(lambda: not subproc.is_running(record["supervisor_pid"]), 30, "the supervisor exits")
        assert not shm_regions(prefix)
        PortLocks.acquire(spec.serve, {"workdir": "test", "pid": os.getpid()}).release()  # ports free again
        status = server.status(layout)
        assert status["state"] == "dead" and not status["ready"]


def test_stop_removes_shared_memory_after_everything_was_killed(tiny_cpu_engine, tmp_path, respec, serving):
    """Fault: the supervisor and tritonserver are both killed (SIGKILL), leaving the Python
    backend's /dev/shm regions behind (every abnormal exit used to leak them).
    Behaviour: `deploy status` says dead (the supervisor is gone); `deploy stop` removes the
    recorded server's regions and its record."""
    from trtspec.artifacts import shm_regions

    built, engine_dir = tiny_cpu_engine
    spec = respec(built, tmp_path)
    with serving(spec, engine_dir) as (layout, record):
        prefix = record["shm_prefix"]
        os.kill(record["supervisor_pid"], signal.SIGKILL)
        os.killpg(record["pid"], signal.SIGKILL)
        # SIGKILL is delivered at once but a process tears down its memory before it is gone.
        _wait_for(lambda: not subproc.is_running(record["pid"]), 30, "tritonserver gone")
        _wait_for(lambda: not subproc.is_running(record["supervisor_pid"]), 30, "the supervisor gone")
        assert shm_regions(prefix), "nothing was left to clean (the test proves nothing)"
        assert server.status(layout)["state"] == "dead"
        stopped = server.stop_local(layout)
        assert stopped["shm_removed"] >= 1 and not shm_regions(prefix)
        assert server.read_record(layout) is None


def _write_spec(directory: Path, built, ports) -> Path:
    """A spec file with paths relative to its own directory."""
    data = built.model_dump(mode="json")
    data["serve"].update(http_port=ports.http_port, grpc_port=ports.grpc_port, metrics_port=ports.metrics_port,
                         repository="model_repository")
    data["workdir"] = "work"
    directory.mkdir(parents=True)
    (directory / "trtspec.yaml").write_text(yaml.safe_dump(data))
    return directory / "trtspec.yaml"


def _trtspec(*args: str, cwd: Path) -> subprocess.Popen:
    # SIGINT at its default: a shell's background job (`make test &`) ignores it, and children
    # inherit that, so Ctrl-C would never reach deploy.
    return subprocess.Popen([TRTSPEC, *args], cwd=cwd, stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT, text=True, env={**os.environ, "TRTSPEC_DEBUG": ""},
                            preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))


def test_two_deploys_on_the_same_ports_one_wins_and_stop_works_from_elsewhere(tiny_cpu_engine, tmp_path, respec):
    """Fault: two `trtspec deploy` runs from different workdirs on the same ports, started at
    once (both used to print "ready", rc 0, with one server); then `deploy stop -c
    other/dir/trtspec.yaml` from another directory (it said "no server recorded").
    Behaviour: exactly one deploy serves; the other fails naming the holder of the port (a
    port lock; a server that answers with another --id also fails it); paths in the spec
    resolve against the spec file's directory, so the stop finds and stops the server."""
    built, _ = tiny_cpu_engine
    ports = respec(built, tmp_path).serve
    configs = [_write_spec(tmp_path / name, built, ports) for name in ("a", "b")]
    runs = [_trtspec("deploy", "-c", "trtspec.yaml", cwd=config.parent) for config in configs]
    outputs = [run.communicate(timeout=400)[0] for run in runs]
    codes = [run.returncode for run in runs]
    try:
        assert sorted(codes) == [0, 1], outputs
        winner, loser = (0, 1) if codes[0] == 0 else (1, 0)
        assert "ready in" in outputs[winner]
        assert any(why in outputs[loser] for why in ("held by the trtspec server of", "held by another trtspec deploy",
                                                      "port in use")), outputs[loser]
        assert server.read_record(Layout.from_spec(_load(configs[loser]))) is None
        elsewhere = tmp_path / "elsewhere"
        elsewhere.mkdir()
        relative = os.path.relpath(configs[winner], elsewhere)
        stopped = _trtspec("deploy", "stop", "-c", relative, "--json", cwd=elsewhere)
        result = json.loads(stopped.communicate(timeout=120)[0])
        assert result["stopped"] is True, result
    finally:
        for config in configs:
            server.stop_local(Layout.from_spec(_load(config)))


def _load(config: Path):
    from trtspec.spec.loading import load_spec

    return load_spec(config)


def test_sigint_during_deploy_stops_what_it_started(tiny_cpu_engine, tmp_path, respec):
    """Fault: Ctrl-C (SIGINT) while `trtspec deploy` waits for the server (it printed
    "Aborted!" and the server started anyway).
    Behaviour: deploy stops the supervisor and the tritonserver it started, removes the record,
    and exits non-zero; the ports are free again."""
    built, _ = tiny_cpu_engine
    config = _write_spec(tmp_path / "a", built, respec(built, tmp_path).serve)
    layout = Layout.from_spec(_load(config))
    run = _trtspec("deploy", "-c", str(config), cwd=tmp_path)
    try:
        _interrupt_deploy_and_check(run, layout, config)
    finally:
        server.stop_local(layout)  # a failed check must not leave a server behind


def _interrupt_deploy_and_check(run, layout, config) -> None:
    try:
        # As soon as the supervisor has recorded itself (it then starts tritonserver): a later
        # signal can lose the race against a tiny model that is ready within a second.
        record = _wait_for(lambda: (r := server.read_record(layout)) and r.get("supervisor_pid") and r, 120,
                           "the supervisor started")
        run.send_signal(signal.SIGINT)
        output = run.communicate(timeout=120)[0]
    finally:
        if run.poll() is None:
            run.kill()
    assert run.returncode != 0, output
    assert "ready" not in output, output
    assert not subproc.is_running(record["supervisor_pid"])
    assert server.read_record(layout) is None
    spec = _load(config)
    time.sleep(3)  # a server started anyway would be listening by now
    assert all(server.port_free("127.0.0.1", p) for p in (spec.serve.http_port, spec.serve.grpc_port))
    # nor is any process of this repository left (a Python stub once outlived its tritonserver)
    left = [int(p.name) for p in Path("/proc").glob("[0-9]*")
            if str(layout.repository) in " ".join(subproc.command_line(int(p.name)))]
    assert left == [], [subproc.command_line(pid) for pid in left]


def test_liveness_probe_catches_a_dead_stub_without_a_supervisor(tiny_cpu_engine, tmp_path, respec):
    """Fault: in Kubernetes (no trtspec supervisor) the model's Python stub dies while
    tritonserver lives: /v2/health/live, which the old liveness probe asked, stays 200.
    Behaviour: the manifests' liveness probe (`trtspec deploy status --url`, a one-token
    inference) exits 1, so the kubelet restarts the container."""
    from trtspec import repository
    from trtspec.serve import k8s, launch
    from trtspec.serve import setup as server_setup
    from trtspec.serve.ports import http_get
    from trtspec.serve.supervisor import remove_shm

    built, engine_dir = tiny_cpu_engine
    spec = respec(built, tmp_path)
    layout = Layout.from_spec(spec)
    repository.render(engine_dir, spec, layout.repository)
    binary = server_setup.find_tritonserver()
    backends = server_setup.prepare_backends(layout, binary)
    prefix = f"trtspec_liveness{os.getpid()}"
    command = launch.local_command(spec, binary, layout.repository, backends, shm_prefix=prefix)
    pid = subproc.start(command, log_path=tmp_path / "server.log",
                        env=server_setup.server_env(binary, "cpu", backends))
    try:
        _wait_for(lambda: server.is_ready("127.0.0.1", spec.serve.http_port), 120, "ready")
        (deployment, _) = k8s.k8s_manifests(spec, engine_dir.name)
        probe = deployment["spec"]["template"]["spec"]["containers"][0]["livenessProbe"]["exec"]["command"]
        assert probe[:4] == ["trtspec", "deploy", "status", "--url"]
        local = [TRTSPEC, *probe[1:]]
        assert subprocess.run(local, capture_output=True, timeout=120).returncode == 0
        stub = _wait_for(lambda: [p for p in subproc.children(pid)
                                  if subproc.command_line(p)[:1] and
                                  subproc.command_line(p)[0].endswith("triton_python_backend_stub")], 30, "stub")
        os.kill(stub[0], signal.SIGKILL)
        _wait_for(lambda: not subproc.is_running(stub[0]), 10, "stub gone")
        assert http_get(f"http://127.0.0.1:{spec.serve.http_port}/v2/health/live")[0] == 200
        failed = subprocess.run(local, capture_output=True, text=True, timeout=120)
        assert failed.returncode == 1, failed.stdout + failed.stderr
        assert "not serving" in failed.stdout
    finally:
        subproc.stop(pid)
        remove_shm(prefix)
