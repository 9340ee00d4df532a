"""The supervisor of a local Dynamo stack: the process that owns frontend and workers after `deploy` returns.

    python -m trtspec.serve.dynamo.supervise <workdir>/server/dynamo/stack.json

1. start the frontend, then every worker (each loads the engine: tens of seconds on a busy CPU);
2. "ready" once the frontend's /health lists every worker's generate endpoint;
3. watch every WATCH_INTERVAL_S: a worker gone is started again on its own metrics port (the frontend
   migrates its in-flight requests to the others, serve.dynamo.migration_limit times, or ends them
   with an error; a new request never waits for it), a frontend gone is started again too;
   serve.restart never records it dead instead, and more than MAX_RESTARTS failures of one process
   in RESTART_WINDOW_S leave it dead;
4. on SIGTERM (`deploy stop`): workers first (they unregister), then the frontend; stack.json removed.
"""

from __future__ import annotations

import os
import signal
import sys
import time
from pathlib import Path
from typing import Any

WATCH_INTERVAL_S = 0.5
MAX_RESTARTS = 5
RESTART_WINDOW_S = 600.0


class StackSupervisor:
    def __init__(self, path: Path):
        from trtspec.serve.supervisor import read_record
        from trtspec.spec.schema import validate_spec

        self.path = Path(path)
        self.record: dict[str, Any] = read_record(self.path) or {}
        self.spec = validate_spec(self.record["spec"])
        self.stop_requested = False
        self.failures: dict[str, list[float]] = {}

    def update(self, **fields: Any) -> None:
        from trtspec.serve.supervisor import write_record

        self.record.update(fields)
        write_record(self.path, self.record)

    def say(self, message: str) -> None:
        print(time.strftime("%Y-%m-%dT%H:%M:%S"), message, flush=True)

    def request_stop(self, *_: Any) -> None:
        self.stop_requested = True

    # -- processes -------------------------------------------------------------------------------

    def start_frontend(self) -> None:
        from trtspec import subproc
        from trtspec.serve.dynamo.launcher import frontend_command

        frontend = self.record["frontend"]
        frontend["pid"] = subproc.start(frontend_command(self.spec), log_path=frontend["log"], env=self.record["env"])
        self.update(frontend=frontend)
        self.say(f"frontend started (pid {frontend['pid']})")

    def start_worker(self, worker: dict[str, Any]) -> None:
        from trtspec import subproc
        from trtspec.serve.dynamo.launcher import worker_command

        env = {**self.record["env"], "DYN_SYSTEM_PORT": str(worker["system_port"])}
        worker["pid"] = subproc.start(worker_command(self.spec, Path(self.record["engine"])), log_path=worker["log"],
                                      env=env)
        worker["started"] = time.time()
        self.update(workers=self.record["workers"])
        self.say(f"worker {worker['index']} started (pid {worker['pid']}, metrics port {worker['system_port']})")

    def registered(self) -> int:
        """Workers the frontend lists, once it serves the model (it adds the model to /v1/models a
        moment after the first worker registers: a request before then is answered 404)."""
        from trtspec.serve.dynamo.launcher import _get_json

        base = f"http://{self.record['host']}:{self.record['openai_port']}"
        models = _get_json(f"{base}/v1/models") or {}
        if self.spec.model_name not in {m.get("id") for m in models.get("data", [])}:
            return 0
        health = _get_json(f"{base}/health")
        return len([i for i in (health or {}).get("instances", []) if i.get("endpoint") == "generate"])

    # -- the loop --------------------------------------------------------------------------------

    def run(self) -> int:
        from trtspec import subproc

        self.update(supervisor_pid=os.getpid())
        self.start_frontend()
        for worker in self.record["workers"]:
            self.start_worker(worker)
        deadline = time.monotonic() + self.spec.serve.startup_timeout_s * 2
        while self.registered() < len(self.record["workers"]):
            if self.stop_requested:
                return self.end()
            why = self._dead_process()
            if why or time.monotonic() > deadline:
                self.update(state="dead", reason=why or f"workers not registered within "
                            f"{self.spec.serve.startup_timeout_s * 2:.0f} s (2 x serve.startup_timeout_s)")
                return self.end(1)
            time.sleep(0.25)
        self.update(state="ready", ready_at=time.time())
        self.say("ready: every worker registered")
        while not self.stop_requested:
            frontend = self.record["frontend"]
            if not subproc.is_running(frontend["pid"]) and not self.restart("frontend", self.start_frontend):
                return self.end(1)
            for worker in self.record["workers"]:
                if not subproc.is_running(worker["pid"]):
                    subproc.kill(worker["pid"], timeout=1.0)  # reap it, and end what its group left
                    worker["restarts"] = worker.get("restarts", 0) + 1
                    worker["last_failure"] = time.time()
                    if not self.restart(f"worker {worker['index']}", lambda w=worker: self.start_worker(w)):
                        return self.end(1)
            time.sleep(WATCH_INTERVAL_S)
        return self.end()

    def _dead_process(self) -> str | None:
        from trtspec import subproc

        if not subproc.is_running(self.record["frontend"]["pid"]):
            return f"the frontend exited during startup; see {self.record['frontend']['log']}"
        for worker in self.record["workers"]:
            if not subproc.is_running(worker["pid"]):
                return f"worker {worker['index']} exited during startup; see {worker['log']}"
        return None

    def restart(self, name: str, start: Any) -> bool:
        """Start `name` again unless serve.restart is never or it failed too often; False: stack dead."""
        now = time.time()
        failures = [t for t in self.failures.get(name, []) if now - t < RESTART_WINDOW_S] + [now]
        self.failures[name] = failures
        if self.spec.serve.restart == "never" or len(failures) > MAX_RESTARTS:
            why = "serve.restart is never" if self.spec.serve.restart == "never" else \
                f"{len(failures)} failures within {RESTART_WINDOW_S:.0f} s"
            self.update(state="dead", reason=f"{name} exited ({why})")
            return False
        self.say(f"{name} exited; starting it again")
        start()
        return True

    def end(self, code: int = 0) -> int:
        from trtspec import subproc

        for worker in self.record["workers"]:
            if worker.get("pid"):
                subproc.stop(worker["pid"], timeout=5.0)  # one still loading its engine ignores SIGTERM until loaded
        if self.record["frontend"].get("pid"):
            subproc.stop(self.record["frontend"]["pid"], timeout=15.0)
        if code == 0:
            self.path.unlink(missing_ok=True)
        self.say("stopped")
        return code


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    supervisor = StackSupervisor(Path(args[0]))
    signal.signal(signal.SIGTERM, supervisor.request_stop)
    signal.signal(signal.SIGINT, supervisor.request_stop)
    signal.signal(signal.SIGHUP, signal.SIG_IGN)
    return supervisor.run()


if __name__ == "__main__":
    sys.exit(main())
