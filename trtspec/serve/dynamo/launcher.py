"""`trtspec deploy --target dynamo` on this machine: one NVIDIA Dynamo frontend (OpenAI API, router) and
`serve.dynamo.workers` trtspec workers, started and watched by one supervisor process.

    <workdir>/server/dynamo/stack.json   the record (only the supervisor writes it once started)
    <workdir>/server/dynamo/frontend.log, worker-<i>.log, supervisor.log
    <workdir>/server/dynamo/discovery/   Dynamo's file discovery (DYN_FILE_KV): no etcd, no NATS
    <workdir>/server/dynamo/home/        HOME for the frontend's model cache ($HOME/.cache/dynamo)

Everything binds serve.host (127.0.0.1 by default): the frontend's HTTP port, the TCP request plane,
the workers' metrics ports. Dynamo's ZeroMQ event publishers (the workers' KV events) bind every
interface whatever the host setting (hard-coded upstream; the advertised address follows the
setting): `exposure_warning` says so, and the tests run the stack in a private network namespace.
Commands start only through trtspec.subproc; the supervisor is trtspec.serve.dynamo.supervise.
"""

from __future__ import annotations

import json
import socket
import sys
import time
from pathlib import Path
from typing import Any

from trtspec.artifacts import Layout

SUPERVISOR_MODULE = "trtspec.serve.dynamo.supervise"
WORKER_MODULE = "trtspec.serve.dynamo.worker"
NAMESPACE = "trtspec"
MAX_SYSTEM_PORT = 32767  # DYN_SYSTEM_PORT is an i16 in Dynamo 1.6.1


def stack_dir(layout: Layout) -> Path:
    return layout.server_dir / "dynamo"


def record_path(layout: Layout) -> Path:
    return stack_dir(layout) / "stack.json"


def http_port(spec: Any) -> int:
    """The frontend's OpenAI port: serve.openai_port, else serve.http_port."""
    return int(spec.serve.openai_port or spec.serve.http_port)


def installed() -> bool:
    import importlib.util

    return importlib.util.find_spec("dynamo") is not None and importlib.util.find_spec("dynamo.frontend") is not None


def require_installed() -> None:
    from trtspec.errors import ToolMissingError

    if not installed():
        raise ToolMissingError("NVIDIA Dynamo is not installed in this environment (import dynamo.frontend failed)",
                               fix="`make dynamo` (ai-dynamo-runtime and ai-dynamo 1.6.1 into .venv)")


def environment(spec: Any, directory: Path) -> dict[str, str]:
    """Dynamo's settings for every process of the stack: file discovery, hosts, a fast graceful stop."""
    host = spec.serve.host
    return {"DYN_DISCOVERY_BACKEND": "file", "DYN_FILE_KV": str(directory / "discovery"),
            "DYN_TCP_RPC_HOST": host, "DYN_TCP_RESPONSE_STREAM_HOST": host, "DYN_EVENT_PLANE_HOST": host,
            "DYN_SYSTEM_HOST": host, "HOME": str(directory / "home"), "DYN_GRACEFUL_SHUTDOWN_GRACE_PERIOD_SECS": "0",
            "DYN_LOG": "info", "NO_COLOR": "1", "PYTHONUNBUFFERED": "1"}


def frontend_command(spec: Any) -> list[str]:
    dyn = spec.serve.dynamo
    return [sys.executable, "-m", "dynamo.frontend", "--http-host", spec.serve.host, "--http-port",
            str(http_port(spec)), "--router-mode", dyn.router, "--migration-limit", str(dyn.migration_limit),
            "--namespace", NAMESPACE]


def worker_command(spec: Any, engine: Path, max_queue_size: int | None = None) -> list[str]:
    command = [sys.executable, "-m", WORKER_MODULE, "--engine-dir", str(Path(engine).resolve()),
               "--model-name", spec.model_name, "--namespace", NAMESPACE,
               "--max-queue-size", str(max_queue_size or spec.serve.max_queue_size)]
    return command + (["--no-kv-events"] if spec.serve.dynamo.router != "kv" else [])


def exposure_warning(spec: Any) -> str:
    """One line: what listens beyond loopback even on 127.0.0.1 (the ZeroMQ publishers)."""
    if spec.serve.dynamo.router != "kv":
        return ""
    return ("warning: Dynamo's ZeroMQ KV-event publishers (one per worker) bind every interface whatever serve.host "
            "(upstream hard-codes 0.0.0.0): firewall them, run the stack in a network namespace, or set "
            "serve.dynamo.router round-robin (no KV events)")


def system_ports(spec: Any) -> list[int]:
    """Each worker's metrics/health port: serve.dynamo.system_port + i, or free ports below 32768
    (Dynamo 1.6.1 reads DYN_SYSTEM_PORT as a signed 16-bit number: 32768 and up refuse to start)."""
    import random

    dyn = spec.serve.dynamo
    if dyn.system_port:
        return [dyn.system_port + i for i in range(dyn.workers)]
    ports: list[int] = []
    for candidate in random.sample(range(20000, MAX_SYSTEM_PORT + 1), 200):
        if len(ports) == dyn.workers:
            break
        with socket.socket() as sock:
            try:
                sock.bind((spec.serve.host, candidate))
            except OSError:
                continue
        ports.append(candidate)
    return ports


def plan(spec: Any, engine: Path) -> dict[str, Any]:
    """What `deploy --target dynamo` would run (the dry run)."""
    from trtspec import subproc

    workers = [subproc.format_command(worker_command(spec, engine)) for _ in range(spec.serve.dynamo.workers)]
    return {"frontend": subproc.format_command(frontend_command(spec)), "workers": workers,
            "env": environment(spec, Path("<workdir>/server/dynamo"))}


# -- start ---------------------------------------------------------------------------------------

def start(spec: Any, engine: Path, layout: Layout) -> dict[str, Any]:
    """Start the supervisor (which starts frontend and workers) and wait until every worker serves."""
    from trtspec import subproc
    from trtspec.errors import ServerError
    from trtspec.serve.supervisor import read_record, write_record

    require_installed()
    current = read_record(record_path(layout))
    if current and subproc.is_running(current.get("supervisor_pid") or 0):
        raise ServerError(f"a trtspec Dynamo stack is already running (supervisor pid {current['supervisor_pid']})",
                          fix="`trtspec deploy stop` first")
    _check_free(spec.serve.host, http_port(spec))
    directory = stack_dir(layout).resolve()
    for sub in ("discovery", "home"):
        (directory / sub).mkdir(parents=True, exist_ok=True)
    for stale in (directory / "discovery").glob("**/*"):  # another run's registrations
        if stale.is_file():
            stale.unlink()
    ports = system_ports(spec)
    record = {"state": "starting", "target": "dynamo", "workdir": str(layout.workdir.resolve()),
              "spec": spec.model_dump(mode="json"), "engine": str(Path(engine).resolve()),
              "env": environment(spec, directory), "host": spec.serve.host, "openai_port": http_port(spec),
              "frontend": {"pid": None, "log": str(directory / "frontend.log")},
              "workers": [{"index": i, "pid": None, "system_port": port, "restarts": 0,
                           "log": str(directory / f"worker-{i}.log")} for i, port in enumerate(ports)],
              "supervisor_log": str(directory / "supervisor.log"), "started": time.time()}
    write_record(record_path(layout), record)
    pid = subproc.start([sys.executable, "-m", SUPERVISOR_MODULE, str(record_path(layout).resolve())],
                        log_path=directory / "supervisor.log")
    try:
        return _wait_ready(layout, pid, spec.serve.startup_timeout_s * 2 + 30)
    except BaseException:
        stop(layout)
        raise


def _check_free(host: str, port: int) -> None:
    from trtspec.errors import ServerError

    with socket.socket() as sock:
        # as the frontend binds: a listener refuses, connections of a stack just stopped (TIME_WAIT) do not
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            sock.bind((host, port))
        except OSError:
            raise ServerError(f"port {port} on {host} is in use", fix="stop what listens there or set serve.openai_port") \
                from None


def _wait_ready(layout: Layout, pid: int, timeout: float) -> dict[str, Any]:
    from trtspec import subproc
    from trtspec.errors import ServerError
    from trtspec.serve.supervisor import read_record

    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        record = read_record(record_path(layout)) or {}
        if record.get("state") == "ready":
            return {**record, "supervisor_pid": pid, "startup_s": round(time.time() - record["started"], 1)}
        if record.get("state") == "dead" or not subproc.is_running(pid):
            raise ServerError(f"the Dynamo stack did not start: {record.get('reason') or 'the supervisor exited'}",
                              fix=f"read {record.get('supervisor_log')} and the logs beside it")
        time.sleep(0.25)
    raise ServerError(f"the Dynamo stack did not serve within {timeout:.0f} s (stopped it)",
                      fix="raise serve.startup_timeout_s (each worker loads the engine) or read the logs in "
                          f"{stack_dir(layout)}")


# -- status and stop ---------------------------------------------------------------------------------

def status(layout: Layout) -> dict[str, Any]:
    """The record, whether each process lives, the frontend's health and what each worker served."""
    from trtspec import subproc
    from trtspec.serve.dynamo.metrics import parse_served
    from trtspec.serve.supervisor import read_record

    record = read_record(record_path(layout))
    if record is None:
        return {"running": False, "ready": False, "state": "stopped", "reason": "no Dynamo stack recorded"}
    host = record["host"]
    supervised = subproc.is_running(record.get("supervisor_pid") or 0)
    health = _get_json(f"http://{host}:{record['openai_port']}/health")
    instances = [i for i in (health or {}).get("instances", []) if i.get("endpoint") == "generate"]
    workers = []
    for worker in record["workers"]:
        alive = bool(worker.get("pid")) and subproc.is_running(worker["pid"])
        text = _get_text(f"http://{host}:{worker['system_port']}/metrics") if alive else None
        workers.append({**worker, "running": alive, "served": parse_served(text) if text is not None else None})
    ready = supervised and health is not None and len(instances) >= len(workers) and all(w["running"] for w in workers)
    return {"target": "dynamo", "state": record.get("state") if supervised else "dead", "running": supervised,
            "ready": ready, "supervisor_pid": record.get("supervisor_pid"), "host": host,
            "openai_port": record["openai_port"], "registered_workers": len(instances),
            "frontend": record.get("frontend"), "workers": workers, "supervisor_log": record.get("supervisor_log"),
            "uptime_s": round(time.time() - record["started"], 1)}


def stop(layout: Layout) -> dict[str, Any]:
    """Stop the supervisor (it ends workers, then the frontend); anything it left, by recorded pid."""
    from trtspec import subproc
    from trtspec.serve.supervisor import read_record

    path = record_path(layout)
    record = read_record(path)
    if record is None:
        return {"stopped": False, "reason": "no Dynamo stack recorded"}
    supervisor = int(record.get("supervisor_pid") or 0)
    stopped = bool(supervisor) and subproc.stop(supervisor, timeout=30.0)
    for pid in [w.get("pid") for w in record.get("workers", [])] + [(record.get("frontend") or {}).get("pid")]:
        if pid and subproc.is_running(pid) and _ours(pid):
            subproc.stop(pid, timeout=10.0)
            stopped = True
    path.unlink(missing_ok=True)
    return {"stopped": stopped, "pid": supervisor, **({} if stopped else {"reason": "not running"})}


def _ours(pid: int) -> bool:
    from trtspec import subproc

    line = " ".join(subproc.command_line(pid))
    return WORKER_MODULE in line or "dynamo.frontend" in line


def _get_text(url: str, timeout: float = 3.0) -> str | None:
    import urllib.request

    try:
        with urllib.request.urlopen(url, timeout=timeout) as response:  # noqa: S310 - our own loopback URL
            return response.read().decode()
    except OSError:
        return None


def _get_json(url: str) -> dict[str, Any] | None:
    text = _get_text(url)
    try:
        return json.loads(text) if text is not None else None
    except ValueError:
        return None
