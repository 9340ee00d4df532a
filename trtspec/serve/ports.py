"""One trtspec server per port set: port locks, free-port checks and the server's identity.

Two `trtspec deploy` runs on the same ports from different workdirs used to both print "ready"
(the loser's readiness check was answered by the winner). Now:

- `PortLocks.acquire` takes an exclusive flock on <tmp>/trtspec-ports-<uid>/<port>.lock for each
  of the http, grpc, metrics (and OpenAI, when on) ports, without waiting; the lock files say which workdir and pid
  hold them. The supervisor inherits the locked descriptors and holds them while it lives, so a
  second deploy on any of those ports fails at once, naming the holder.
- `check_ports` catches what is not trtspec's (another program listening).
- `server_name` reads what a server reports as its name (GET /v2); trtspec starts tritonserver
  with `--id=<a fresh id>`, so a readiness check answered by another server is told apart.
"""

from __future__ import annotations

import fcntl
import json
import os
import socket
from dataclasses import dataclass, field
from typing import Any

from trtspec.artifacts import port_lock_path
from trtspec.errors import ServerError


def serve_ports(serve: Any) -> list[tuple[str, int]]:
    ports = [("http_port", serve.http_port), ("grpc_port", serve.grpc_port), ("metrics_port", serve.metrics_port)]
    return ports + ([("openai_port", serve.openai_port)] if getattr(serve, "openai_port", 0) else [])


@dataclass
class PortLocks:
    """Exclusive locks on a server's ports; `fds` are handed to the process that keeps them."""

    fds: list[int] = field(default_factory=list)

    @classmethod
    def acquire(cls, serve: Any, holder: dict[str, Any]) -> PortLocks:
        locks = cls()
        try:
            for name, port in serve_ports(serve):
                locks._lock(name, port, holder)
        except BaseException:
            locks.release()
            raise
        return locks

    def _lock(self, name: str, port: int, holder: dict[str, Any]) -> None:
        path = port_lock_path(port)
        path.parent.mkdir(parents=True, exist_ok=True)
        fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            held_by = _read_holder(fd)
            os.close(fd)
            # An empty holder: the other deploy has the lock and has not written its name yet.
            who = (f" by the trtspec server of {held_by['workdir']} (supervisor pid {held_by['pid']})" if held_by
                   else " by another trtspec deploy that is starting now")
            raise ServerError(f"{name} {port} is held{who}",
                              fix="`trtspec deploy stop` that one, or choose other serve.*_port values") from None
        os.ftruncate(fd, 0)
        os.pwrite(fd, json.dumps(holder).encode(), 0)
        self.fds.append(fd)

    def release(self) -> None:
        """Close our descriptors (a process that inherited them keeps the locks)."""
        for fd in self.fds:
            os.close(fd)
        self.fds.clear()


def _read_holder(fd: int) -> dict[str, Any] | None:
    try:
        return json.loads(os.pread(fd, 4096, 0) or b"null")
    except (OSError, ValueError):
        return None


def port_free(host: str, port: int) -> bool:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            sock.bind((host, port))
        except OSError:
            return False
    return True


def check_ports(serve: Any) -> None:
    busy = [f"{name} {port}" for name, port in serve_ports(serve) if not port_free(serve.host, port)]
    if busy:
        raise ServerError(f"port in use on {serve.host}: {', '.join(busy)}",
                          fix="stop what holds it (`trtspec deploy status`) or choose other serve.*_port values")


def connect_host(host: str) -> str:
    return "127.0.0.1" if host in ("0.0.0.0", "") else host


def http_get(url: str, timeout: float = 2.0) -> tuple[int | None, bytes]:
    """(status, body) of a GET; status None when nothing answered."""
    import urllib.error
    import urllib.request

    try:
        with urllib.request.urlopen(url, timeout=timeout) as response:
            return response.status, response.read()
    except urllib.error.HTTPError as error:
        return error.code, b""
    except (urllib.error.URLError, OSError):
        return None, b""


def is_ready(host: str, http_port: int) -> bool:
    return http_get(f"http://{connect_host(host)}:{http_port}/v2/health/ready")[0] == 200


def server_name(host: str, http_port: int) -> str | None:
    """The name the server on this port reports (its --id), or None when none answers."""
    status, body = http_get(f"http://{connect_host(host)}:{http_port}/v2")
    if status != 200:
        return None
    try:
        return json.loads(body).get("name")
    except ValueError:
        return None
