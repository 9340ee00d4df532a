"""The engine loop's thread count while other processes compute on its cores.

Why (2-core AMD EPYC, SmolLM2 float32; docs/BENCHMARKS-log.md, "Other processes on the engine's
cores"): a step is thousands of OpenMP parallel regions, and at each one the team waits for its
slowest thread. When another process computes on the same cores, one of the team's threads is
often off its core and every region waits for it: through Triton, one busy single-threaded
process beside the server took 2-thread decoding from 45 to 3.4 tokens/s (a 2-thread OpenMP loop
to 2.5), while the same server on one thread lost almost nothing (30.3 -> 29.0 tokens/s).

How it is seen: of the time the team's threads wanted a core during steps, the share they had
one (trtspec.runtime.cores.run_queue: run time over run plus run-queue delay, the kernel's own count).
The process's CPU time over wall time x threads, used before, counts a thread spinning at a
barrier as on a core and mixes in every other thread of the process; the run-queue delay is the
waiting itself. On a 2-core Intel Xeon (AVX-512, AVX512_BF16) under load average ~10, SmolLM2 on
the row kernel, both read alike (medians over 0.5 s windows: CPU share 0.19 / 0.16 / 0.09,
run-queue share 0.20 / 0.17 / 0.09, with the machine's other work alone, beside one and beside
two more busy processes; docs/BENCHMARKS-log.md, "Contention from the run queue"). What failed on
the Intel Xeon before was not the signal: its tiny test model's small layers went to MKL by
timing, which keeps the count (below), so the loop never stepped down.

What it does (ThreadGovernor.decide, after every step): when the share over at least WINDOW_S of
step time falls below LOW_SHARE, the loop steps on floor(share x threads) threads (at least 1,
fewer than before); after a back-off it tries the full count for one window, keeps it when the
share is back, else goes down again and waits longer: twice the back-off, and at least
RETRY_COST_RATIO times the failed window (FIRST_BACKOFF_S up to MAX_BACKOFF_S).

Exactness: a contended moment must not change a token, so the count changes only where the
target computes the same numbers at any thread count. The row kernels and the attention kernel do
by construction (one fixed order per output; tests/runtime/kernels/test_rt_rowdot.py and
test_rt_attention_kernel.py); `why_thread_dependent` checks the loaded target: every linear layer
on a row kernel, and the same logits for a short prompt at the full count and at one thread.
Elsewhere (oneDNN, MKL, torch's attention) the count stays: the loop still measures, and says
once per engine load, when other processes do take its cores, why it cannot step down
(TRTSPEC_CPU_LINEAR=rowdot keeps every linear layer on the row kernel). A drafter's numbers may
change with the count: that changes drafts, never a greedy token, and sampling stays lossless.
"""

from __future__ import annotations

import sys
import time
import weakref
from dataclasses import dataclass, field
from typing import Any

from trtspec.runtime.cores.run_queue import RunQueueClock, team_share

# With the CPU-time share on the 2-core AMD EPYC: 0.97-0.99 alone at 2 threads in process, down
# to 0.84 through Triton, 0.69-0.77 beside one busy process, 0.49-0.60 beside a 2-thread OpenMP
# loop; the run-queue share reads alike wherever both were measured (module docstring)
LOW_SHARE = 0.8
WINDOW_S = 0.5          # of step time per share reading (~20 decode steps of SmolLM2 on 2 cores)
FIRST_BACKOFF_S = 2.0   # before trying the full count again after the first fall
MAX_BACKOFF_S = 60.0
# A failed retry costs about its window (one stalled step: 0.4-1.2 s at 2 threads beside a busy
# process, against 30 ms on one), so the next waits at least this many times as long: <= 10 % lost
RETRY_COST_RATIO = 10
PROBE_TOKENS = 24       # the prompt whose logits must match at the full count and at one thread

_CHECKED: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()  # model -> why_thread_dependent's answer


@dataclass
class ThreadGovernor:
    """The loop's thread count: `full` alone, fewer while other processes take its cores."""

    full: int
    enabled: bool = True          # measure (more than one thread, and a run-queue clock here)
    act: bool = True              # change the count (thread-invariant numbers); else only count low windows
    threads: int = field(init=False)
    fallbacks: int = 0            # times contention was found at the full count (not counting failed retries)
    recoveries: int = 0           # times a retry of the full count held
    last_share: float = 1.0       # the share of the last low window
    low_windows: int = 0          # windows below LOW_SHARE
    backoff_s: float = FIRST_BACKOFF_S
    _retry_at: float | None = None  # time.monotonic() at which to try the full count again; None at full
    _retrying: bool = False
    _wall: float = 0.0
    _got: float = 0.0

    def __post_init__(self) -> None:
        self.threads = self.full
        self.enabled = self.enabled and self.full > 1

    def decide(self, wall: float, got: float, now: float) -> int | None:
        """Account one step (`wall` seconds, `got` core-seconds its team was on a core: wall x threads
        less their run-queue waits, at time.monotonic() `now`); the new thread count when it changes,
        else None."""
        if not self.enabled:
            return None
        self._wall += wall
        self._got += got
        if self._retry_at is not None and now >= self._retry_at:
            self._retry_at, self._retrying = None, True
            return self._become(self.full)
        if self._wall < WINDOW_S:
            return None
        window, share = self._wall, self._got / (self._wall * self.threads)
        self._wall = self._got = 0.0
        if share < LOW_SHARE:
            self.low_windows += 1
            self.last_share = share
        if share >= LOW_SHARE:
            if self._retrying:  # the cores are free again
                self._retrying, self.backoff_s = False, FIRST_BACKOFF_S
                self.recoveries += 1
            return None
        if self.threads == 1 or not self.act:
            return None
        if self._retrying:
            self.backoff_s = min(max(2 * self.backoff_s, RETRY_COST_RATIO * window), MAX_BACKOFF_S)
        elif self.threads == self.full:
            self.fallbacks += 1
        self._retrying = False
        self._retry_at = now + self.backoff_s
        return self._become(max(1, min(self.threads - 1, int(share * self.threads))))

    def _become(self, threads: int) -> int:
        self.threads = threads
        self._wall = self._got = 0.0
        return threads


class LoopThreads:
    """A ThreadGovernor applied around one engine's loop threads: torch's thread count from the
    team's run-queue waits, and a line on stderr when contention starts and ends (or, where the
    count must stay, once per engine load why). The full count is the process's at each loop
    thread's start (a caller may change it between bursts); the loop leaves it as it found it."""

    def __init__(self, engine: Any):
        self.engine = engine
        self.allowed: bool | None = None  # adapt_threads and thread-invariant numbers; known once full > 1
        self.held_because: str | None = None  # why the count stays beside other processes (None: it may change)
        self.governor = ThreadGovernor(1, enabled=False)
        self.fallbacks = 0               # times other processes on the cores made it step on fewer threads
        self.steps_on_fewer_threads = 0  # steps run below the process's count
        self.contended_windows = 0       # windows whose share fell below LOW_SHARE (counted where the count stays too)
        self._clock: RunQueueClock | None = None
        self._said_held = False

    def start(self) -> None:
        """At a loop thread's start (in that thread: the check is torch work)."""
        import torch

        full = torch.get_num_threads()
        if full != self.governor.full:
            measured = full > 1 and bool(self.engine.config.adapt_threads) and RunQueueClock.available()
            self.governor = ThreadGovernor(full, enabled=measured, act=measured and self._allowed(full))
        if self.governor.enabled:
            self._clock = self._clock or RunQueueClock()
            self._clock.refresh()  # this loop thread and the OpenMP team it makes
        if self.governor.threads != full:
            _set_threads(self.governor.threads)

    def stop(self) -> None:
        """At a loop thread's end: the process's count back for anything else in it."""
        if self.governor.threads != self.governor.full:
            _set_threads(self.governor.full)

    def _allowed(self, full: int) -> bool:
        if self.allowed is None:
            self.held_because = why_thread_dependent(self.engine.target, full)
            self.allowed = self.held_because is None
        return self.allowed

    def timed_step(self, step, *args: Any) -> None:
        """Run `step(*args)` and let the governor see its wall time and the team's waits."""
        governor, clock = self.governor, self._clock
        if not governor.enabled or clock is None:
            step(*args)
            return
        if governor.threads < governor.full:
            self.steps_on_fewer_threads += 1
        before, wall = clock.sample(), time.perf_counter()
        try:
            step(*args)
        finally:
            wall = time.perf_counter() - wall
            share = team_share(before, clock.sample(), wall)
            fallbacks, recoveries, low = governor.fallbacks, governor.recoveries, governor.low_windows
            threads = governor.decide(wall, share * wall * governor.threads, time.monotonic())
            if threads is not None:
                _set_threads(threads)
                clock.refresh()  # a smaller or larger team
            self.contended_windows += governor.low_windows - low
            self._say(governor, fallbacks, recoveries)

    def _say(self, governor: ThreadGovernor, fallbacks: int, recoveries: int) -> None:
        if governor.fallbacks > fallbacks:
            self.fallbacks += 1
            print(f"trtspec: the engine got {governor.last_share:.0%} of its {governor.full} threads' cores over "
                  f"its last steps (other processes compute on them): stepping on {governor.threads} until they "
                  f"are free; give the server its own cores (taskset, OMP_NUM_THREADS) for full speed",
                  file=sys.stderr, flush=True)
        elif governor.recoveries > recoveries:
            print(f"trtspec: the engine's cores are free again: stepping on {governor.full} threads",
                  file=sys.stderr, flush=True)
        elif self.contended_windows and not governor.act and not self._said_held:
            self._said_held = True
            print(f"trtspec: other processes compute on the engine's cores (it got {governor.last_share:.0%} of "
                  f"them); its thread count stays {governor.full} because {self.held_because}; give the server "
                  f"its own cores (taskset, OMP_NUM_THREADS), or set TRTSPEC_CPU_LINEAR=rowdot",
                  file=sys.stderr, flush=True)


def why_thread_dependent(model: Any, full: int) -> str | None:
    """None when `model`'s logits cannot depend on the thread count here; else why they might."""
    if model not in _CHECKED:
        try:
            _CHECKED[model] = _why(model, full)
        except Exception as error:  # noqa: BLE001 - the check's failure keeps the count; the engine runs on
            _CHECKED[model] = f"the check failed ({type(error).__name__}: {error})"
    return _CHECKED[model]


def _why(model: Any, full: int) -> str | None:
    import torch

    from trtspec.runtime.forward.attention_kernel import wanted
    from trtspec.runtime.forward.linear_choice import ROW_KERNELS

    if not wanted():
        return "attention runs on torch's products (TRTSPEC_CPU_ATTENTION=torch, or no compiled kernel here)"
    kernels = {getattr(module, "kernel", "torch") for module in model.modules()
               if isinstance(module, torch.nn.Linear) or type(module).__name__ == "PackedLinear"}
    if not kernels <= set(ROW_KERNELS):
        return f"linear layers run on {', '.join(sorted(kernels - set(ROW_KERNELS)))}, whose sums may split by thread"
    if not torch.equal(_probe_logits(model, full), _probe_logits(model, 1)):
        return "a prompt's logits differ at 1 thread and at the full count"
    return None


def _probe_logits(model: Any, threads: int):
    """Logits of every row of a fixed random prompt, computed on `threads` threads."""
    import torch

    from trtspec.runtime.cache.paged import BlockTable, KVPool, SeqKV
    from trtspec.runtime.forward.attention import window_end
    from trtspec.runtime.forward.batch import Feed, forward

    before = torch.get_num_threads()
    torch.set_num_threads(threads)
    try:
        slots = window_end(PROBE_TOKENS)  # attention reads whole windows of keys
        pool = KVPool.for_model(model.config, slots)
        kv = SeqKV(pool, BlockTable([0], slots))
        pool.zero_blocks(kv.table)
        prompt = torch.randint(0, model.config.vocab_size, (PROBE_TOKENS,),
                               generator=torch.Generator().manual_seed(0)).tolist()
        with torch.inference_mode():
            (logits,), _ = forward(model, [Feed(kv, prompt, num_logits=PROBE_TOKENS)])
        return logits  # [PROBE_TOKENS, vocab_size]
    finally:
        torch.set_num_threads(before)


def _set_threads(threads: int) -> None:
    import torch

    torch.set_num_threads(threads)
