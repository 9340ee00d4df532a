"""Start, stop and check the local tritonserver process.

The command lines are pure plans in trtspec.launch (and k8s manifests in trtspec.k8s);
`start_local`, `stop_local` and `status` are the thin layer that executes them, always through
trtspec.subproc.

Local: the binary is $TRTSPEC_TRITONSERVER, `/opt/tritonserver/bin/tritonserver` (the container)
or the one inside the nvidia-pytriton wheel (CPU). The Python backend directory is prepared under
<workdir>/server/backends with the stub built for the running Python, and the server gets a
PYTHONPATH holding the project root and this venv's site-packages, so the cpu model imports
trtspec, torch and transformers. The server binds 127.0.0.1 unless the spec says otherwise, runs
with model control mode `none`, logs to <workdir>/server/tritonserver.log and is waited for on
/v2/health/ready; on failure the log tail is in the error. The pid is recorded in
<workdir>/server/server.json and `stop` ends only that process (checked by its command line).
"""

from __future__ import annotations

import socket
import time
from pathlib import Path
from typing import Any

from trtspec import subproc
from trtspec.artifacts import Layout, read_json, write_json
from trtspec.errors import ServerError
from trtspec.launch import local_command
from trtspec.server_setup import find_tritonserver, prepare_backends, server_env

__all__ = ["find_tritonserver", "prepare_backends", "server_env", "start_local", "stop_local", "status"]

def port_free(host: str, port: int) -> bool:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            sock.bind((host, port))
        except OSError:
            return False
    return True


def check_ports(serve: Any) -> None:
    busy = [f"{name} {port}" for name, port in (("http_port", serve.http_port), ("grpc_port", serve.grpc_port),
                                                 ("metrics_port", serve.metrics_port))
            if not port_free(serve.host, port)]
    if busy:
        raise ServerError(f"port in use on {serve.host}: {', '.join(busy)}",
                          fix="stop what holds it (`trtspec deploy status`) or choose other serve.*_port values")


# -- executing -------------------------------------------------------------------------------

def _get(url: str, timeout: float = 2.0) -> int | None:
    import urllib.error
    import urllib.request

    try:
        with urllib.request.urlopen(url, timeout=timeout) as response:
            return response.status
    except urllib.error.HTTPError as error:
        return error.code
    except (urllib.error.URLError, OSError):
        return None


def is_ready(host: str, http_port: int) -> bool:
    return _get(f"http://{_connect_host(host)}:{http_port}/v2/health/ready") == 200


def _connect_host(host: str) -> str:
    return "127.0.0.1" if host in ("0.0.0.0", "") else host


def wait_ready(pid: int, host: str, http_port: int, timeout: float, log_path: Path) -> float:
    """Seconds until /v2/health/ready answered 200; ServerError with the log tail otherwise."""
    start = time.monotonic()
    while time.monotonic() - start < timeout:
        if is_ready(host, http_port):
            return time.monotonic() - start
        if not subproc.is_running(pid):
            raise ServerError(f"tritonserver exited during startup; log {log_path}:\n{_log_tail(log_path)}")
        time.sleep(0.25)
    subproc.stop(pid)
    raise ServerError(f"tritonserver not ready after {timeout:.0f} s (stopped it); log {log_path}:\n"
                      f"{_log_tail(log_path)}", fix="raise serve.startup_timeout_s or read the log")


def _log_tail(log_path: Path, lines: int = 25) -> str:
    try:
        return subproc.tail(Path(log_path).read_text(errors="replace"), lines)
    except OSError:
        return "(no log)"


def start_local(spec: Any, repository: Path, layout: Layout | None = None) -> dict[str, Any]:
    """Start tritonserver on this machine and wait until ready; returns the record in server.json."""
    layout = layout or Layout.from_spec(spec)
    current = read_record(layout)
    if current and subproc.is_running(current["pid"]) and _is_ours(current):
        raise ServerError(f"a trtspec tritonserver is already running (pid {current['pid']})",
                          fix="`trtspec deploy stop` first")
    check_ports(spec.serve)
    binary = find_tritonserver()
    backends = prepare_backends(layout, binary)
    command = local_command(spec, binary, Path(repository), backends)
    log_path = layout.server_log.resolve()
    log_path.parent.mkdir(parents=True, exist_ok=True)
    log_path.write_text("")
    pid = subproc.start(command, log_path=log_path, env=server_env(binary, spec.build.backend, backends))
    record = {"pid": pid, "binary": str(binary), "host": spec.serve.host, "http_port": spec.serve.http_port,
              "grpc_port": spec.serve.grpc_port, "metrics_port": spec.serve.metrics_port,
              "repository": str(Path(repository).resolve()), "log": str(log_path),
              "command": subproc.format_command(command), "started": time.time()}
    write_json(layout.server_pid, record)
    try:
        record["startup_s"] = round(wait_ready(pid, spec.serve.host, spec.serve.http_port,
                                               spec.serve.startup_timeout_s, log_path), 2)
    except ServerError:
        layout.server_pid.unlink(missing_ok=True)
        raise
    write_json(layout.server_pid, record)
    return record


def read_record(layout: Layout) -> dict[str, Any] | None:
    return read_json(layout.server_pid) if layout.server_pid.exists() else None


def _is_ours(record: dict[str, Any]) -> bool:
    """The pid still belongs to the tritonserver we started (pids are reused)."""
    try:
        cmdline = Path(f"/proc/{record['pid']}/cmdline").read_bytes().split(b"\0")
    except OSError:
        return False
    first = cmdline[0].decode(errors="replace") if cmdline else ""
    return first in (record["binary"], "mpirun") and any(
        part.decode(errors="replace").startswith("--model-repository=") for part in cmdline)


def stop_local(layout: Layout) -> dict[str, Any]:
    """Stop the server recorded in server.json, and nothing else."""
    record = read_record(layout)
    if record is None:
        return {"stopped": False, "reason": "no server recorded"}
    if not subproc.is_running(record["pid"]):
        layout.server_pid.unlink(missing_ok=True)
        return {"stopped": False, "pid": record["pid"], "reason": "not running (stale record removed)"}
    if not _is_ours(record):
        layout.server_pid.unlink(missing_ok=True)
        return {"stopped": False, "pid": record["pid"],
                "reason": "pid now belongs to another process; left it alone (stale record removed)"}
    subproc.stop(record["pid"])
    layout.server_pid.unlink(missing_ok=True)
    return {"stopped": True, "pid": record["pid"]}


def status(layout: Layout) -> dict[str, Any]:
    """What server.json says and whether the server answers."""
    record = read_record(layout)
    if record is None:
        return {"running": False, "ready": False, "reason": "no server recorded"}
    running = subproc.is_running(record["pid"]) and _is_ours(record)
    ready = running and is_ready(record["host"], record["http_port"])
    return {**record, "running": running, "ready": ready,
            "uptime_s": round(time.time() - record["started"], 1) if running else None}
