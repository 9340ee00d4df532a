"""Start, stop and check the local tritonserver, which a supervisor process owns.

The command lines are pure plans in trtspec.serve.launch (and k8s manifests in trtspec.serve.k8s); what the
server needs before it starts is in trtspec.serve.setup; the process that runs it, watches it
and restarts it is trtspec.serve.supervisor. This module is what `trtspec deploy` calls:

- `start_local` locks the port set (trtspec.serve.ports), checks the ports are free, prepares the
  backend directory and environment, writes <workdir>/server/server.json and starts the
  supervisor detached (through trtspec.subproc, handing it the port locks). It returns once the
  supervisor says the server serves (health, identity and a one-token inference) and raises
  ServerError with the log tail when it says dead. Interrupted (Ctrl-C, SIGTERM), it stops what
  it started before re-raising.
- `stop_local` asks the supervisor to stop (SIGTERM) and waits; when the supervisor is gone it
  ends the recorded server itself, checked by its command line (pids are reused), and removes
  its /dev/shm regions.
- `status` reports what server.json says and, with probe, whether a one-token inference comes
  back: Triton's own ready endpoints stay 200 after the model's stub died. With
  serve.openai_port it also reports the OpenAI frontend (running, GET /health's status); the
  server is ready only when the frontend answers 200 too.
"""

from __future__ import annotations

import os
import signal
import sys
import threading
import time
from pathlib import Path
from typing import Any

from trtspec import subproc
from trtspec.artifacts import Layout
from trtspec.errors import ServerError
from trtspec.serve.ports import PortLocks, check_ports, connect_host, is_ready, port_free
from trtspec.serve.setup import find_tritonserver, prepare_backends, server_env
from trtspec.serve.supervisor import read_record as _read
from trtspec.serve.supervisor import remove_shm, write_record

__all__ = ["check_ports", "find_tritonserver", "is_ready", "port_free", "prepare_backends", "server_env",
           "start_local", "status", "stop_local"]
SUPERVISOR_MODULE = "trtspec.serve.supervisor"
PRIVATE_FIELDS = ("spec", "env", "lock_fds")  # in server.json for the supervisor, not for reports


def read_record(layout: Layout) -> dict[str, Any] | None:
    return _read(layout.server_pid)


def _log_tail(log_path: str | Path, lines: int = 25) -> str:
    try:
        return subproc.tail(Path(log_path).read_text(errors="replace"), lines)
    except OSError:
        return "(no log)"


def _supervisor_alive(record: dict[str, Any]) -> bool:
    pid = record.get("supervisor_pid")
    return bool(pid) and subproc.is_running(pid) and SUPERVISOR_MODULE in subproc.command_line(pid)


def _server_alive(record: dict[str, Any]) -> bool:
    """The recorded pid still runs our tritonserver (pids are reused)."""
    pid = record.get("pid")
    if not pid or not subproc.is_running(pid):
        return False
    argv = subproc.command_line(pid)
    return bool(argv) and argv[0] in (record.get("binary"), "mpirun") and any(
        part.startswith("--model-repository=") for part in argv)


# -- start -------------------------------------------------------------------------------------

def start_local(spec: Any, repository: Path, layout: Layout | None = None) -> dict[str, Any]:
    """Start a supervised tritonserver here and wait until it serves; returns server.json's record."""
    layout = layout or Layout.from_spec(spec)
    current = read_record(layout)
    if current and (_supervisor_alive(current) or _server_alive(current)):
        raise ServerError(f"a trtspec tritonserver is already running (pid {current.get('pid')})",
                          fix="`trtspec deploy stop` first")
    workdir = str(layout.workdir.resolve())
    locks = PortLocks.acquire(spec.serve, {"workdir": workdir, "pid": os.getpid()})
    try:
        check_ports(spec.serve)
        binary = find_tritonserver()
        backends = prepare_backends(layout, binary)
        layout.server_dir.mkdir(parents=True, exist_ok=True)
        log = layout.server_log.resolve()
        log.write_text("")
        record = {"state": "starting", "workdir": workdir, "spec": spec.model_dump(mode="json"),
                  "binary": str(binary), "backends": str(backends), "repository": str(Path(repository).resolve()),
                  "env": server_env(binary, spec.build.backend, backends), "log": str(log),
                  "supervisor_log": str(layout.supervisor_log.resolve()), "host": spec.serve.host,
                  "http_port": spec.serve.http_port, "grpc_port": spec.serve.grpc_port,
                  "metrics_port": spec.serve.metrics_port, "openai_port": spec.serve.openai_port or None,
                  "restart": spec.serve.restart, "started": time.time(),
                  "lock_fds": locks.fds}
        write_record(layout.server_pid, record)
        with _stop_on_interrupt(layout) as interrupt:
            pid = subproc.start([sys.executable, "-m", SUPERVISOR_MODULE, str(layout.server_pid.resolve())],
                                log_path=layout.supervisor_log, pass_fds=tuple(locks.fds))
            record["supervisor_pid"] = interrupt.supervisor_pid = pid
            return _wait_for_supervisor(layout, pid, spec.serve.startup_timeout_s + 30)
    finally:
        locks.release()  # the supervisor holds its own copies


class _stop_on_interrupt:
    """Ctrl-C or SIGTERM while deploy waits: stop the supervisor and its server, then re-raise."""

    def __init__(self, layout: Layout):
        self.layout = layout
        self.supervisor_pid: int | None = None

    def __enter__(self) -> _stop_on_interrupt:
        # Only the main thread may set handlers; a caller with its own SIGTERM handler keeps it.
        main = threading.current_thread() is threading.main_thread()
        self.installed = main and signal.getsignal(signal.SIGTERM) in (signal.SIG_DFL, None)
        if self.installed:
            signal.signal(signal.SIGTERM, _raise_interrupt)
        return self

    def __exit__(self, kind: Any, error: Any, trace: Any) -> None:
        if self.installed:
            signal.signal(signal.SIGTERM, signal.SIG_DFL)
        if kind is not None and issubclass(kind, (KeyboardInterrupt, SystemExit)):
            # The supervisor may not have recorded itself yet: stop it by the pid deploy knows
            # (it ends any tritonserver it started), then whatever server.json still names.
            if self.supervisor_pid is not None:
                subproc.stop(self.supervisor_pid, timeout=40.0)
            stop_local(self.layout)


def _raise_interrupt(*_: Any) -> None:
    raise KeyboardInterrupt


def _wait_for_supervisor(layout: Layout, pid: int, timeout: float) -> dict[str, Any]:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        record = read_record(layout) or {}
        if record.get("state") == "ready":
            return {k: v for k, v in record.items() if k not in PRIVATE_FIELDS}
        if record.get("state") == "dead" or not subproc.is_running(pid):
            reason = record.get("reason") or f"the supervisor exited; see {layout.supervisor_log}"
            stop_local(layout)
            raise ServerError(f"tritonserver did not start: {reason}\nlog {record.get('log')}:\n"
                              f"{_log_tail(record.get('log') or layout.server_log)}",
                              fix="read the log; raise serve.startup_timeout_s if it was still loading")
        time.sleep(0.2)
    stop_local(layout)
    raise ServerError(f"tritonserver not serving after {timeout:.0f} s (stopped it); log {layout.server_log}:\n"
                      f"{_log_tail(layout.server_log)}", fix="raise serve.startup_timeout_s or read the log")


# -- stop --------------------------------------------------------------------------------------

def stop_local(layout: Layout) -> dict[str, Any]:
    """Stop the server recorded in server.json (through its supervisor), and nothing else."""
    record = read_record(layout)
    if record is None:
        return {"stopped": False, "reason": "no server recorded"}
    server_pid = record.get("pid")
    supervised = _supervisor_alive(record)
    alive = _server_alive(record)
    if supervised:
        subproc.stop(record["supervisor_pid"], timeout=40.0)  # it stops the server and removes server.json
    frontend = record.get("openai_pid")
    if frontend and subproc.is_running(frontend) and "trtspec.serve.openai_app" in subproc.command_line(frontend):
        subproc.stop(frontend)  # the supervisor was gone: end its OpenAI frontend too (checked by command line)
    if _server_alive(record):
        subproc.stop(server_pid)
    removed = remove_shm(record.get("shm_prefix"))
    layout.server_pid.unlink(missing_ok=True)
    if supervised or alive:
        return {"stopped": True, "pid": server_pid, **({"shm_removed": len(removed)} if removed else {})}
    reason = ("not running (stale record removed)" if not server_pid or not subproc.is_running(server_pid) else
              "pid now belongs to another process; left it alone (stale record removed)")
    return {"stopped": False, "pid": server_pid, "reason": reason,
            **({"shm_removed": len(removed)} if removed else {})}


# -- status ------------------------------------------------------------------------------------

def status(layout: Layout, *, probe: bool = True, probe_timeout_s: float = 30.0) -> dict[str, Any]:
    """What server.json says, whether the processes live, and (probe) whether a token comes back."""
    record = read_record(layout)
    if record is None:
        return {"running": False, "ready": False, "state": "stopped", "reason": "no server recorded"}
    public = {k: v for k, v in record.items() if k not in PRIVATE_FIELDS}
    running = _server_alive(record)
    result = {**public, "running": running, "supervised": _supervisor_alive(record),
              "uptime_s": round(time.time() - record["started"], 1) if running and record.get("started") else None}
    if record.get("state") == "ready" and not result["supervised"]:
        result["state"] = "unsupervised" if running else "dead"
        result["reason"] = "the supervisor is gone" + ("" if running else " and so is tritonserver")
    ready = running and is_ready(record["host"], record["http_port"])
    if record.get("openai_port"):
        from trtspec.serve.openai_frontend import health

        alive = bool(record.get("openai_pid")) and subproc.is_running(record["openai_pid"])
        result["openai"] = {"port": record["openai_port"], "running": alive,
                            "health": health(record["host"], record["openai_port"]) if alive else None}
        ready = ready and result["openai"]["health"] == 200
    if probe and ready:
        from trtspec.client.triton import probe as one_token

        result["probe"] = one_token(f"{connect_host(record['host'])}:{record['grpc_port']}", timeout_s=probe_timeout_s)
        ready = result["probe"]["ok"]
    result["ready"] = ready
    return result
