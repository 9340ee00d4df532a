"""The supervisor: the process that owns a local tritonserver after `trtspec deploy` returns.

    python -m trtspec.serve.supervisor <workdir>/server/server.json

`trtspec deploy` (trtspec.serve.server.start_local) writes server.json with everything needed to run
the server (the spec, binary, backend directory, environment), hands over the port locks and
starts this module detached through trtspec.subproc. From then on only the supervisor writes
server.json (atomically), and it alone starts and ends tritonserver:

1. start tritonserver with a fresh `--id` and shared-memory prefix;
2. wait until it serves: /v2/health/ready, the name on the HTTP and gRPC ports is that id (not
   another server's), and a one-token inference comes back; then, with serve.openai_port, start
   the OpenAI frontend (trtspec.serve.openai_frontend) and wait for its /health;
3. watch it every WATCH_INTERVAL_S: tritonserver gone, one of its Python stubs gone (Triton
   2.51 keeps answering ready while every request fails with "Stub process is not healthy"), or
   the OpenAI frontend gone;
4. end it: on `deploy stop` (SIGTERM) gracefully, on a failure at once with SIGKILL, so
   in-flight clients get an error instead of waiting (the frontend first); then remove its
   /dev/shm regions;
5. after a failure, start again (serve.restart: on-failure, with backoff, at most MAX_RESTARTS
   in RESTART_WINDOW_S) or record the server dead (never; a failure before it ever served; too
   many restarts) and exit, which releases the port locks.

States in server.json: starting, ready, restarting, dead (with `reason`). A stopped server has no
server.json.
"""

from __future__ import annotations

import json
import os
import secrets
import signal
import sys
import time
from pathlib import Path
from typing import Any

WATCH_INTERVAL_S = 0.5
MAX_RESTARTS = 5
RESTART_WINDOW_S = 600.0
MAX_BACKOFF_S = 30.0
STOP_TIMEOUT_S = 20.0
STUB_NAME = "triton_python_backend_stub"


def read_record(path: Path) -> dict[str, Any] | None:
    try:
        return json.loads(Path(path).read_text())
    except (OSError, ValueError):
        return None


def write_record(path: Path, record: dict[str, Any]) -> None:
    """Replace server.json in one rename, so a reader never sees half of it."""
    partial = Path(path).with_name(f".{Path(path).name}.{os.getpid()}")
    partial.write_text(json.dumps(record, indent=2) + "\n")
    os.replace(partial, path)


def remove_shm(prefix: str | None) -> list[str]:
    """Unlink the /dev/shm regions a server with this prefix left; the names removed."""
    from trtspec.artifacts import shm_regions

    removed = []
    for region in shm_regions(prefix or ""):
        try:
            region.unlink()
            removed.append(region.name)
        except FileNotFoundError:
            pass
    return removed


def stub_pids(server_pid: int) -> list[int]:
    from trtspec import subproc

    return [pid for pid in subproc.children(server_pid)
            if any(part.endswith(STUB_NAME) for part in subproc.command_line(pid)[:1])]


class Supervisor:
    def __init__(self, path: Path):
        from trtspec.spec.schema import validate_spec

        self.path = Path(path)
        self.record = read_record(self.path) or {}
        self.spec = validate_spec(self.record["spec"])
        self.stop_requested = False
        self.failures: list[float] = []

    # -- bookkeeping -----------------------------------------------------------------------------

    def update(self, **fields: Any) -> None:
        self.record.update(fields)
        write_record(self.path, self.record)
        if "state" in fields:
            self.say(f"state {fields['state']}" + (f": {fields['reason']}" if fields.get("reason") else ""))

    def say(self, message: str) -> None:
        print(time.strftime("%Y-%m-%dT%H:%M:%S"), message, flush=True)

    def request_stop(self, *_: Any) -> None:
        self.stop_requested = True

    def sleep(self, seconds: float) -> None:
        deadline = time.monotonic() + seconds
        while not self.stop_requested and time.monotonic() < deadline:
            time.sleep(min(0.1, max(0.0, deadline - time.monotonic())))

    # -- the loop ----------------------------------------------------------------------------------

    def run(self) -> int:
        self.update(supervisor_pid=os.getpid())
        for fd in self.record.get("lock_fds") or []:  # inherited from deploy: now we hold the ports
            os.ftruncate(fd, 0)
            os.pwrite(fd, json.dumps({"workdir": self.record["workdir"], "pid": os.getpid()}).encode(), 0)
        ever_served = False
        while True:
            # 1. start tritonserver
            pid, prefix = self.start_server()
            # 2. wait until it serves, 3. then watch it
            outcome = self.wait_serving(pid)
            if outcome is None and self.spec.serve.openai_port:
                outcome = self.start_frontend()
            if outcome is None:
                ever_served = True
                # The stub pids go out with "ready": a reader of a ready record can rely on them.
                stubs = stub_pids(pid)
                self.update(state="ready", ready_at=time.time(), stub_pids=stubs)
                outcome = self.watch(pid, stubs + ([self.record["openai_pid"]] if self.record.get("openai_pid") else []))
            # 4. end it
            if outcome == "stop":
                self.end_server(pid, prefix, graceful=True)
                self.path.unlink(missing_ok=True)
                self.say("stopped")
                return 0
            self.end_server(pid, prefix, graceful=False)
            # 5. start again, or record it dead
            now = time.time()
            self.failures = [t for t in self.failures if now - t < RESTART_WINDOW_S] + [now]
            failures = (self.record.get("failures") or [])[-9:] + [{"time": now, "reason": outcome}]
            if not ever_served or self.spec.serve.restart == "never" or len(self.failures) > MAX_RESTARTS:
                why = ("failed before it ever served" if not ever_served else
                       "serve.restart is never" if self.spec.serve.restart == "never" else
                       f"{len(self.failures)} failures within {RESTART_WINDOW_S:.0f} s")
                self.update(state="dead", reason=f"{outcome} ({why})", failures=failures, pid=None)
                return 1
            backoff = min(MAX_BACKOFF_S, 2.0 ** (len(self.failures) - 1))
            self.update(state="restarting", reason=f"{outcome}; restarting in {backoff:.0f} s", failures=failures,
                        restarts=int(self.record.get("restarts", 0)) + 1, pid=None)
            self.sleep(backoff)
            if self.stop_requested:
                self.path.unlink(missing_ok=True)
                return 0

    def start_server(self) -> tuple[int, str]:
        from trtspec import subproc
        from trtspec.serve.launch import local_command

        token = secrets.token_hex(6)
        server_id, prefix = f"trtspec-{token}", f"trtspec_{token}"
        command = local_command(self.spec, Path(self.record["binary"]), Path(self.record["repository"]),
                                Path(self.record["backends"]), server_id=server_id, shm_prefix=prefix)
        pid = subproc.start(command, log_path=self.record["log"], env=self.record["env"])
        self.update(state="starting", pid=pid, server_id=server_id, shm_prefix=prefix,
                    command=subproc.format_command(command), started=time.time())
        return pid, prefix

    def wait_serving(self, pid: int) -> str | None:
        """None once the server serves as itself; else "stop" or why it does not."""
        from trtspec import subproc
        from trtspec.client.triton import probe
        from trtspec.serve import ports

        serve, server_id = self.spec.serve, self.record["server_id"]
        start = time.monotonic()
        while time.monotonic() - start < serve.startup_timeout_s:
            if self.stop_requested:
                return "stop"
            if not subproc.is_running(pid):
                return f"tritonserver exited during startup; see {self.record['log']}"
            name = ports.server_name(serve.host, serve.http_port)
            if name is not None and name != server_id:
                return (f"another server answers on http_port {serve.http_port} (it calls itself {name!r}); "
                        f"this one was never reached")
            if name == server_id and ports.is_ready(serve.host, serve.http_port):
                url = f"{ports.connect_host(serve.host)}:{serve.grpc_port}"
                grpc_name = _grpc_name(url)
                if grpc_name != server_id:
                    return f"another server answers on grpc_port {serve.grpc_port} (it calls itself {grpc_name!r})"
                answer = probe(url, timeout_s=max(10.0, serve.startup_timeout_s - (time.monotonic() - start)))
                self.record["startup_probe"] = answer
                if answer["ok"]:
                    self.record["startup_s"] = round(time.monotonic() - start, 2)
                    return None
                return f"ready, but a one-token inference failed: {answer['error']}"
            time.sleep(0.25)
        return f"not ready after {serve.startup_timeout_s:.0f} s (serve.startup_timeout_s)"

    def start_frontend(self) -> str | None:
        """Start the OpenAI frontend; None once its /health answers 200, else why not (or "stop")."""
        from trtspec.serve import openai_frontend

        frontend = openai_frontend.start(self.spec, self.record)
        self.update(openai_pid=frontend, openai_port=self.spec.serve.openai_port,
                    openai_log=str(openai_frontend.log_path(self.record)))
        return openai_frontend.wait_healthy(self.spec, frontend, max(10.0, self.spec.serve.startup_timeout_s / 2),
                                            lambda: self.stop_requested)

    def watch(self, pid: int, stubs: list[int]) -> str:
        """Block until a stop is requested ("stop") or the server breaks (why)."""
        from trtspec import subproc

        while True:
            if self.stop_requested:
                return "stop"
            if not subproc.is_running(pid):
                return f"tritonserver (pid {pid}) exited{_exit_status(pid)}"
            for stub in stubs:
                if not subproc.is_running(stub):
                    if stub == self.record.get("openai_pid"):
                        return f"the OpenAI frontend (pid {stub}) exited; see {self.record.get('openai_log')}"
                    return f"the model's Python stub (pid {stub}) died; every request would fail"
            time.sleep(WATCH_INTERVAL_S)

    def end_server(self, pid: int, prefix: str, *, graceful: bool) -> None:
        from trtspec import subproc

        frontend = self.record.get("openai_pid")
        if frontend:  # first, so no new request reaches a server that is going away
            subproc.stop(frontend, timeout=STOP_TIMEOUT_S) if graceful else subproc.kill(frontend)
            self.update(openai_pid=None)
        if graceful:
            subproc.stop(pid, timeout=STOP_TIMEOUT_S)
        else:
            subproc.kill(pid)
        for stub in self.record.get("stub_pids") or []:
            subproc.kill(stub, timeout=5.0)
        removed = remove_shm(prefix)
        if removed:
            self.say(f"removed {len(removed)} shared-memory regions ({prefix}*)")


def _grpc_name(url: str) -> str | None:
    try:
        import tritonclient.grpc as grpcclient

        client = grpcclient.InferenceServerClient(url)
        try:
            return client.get_server_metadata().name
        finally:
            client.close()
    except Exception:  # noqa: BLE001 - nothing answering is an answer
        return None


def _exit_status(pid: int) -> str:
    try:
        _, status = os.waitpid(pid, os.WNOHANG)
    except ChildProcessError:
        return ""
    if os.WIFSIGNALED(status):
        return f" (signal {os.WTERMSIG(status)})"
    if os.WIFEXITED(status):
        return f" (exit code {os.WEXITSTATUS(status)})"
    return ""


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    supervisor = Supervisor(Path(args[0]))
    signal.signal(signal.SIGTERM, supervisor.request_stop)
    signal.signal(signal.SIGINT, supervisor.request_stop)
    signal.signal(signal.SIGHUP, signal.SIG_IGN)
    return supervisor.run()


if __name__ == "__main__":
    sys.exit(main())
