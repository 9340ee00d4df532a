"""One OpenMP team per process doing torch work: the engine loop's, not the loading thread's too.

Why (measured on 2 cores, SmolLM2 float32, plain greedy decoding; docs/BENCHMARKS-log.md "Threads"):
the engine's steps run in its loop thread, but the model is loaded, prepacked and probed in the
caller's thread, and GNU OpenMP keeps a thread team per thread that ever ran a parallel region.
With two teams alive on 2 cores, libgomp sees more threads than cores and stops spinning between
parallel regions (every one of the ~2,000 small regions of a step then waits for a futex wake-up);
with OMP_WAIT_POLICY=ACTIVE the idle team spins and takes a core from the working one. Either way
2 threads decoded slower than 1 (0.95x at batch 1, 0.77x at batch 8). Ending the loading
thread's idle team once the engine is built leaves one team: 2 threads then give 1.3-1.5x.
The same holds for every thread that sends requests: the scheduler does a request's torch work
(zeroing its KV blocks, opening its draft session) in the loop thread, never in the caller's.

`release_idle_openmp_team()` ends the calling thread's team (libgomp's omp_pause_resource_all,
OpenMP 5.0); it does nothing where torch does not run on libgomp. A later parallel region in that
thread makes a new team, so call it after the thread's torch work. OMP_WAIT_POLICY and
OMP_NUM_THREADS stay the user's: trtspec sets neither.
"""

from __future__ import annotations

import ctypes
from functools import cache

OMP_PAUSE_SOFT = 1  # omp_pause_resource_t: free the threads, keep the settings


@cache
def _libgomp():
    """torch's own libgomp, found among this process's mapped libraries; None elsewhere."""
    try:
        with open("/proc/self/maps") as maps:
            paths = {line.split()[-1] for line in maps if "libgomp" in line and line.rstrip().endswith(".so.1")}
    except OSError:
        return None
    for path in sorted(paths):
        library = ctypes.CDLL(path)
        if hasattr(library, "omp_pause_resource_all"):
            return library
    return None


def release_idle_openmp_team() -> bool:
    """End the calling thread's idle OpenMP team; True when libgomp did (it answers 0)."""
    import torch  # noqa: F401  (libgomp is mapped once torch is)

    library = _libgomp()
    return library is not None and library.omp_pause_resource_all(OMP_PAUSE_SOFT) == 0
