"""How long the engine's threads waited for a core: run-queue delay from /proc/self/task/*/schedstat.

Why: the engine steps on fewer threads while other processes compute on its cores
(trtspec.runtime.cores.contention), so it needs a signal of contention that reads the same on every CPU
and OpenMP runtime. The process's CPU time over wall time x threads did not: on a 2-core Intel Xeon
(AVX-512, AMX) an idle OpenMP thread that spins counts as on a core, and the share a contended
team got could not be told from the share of a team alone. The kernel's own count of the time a
thread spent runnable but not running (the second field of schedstat, in nanoseconds, kept since
Linux 2.6 wherever CONFIG_SCHED_INFO is set, as in every distribution kernel) is that waiting
itself: a spinning thread is on a core and adds nothing; a thread that a busy process pushed off
its core adds every nanosecond it waits.

Whose waits count: the team's, the threads that wanted a core (ran or waited to run) for at
least TEAM_BUSY_SHARE of the step's wall time. A server's other threads (gRPC, the Python stub's
senders) wake for microseconds and may wait for the team itself; counting them would read the
engine's own serving as contention. The share is the team's run time over its run plus wait time,
so it reads the same whether one thread of the team or all of them were found (a first version
counted threads that ran 10 % of the step: with 12 runnable threads on 2 cores none did, and the
share read 1.0 beside two busy processes).

Contract: `RunQueueClock.available()` says whether this kernel keeps the counts; `sample()`
returns {tid: (run_ns, wait_ns)} for this process's threads at the last `refresh()` (threads
that have ended keep their last reading); `team_share(before, after, wall)` is the share of the
time the team wanted a core between two samples that it had one. Reading a thread costs one pread (~2 us); nothing else here.
"""

from __future__ import annotations

import os

TASKS = "/proc/self/task"
TEAM_BUSY_SHARE = 0.1  # of a step's wall time running or runnable: a thread of the team (a stub thread's wake-ups take ~1 %)


class RunQueueClock:
    """This process's threads' run and run-queue-wait times, one open file per thread."""

    def __init__(self) -> None:
        self._files: dict[int, int] = {}                 # tid -> fd of its schedstat
        self._last: dict[int, tuple[int, int]] = {}      # tid -> (run_ns, wait_ns) last read

    @staticmethod
    def available() -> bool:
        try:
            with open("/proc/thread-self/schedstat") as file:
                return len(file.read().split()) >= 2
        except OSError:
            return False

    def refresh(self) -> None:
        """Follow the threads the process has now (OpenMP makes a team per loop thread)."""
        try:
            tids = {int(tid) for tid in os.listdir(TASKS)}
        except OSError:
            tids = set()
        for tid in set(self._files) - tids:
            os.close(self._files.pop(tid))
            self._last.pop(tid, None)
        for tid in tids - set(self._files):
            try:
                self._files[tid] = os.open(f"{TASKS}/{tid}/schedstat", os.O_RDONLY)
            except OSError:
                continue

    def sample(self) -> dict[int, tuple[int, int]]:
        for tid, fd in self._files.items():
            try:
                fields = os.pread(fd, 64, 0).split()
                self._last[tid] = (int(fields[0]), int(fields[1]))
            except (OSError, IndexError, ValueError):
                pass  # the thread ended: its last reading stands
        return dict(self._last)

    def close(self) -> None:
        for fd in self._files.values():
            os.close(fd)
        self._files.clear()
        self._last.clear()


def team_share(before: dict[int, tuple[int, int]], after: dict[int, tuple[int, int]], wall: float) -> float:
    """Of the time the team's threads wanted a core between `before` and `after` (`wall` seconds),
    the share they were on one: their run time over their run plus run-queue time (1.0: no team)."""
    ran = wanted = 0
    for tid, (run, wait) in after.items():
        if tid not in before:
            continue
        busy = (run - before[tid][0]) + (wait - before[tid][1])
        if busy >= TEAM_BUSY_SHARE * wall * 1e9:
            ran += run - before[tid][0]
            wanted += busy
    return ran / wanted if wanted else 1.0
