"""One OpenMP team per process: the thread that built the engine ends its own (runtime/cores/threads.py).

Two live teams on few cores made 2 torch threads decode slower than 1 (docs/BENCHMARKS-log.md
"Threads"). Counted with the process's own threads, in a fresh process with 2 torch threads: a
parallel region in the main thread adds a pool thread; releasing ends it; building an engine leaves
no team behind in the loading thread.
"""

from __future__ import annotations

import json
import subprocess
import sys

CHILD = """
import json, os, sys, time
import torch
torch.set_num_threads(2)
from trtspec.runtime.cores.threads import release_idle_openmp_team

def threads():
    # a released team's threads exit asynchronously: read the count once it has held for 0.2 s
    last, since, deadline = None, time.monotonic(), time.monotonic() + 3
    while time.monotonic() < deadline:
        now = len(os.listdir("/proc/self/task"))
        if now != last:
            last, since = now, time.monotonic()
        elif time.monotonic() - since > 0.2:
            break
        time.sleep(0.02)
    return last

start = threads()
torch.randn(256, 256) @ torch.randn(256, 256)       # a parallel region: this thread's team appears
with_team = threads()
released = release_idle_openmp_team()
after_release = threads()
torch.randn(256, 256) @ torch.randn(256, 256)
again = threads()
from trtspec.runtime.engine import Engine
engine = Engine.from_checkpoints(sys.argv[1], mode="none")
after_engine = threads()
release_idle_openmp_team()
after_engine_released = threads()
result = engine.generate("Hello", max_new_tokens=4, speculative=False)
print(json.dumps(dict(start=start, with_team=with_team, released=released, after_release=after_release,
                      again=again, after_engine=after_engine,
                      after_engine_released=after_engine_released, tokens=len(result.token_ids))))
"""


def test_the_loading_thread_ends_its_openmp_team(tiny_llama):
    run = subprocess.run([sys.executable, "-c", CHILD, str(tiny_llama)], capture_output=True, text=True,
                         timeout=300, env={"PATH": "/usr/bin:/bin", "OMP_NUM_THREADS": "2"})
    assert run.returncode == 0, run.stderr[-2000:]
    counts = json.loads(run.stdout.strip().splitlines()[-1])
    assert counts["released"] is True
    assert counts["with_team"] == counts["start"] + 1            # the main thread's team: one more thread
    assert counts["after_release"] == counts["start"]            # ended
    assert counts["again"] == counts["with_team"]                # a new region makes a new team ...
    # ... and building the engine ends it: a second release finds no team left in this thread
    # (the tokenizer's own worker threads stay; they are not OpenMP's)
    assert counts["after_engine_released"] == counts["after_engine"]
    assert counts["tokens"] == 4


def test_admission_torch_work_runs_in_the_loop_thread_not_the_callers(draft_engine, monkeypatch):
    """Zeroing an admitted request's KV blocks and opening its draft session are torch work: done
    in the caller's thread (as submit once did), they gave that thread an OpenMP team of its own, and
    2 threads decoded no faster than 1 through Engine.generate (docs/BENCHMARKS-log.md "Threads")."""
    import threading

    scheduler = draft_engine.scheduler
    seen: list[tuple[str, str]] = []

    def recorded(name, call):
        def wrapper(*args, **kwargs):
            seen.append((name, threading.current_thread().name))
            return call(*args, **kwargs)
        return wrapper

    for pool in (scheduler.pool, scheduler.draft_pool):
        monkeypatch.setattr(pool, "zero_blocks", recorded("zero_blocks", pool.zero_blocks))
    monkeypatch.setattr(draft_engine.drafter, "session", recorded("session", draft_engine.drafter.session))
    result = draft_engine.generate("Hello there", max_new_tokens=4, speculative=True)
    assert len(result.token_ids) >= 1
    assert {name for name, _ in seen} == {"zero_blocks", "session"}
    assert {thread for _, thread in seen} == {"trtspec-engine"}, seen
