"""The engine loop's thread count beside other processes (trtspec.runtime.cores.contention).

The governor's rule on hand-made step timings; switching the count mid-generation leaves every
token as it was; and with real busy processes on the engine's own two cores, the engine steps on one
thread while they run, on two again after, and decodes the same tokens throughout.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest
import torch

from trtspec.runtime.cores.contention import FIRST_BACKOFF_S, RETRY_COST_RATIO, WINDOW_S, LoopThreads, ThreadGovernor
from trtspec.runtime.cores.run_queue import RunQueueClock


def _window(governor: ThreadGovernor, share: float, now: float) -> int | None:
    """One window of steps at `share` of the governor's current threads' cores."""
    return governor.decide(WINDOW_S, share * WINDOW_S * governor.threads, now)


def test_a_low_share_steps_down_and_a_retry_that_holds_steps_back_up():
    governor = ThreadGovernor(2)
    assert _window(governor, 0.84, now=0.0) is None          # alone: 0.97-0.99, through Triton down to 0.84
    assert _window(governor, 0.55, now=1.0) == 1             # beside a 2-thread OpenMP loop
    assert (governor.threads, governor.fallbacks) == (1, 1)
    assert _window(governor, 1.0, now=1.0 + FIRST_BACKOFF_S / 2) is None   # waits out its back-off
    assert _window(governor, 1.0, now=1.0 + FIRST_BACKOFF_S) == 2          # then tries the full count
    assert _window(governor, 0.98, now=1.5 + FIRST_BACKOFF_S) is None      # and keeps it
    assert (governor.threads, governor.fallbacks, governor.recoveries) == (2, 1, 1)
    assert governor.backoff_s == FIRST_BACKOFF_S


def test_a_failed_retry_waits_longer_and_is_not_a_new_fallback():
    governor = ThreadGovernor(2)
    assert _window(governor, 0.5, now=0.0) == 1
    assert _window(governor, 1.0, now=FIRST_BACKOFF_S) == 2                # retry
    # the retry's window is one stalled step of 1.2 s: the next retry waits at least 10x that
    assert governor.decide(1.2, 0.5 * 1.2 * 2, FIRST_BACKOFF_S + 1.2) == 1
    assert governor.backoff_s == pytest.approx(RETRY_COST_RATIO * 1.2)
    assert (governor.fallbacks, governor.recoveries) == (1, 0)
    assert _window(governor, 1.0, now=FIRST_BACKOFF_S + 1.2 + 11.0) is None
    assert _window(governor, 1.0, now=FIRST_BACKOFF_S + 1.2 + 12.0) == 2


def test_many_threads_step_down_to_the_cores_they_get_and_one_thread_never_changes():
    governor = ThreadGovernor(16)
    assert _window(governor, 0.5, now=0.0) == 8
    assert _window(governor, 0.5, now=0.1) == 4               # still contended at 8: fewer again
    alone = ThreadGovernor(1)
    assert not alone.enabled and _window(alone, 0.1, now=0.0) is None
    off = ThreadGovernor(2, enabled=False)
    assert _window(off, 0.1, now=0.0) is None and off.threads == 2


def test_a_window_needs_enough_step_time():
    governor = ThreadGovernor(2)
    assert governor.decide(WINDOW_S / 4, 0.0, 0.0) is None       # a quarter window at share 0: not yet
    assert governor.decide(WINDOW_S, 1.5 * WINDOW_S, 0.1) == 1   # the window: 1.5 / (1.25 x 2) = 0.6


class _EveryStep(ThreadGovernor):
    """Switches between 2 threads and 1 after every step (a test of the tokens, not of the rule)."""

    def decide(self, wall: float, cpu: float, now: float) -> int | None:
        self.threads = 3 - self.threads
        return self.threads


def test_switching_the_thread_count_every_step_changes_no_token(tiny_llama):
    from trtspec.runtime import Engine

    before = torch.get_num_threads()
    torch.set_num_threads(2)
    try:
        with Engine.from_checkpoints(tiny_llama, mode="ngram", max_draft_len=4, ngram_min=1, ngram_max=3,
                                     adapt_threads=False) as fixed, \
                fixed.variant(adapt_threads=True) as switching:
            loop = LoopThreads(switching)
            loop.allowed = True
            loop.governor = _EveryStep(2)
            switching.scheduler._threads = loop
            for prompt in ([5, 6, 7, 8, 5, 6, 7, 8, 5, 6], list(range(10, 60))):
                for speculative in (False, True):
                    expected = fixed.generate(prompt, max_new_tokens=40, speculative=speculative).token_ids
                    got = switching.generate(prompt, max_new_tokens=40, speculative=speculative).token_ids
                    assert got == expected, (prompt, speculative)
            assert torch.get_num_threads() == 2  # the loop leaves the process's count as it found it
    finally:
        torch.set_num_threads(before)


CHILD = """
import json, os, subprocess, sys, time
import torch
torch.set_num_threads(2)
from trtspec.runtime.engine import Engine

engine = Engine.from_checkpoints(sys.argv[1], mode="none")
prompt = list(range(10, 40))

def run():
    return engine.generate(prompt, max_new_tokens=48).token_ids

def stats():
    return engine.scheduler.snapshot()

alone = run()
# two busy processes on the same two cores (children inherit this process's affinity)
hogs = [subprocess.Popen([sys.executable, "-c", "while True: pass"]) for _ in range(2)]
contended, deadline = [], time.monotonic() + 60
while (stats().engine_thread_fallbacks == 0 and engine.scheduler._threads.contended_windows == 0
       and time.monotonic() < deadline):
    contended.append(run())
contended.append(run())
threads_beside_them = stats().engine_threads
for hog in hogs:
    hog.kill()
    hog.wait()
def busy_and_own():  # (jiffies the engine's cores were busy, this process's own CPU jiffies)
    cpus = {f"cpu{c}" for c in os.sched_getaffinity(0)}
    fields = [line.split() for line in open("/proc/stat") if line.split()[0] in cpus]
    busy = sum(sum(map(int, f[1:])) - int(f[4]) - int(f[5]) for f in fields)
    own = os.times()
    return busy, (own.user + own.system) * os.sysconf("SC_CLK_TCK")

busy_before, own_before = busy_and_own()
wall_before = time.monotonic()
after, deadline = [], time.monotonic() + 60
while stats().engine_threads != 2 and time.monotonic() < deadline:
    after.append(run())
held = time.monotonic() + 1.5  # windows enough at 2 threads for the retry to be judged
while time.monotonic() < held:
    after.append(run())
busy_after, own_after = busy_and_own()
core_jiffies = (time.monotonic() - wall_before) * os.sysconf("SC_CLK_TCK") * len(os.sched_getaffinity(0))
others_busy = max(0.0, (busy_after - busy_before) - (own_after - own_before)) / core_jiffies
print(json.dumps(dict(alone=alone, contended=contended, after=after, threads_beside_them=threads_beside_them,
                      others_busy=others_busy,
                      threads_after=stats().engine_threads, fallbacks=stats().engine_thread_fallbacks,
                      fewer=stats().engine_steps_on_fewer_threads,
                      contended_windows=engine.scheduler._threads.contended_windows,
                      torch_threads=torch.get_num_threads())))
"""


def _beside_busy_processes(tiny_llama, linear: str) -> tuple[dict, str]:
    """CHILD's result and stderr with the target's linear layers on `linear` only."""
    cpus = sorted(os.sched_getaffinity(0))[:2]
    if len(cpus) < 2:
        pytest.skip("needs two cores: contention is two busy processes on the engine's two")
    if not RunQueueClock.available():
        pytest.skip("this kernel keeps no run-queue delay (/proc/thread-self/schedstat): the loop cannot see contention")
    run = subprocess.run([sys.executable, "-c", CHILD, str(tiny_llama)], capture_output=True, text=True,
                         timeout=300, env={**os.environ, "OMP_NUM_THREADS": "2", "TRTSPEC_CPU_LINEAR": linear},
                         preexec_fn=lambda: os.sched_setaffinity(0, cpus))
    assert run.returncode == 0, run.stderr[-2000:]
    return json.loads(run.stdout.strip().splitlines()[-1]), run.stderr


@pytest.mark.slow
def test_busy_processes_on_the_engines_cores_make_it_step_on_one_thread_until_they_leave(tiny_llama):
    from trtspec.runtime.kernels import native

    if why := native.unavailable():
        pytest.skip(f"the row kernel (the thread-invariant linear layers the loop needs to step down) cannot run: {why}")
    result, stderr = _beside_busy_processes(tiny_llama, "rowdot")
    assert result["fallbacks"] >= 1 and result["threads_beside_them"] == 1 and result["fewer"] > 0, result
    if result["threads_after"] != 2 and result["others_busy"] > 0.25:
        pytest.skip(f"other processes kept {result['others_busy']:.0%} of the engine's cores busy after the test's own "
                    "left: the engine rightly stayed on one thread (run it on a machine without other work)")
    assert result["threads_after"] == 2 and result["torch_threads"] == 2, result
    assert all(tokens == result["alone"] for tokens in result["contended"] + result["after"])
    assert "stepping on 1 until they are free" in stderr
    assert "cores are free again: stepping on 2 threads" in stderr


@pytest.mark.slow
def test_where_the_numbers_depend_on_the_thread_count_it_stays_and_says_why_once(tiny_llama):
    # MKL's sums may split by thread, so the loop keeps 2 threads beside the busy processes and says
    # so once, instead of at every load
    result, stderr = _beside_busy_processes(tiny_llama, "mkl")
    assert result["fallbacks"] == 0 and result["threads_beside_them"] == 2 and result["fewer"] == 0, result
    assert result["contended_windows"] >= 1, result
    assert all(tokens == result["alone"] for tokens in result["contended"] + result["after"])
    assert stderr.count("its thread count stays 2 because linear layers run on mkl") == 1, stderr
