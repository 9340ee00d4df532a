"""OpenMP threads that sleep instead of spinning when they wait, set before torch loads OpenMP.

Why (measured on the shared 2-core machine, load average 4-5, SmolLM2 one engine step, 2 torch
threads; docs/BENCHMARKS.md "Threads"): with OpenMP's default wait policy the threads spin
against each other and against the other processes on the cores, and a step of 8 sequences took
3.9 s instead of 0.18 s with OMP_WAIT_POLICY=PASSIVE (1.7 s instead of 0.17 s for one sequence).
The engine runs one loop whose torch ops use several threads, so a server or benchmark process sets
the passive policy for itself before importing torch. A user's own OMP_WAIT_POLICY is kept.
"""

from __future__ import annotations

import os
import sys


def prefer_passive_openmp() -> bool:
    """Set OMP_WAIT_POLICY=PASSIVE for this process unless it is set already; True when it took
    effect (torch, which reads it once when it loads OpenMP, was not imported yet)."""
    if "torch" in sys.modules:
        return os.environ.get("OMP_WAIT_POLICY", "").upper() == "PASSIVE"
    os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")
    return os.environ["OMP_WAIT_POLICY"].upper() == "PASSIVE"
