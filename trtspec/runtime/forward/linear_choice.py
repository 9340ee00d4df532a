"""Which matrix kernel runs a linear layer on this CPU: oneDNN on prepacked weights, the row kernel
(trtspec.runtime.kernels.rowdot) or MKL's F.linear.

Why (docs/BENCHMARKS-log.md, "A 16-core Xeon" and "Linear kernels chosen at load"): the faster kernel
depends on the CPU. On a 2-core AVX2 AMD EPYC, oneDNN's prepacked calls beat MKL at 8 rows for
every SmolLM2 layer but the small k/v projections (MKL repacks the weight on every multi-row call)
and MKL's rows round alike at no row count at 2 threads. On a 16-core Xeon (AVX-512, AMX), SmolLM2's decode
forward at 16 threads took 38 ms with every linear layer on oneDNN and 18.8 ms on F.linear: at the
default thread count the engine decoded a lone request at 0.70x HF transformers' speed.

The row kernel, where it can be built (x86-64 with AVX2 and FMA, a C++ compiler), ran SmolLM2's
linear layers in sequence on the AVX2 EPYC in 0.61-0.71 of oneDNN's time at one row and 0.59-0.64
at 8 rows, 0.98-1.12 at 64 and 1.23-1.30 at 256 (docs/BENCHMARKS-log.md, "A row kernel"); on packed
weights, on a 2-core AVX-512 EPYC, 0.61 at one row, 0.68 at 8, 0.80 at 16, 0.96 at 64 and 1.23 at
256 ("Packed weights"): it is the default where it builds, since decode rows are most of a served step.

A kernel is a candidate for a layer only where its rows round alike (the batch-invariance probe,
trtspec.runtime.forward.gemm_rows.fewest_rows_alike, at one thread and at the current count): a lone row
padded to that many rows then gets exactly what it gets among any other rows. Among candidates,
another kernel replaces oneDNN (or the kernel that replaced it) only when its padded calls (1 row
and 8 rows, as a lone decode step and a batch or verify pass take them) cost at most
SWITCH_AT_MOST of the incumbent's.

Each kernel rounds its own way, so a choice that timing noise flips between two starts of a server
would change its outputs from one start to the next (measured: SmolLM2's k/v projections at one
thread on the AVX2 EPYC, MKL at 0.7-0.9 of oneDNN's time, went either way in three loads). So the
first timings made on a machine are kept, as TensorRT keeps a timing cache: in
$TRTSPEC_CACHE/linear-timings.json (trtspec.artifacts), keyed by CPU model, torch version, thread
count, layer shape, kernel, rows and how it was timed (the fastest of 5 batches: other processes
only add time); every later load there reads them and chooses the same. Before a challenger
replaces the incumbent, both are timed again, one after the other, in CONFIRM_ROUNDS rounds
(recorded too, the order alternating), and the challenger must win by the margin in the median
round: a slow spell of the machine then slows both kernels of a round, not only one. Twice such
timings handed the row kernel's layers to oneDNN for good (this file's first timings decide every
later load): one noisy timing (1.5x) moved SmolLM2's MLP layers at one thread (one-thread decoding
0.7x); later, with the incumbent timed a second time and the faster timing counting, both of the
row kernel's timings read ~1.8x their usual (gate and up: 66 and 153 us at 1 and 8 rows against
oneDNN's 44 and 86; the next load 48 and 111 against 66 and 101; why was not found) and moved q, o,
gate, up and down on a 2-core AVX-512 EPYC: a decode forward took 43 ms instead of 24
(docs/BENCHMARKS-log.md, "A slow spell in the linear kernels' first timings").
Deleting the file makes the next load measure again. Where the cache cannot be written, each
process measures for itself.

What is timed: the caller's `timed` calls, which prepack makes run a kernel on random weights of
the layer's shape in turn, 64 MB of them (trtspec.runtime.forward.prepack._in_turn): a forward meets each
layer's weight after all the others', out of the caches, and a layer timed again and again on
one weight in the caches measures another contest (oneDNN over the row kernel 1.17-1.82 per
SmolLM2 shape that way, 1.44-1.86 in turn, a whole forward ~2x).

Contract: `choose(calls, in_features, shape, timed)` returns (kernel name, the fewest rows per call at
which its rows round alike, None when no kernel has one); it only calls the given functions on
random inputs, times them and records the times in the cache file. A model's 30 layers of one
shape are timed once.
"""

from __future__ import annotations

import json
import os
import platform
import statistics
import tempfile
import time
from collections.abc import Callable
from functools import cache
from typing import Any

ONEDNN, ROWDOT, MKL = "onednn", "rowdot", "mkl"
KERNELS = (ROWDOT, ONEDNN, MKL)  # the default first (the first available here), then each challenger in turn
# the row kernel on bfloat16 weights and inputs (rowdot_bf16.cpp): the cpu engine's model.dtype
# bfloat16, never a challenger to the float32 kernels (it computes other numbers)
ROWDOT_BF16 = "rowdot-bf16"
ROW_KERNELS = (ROWDOT, ROWDOT_BF16)
SWITCH_AT_MOST = 0.8  # a challenger's time over the incumbent's for the challenger to be chosen
CONFIRM_ROUNDS = 3  # rounds of both kernels timed again before a challenger replaces the incumbent
ROW_COUNTS = (1, 2, 4, 8)  # rows per call a kernel may need before its rows round alike; 8: a verify pass
TIMED_ROWS = (1, 8)  # a lone decode step, a batch of 8
BATCHES = 5  # batches of calls a timing takes the fastest of
TIMING = "fastest of 5 in turn"  # in every timing's key: timings made another way are not mixed with these
_SECONDS: dict[str, float] = {}  # this process's view of the file: key -> seconds a call


def fewest_rows(call: Callable[[Any], Any], in_features: int) -> int | None:
    """The fewest rows per call (ROW_COUNTS) at which every row rounds as in a 128-row call (counts
    r to 4 r, and 100: a prompt chunk, where a kernel may split its work another way), at one
    thread and at the current thread count: the larger answer; None when some count has none.
    `call(rows)`: the layer's output for [rows, in_features] inputs."""
    import torch

    from trtspec.runtime.forward.gemm_rows import fewest_rows_alike

    rows = torch.randn(128, in_features, generator=torch.Generator().manual_seed(0))
    threads = torch.get_num_threads()
    answers = []
    try:
        for count in sorted({1, threads}):
            torch.set_num_threads(count)
            answers.append(fewest_rows_alike(lambda n: call(rows[:n]), ROW_COUNTS, 128, also=(100,)))
    finally:
        torch.set_num_threads(threads)
    return None if None in answers else max(answers)


def seconds_per_call(call: Callable[[Any], Any], rows: int, in_features: int) -> float:
    """Seconds of one call on `rows` random rows: the fastest of BATCHES batches of calls (2 ms a
    batch or 1 call). The fastest, not the median: other processes only ever add time."""
    import torch

    x = torch.randn(rows, in_features, generator=torch.Generator().manual_seed(1))
    start = time.perf_counter()
    call(x)  # warm-up, and the first estimate of a call's time
    repeats = max(1, min(50, int(2e-3 / max(time.perf_counter() - start, 1e-7))))
    batches = []
    for _ in range(BATCHES):
        start = time.perf_counter()
        for _ in range(repeats):
            call(x)
        batches.append((time.perf_counter() - start) / repeats)
    return min(batches)


def choose(calls: dict[str, Callable[[Any], Any]], in_features: int, shape: tuple,
           timed: dict[str, Callable[[Any], Any]] | None = None) -> tuple[str, int | None]:
    """(kernel, fewest rows per call at which its rows round alike) for one layer. `calls`: kernel
    name -> call, the first the default; `shape`: what the timings are keyed on besides machine,
    thread count and rows (in, out, bias or not); `timed`: kernel name -> the call to time (default
    `calls`; the caller's copies of the shape in turn, module docstring).
    Another kernel is probed only when even its unpadded calls are clearly faster (the probe of a
    wide layer costs more than its timing). When no kernel's rows round alike: (the first, None)."""
    import torch

    def seconds(key: str, name: str, rows: int) -> float:
        if key not in _SECONDS:
            _SECONDS.update(_recorded())
        if key not in _SECONDS:
            _record(key, seconds_per_call((timed or calls)[name], rows, in_features))
        return _SECONDS[key]

    def cost(name: str, fewest: int, tag: str = "") -> float:
        """Seconds of a 1-row and an 8-row call (padded to `fewest`), as recorded or timed now; `tag`
        names a confirming round's timings."""
        total = 0.0
        for wanted in TIMED_ROWS:
            padded = max(wanted, fewest)
            key = (f"{_machine()} | {torch.get_num_threads()} threads | {shape} | {_version(name)} | {padded} rows"
                   f" | {TIMING}{tag}")
            total += seconds(key, name, padded)
        return total

    def wins(name: str, rows: int) -> bool:
        """`name` (padded to `rows`) clearly beats the incumbent, in its first timing and in the
        median of CONFIRM_ROUNDS rounds that time both again, one after the other (module docstring)."""
        if fewest is None:
            return True
        if cost(name, rows) > SWITCH_AT_MOST * cost(best, fewest):
            return False
        ratios = []
        for round_ in range(1, CONFIRM_ROUNDS + 1):
            tag = f" | round {round_}"
            order = [(best, fewest), (name, rows)] if round_ % 2 else [(name, rows), (best, fewest)]
            seconds_of = {kernel: cost(kernel, padded, tag) for kernel, padded in order}
            ratios.append(seconds_of[name] / seconds_of[best])
        return statistics.median(ratios) <= SWITCH_AT_MOST

    names = list(calls)
    best = names[0]
    fewest = fewest_rows(calls[best], in_features)
    for name in names[1:]:
        if fewest is not None and cost(name, 1) > SWITCH_AT_MOST * cost(best, fewest):
            continue
        rows = fewest_rows(calls[name], in_features)
        if rows is not None and wins(name, rows):
            best, fewest = name, rows
    return best, fewest


def _version(kernel: str) -> str:
    """The kernel's name in a timing's key; the row kernel's with its build (a changed source is timed anew)."""
    if kernel not in ROW_KERNELS:
        return kernel
    from trtspec.runtime.kernels import native

    return f"{kernel} {native.digest()}"


@cache
def _machine() -> str:
    """What a timing is valid for: the CPU model and the torch build."""
    import torch

    try:
        with open("/proc/cpuinfo") as info:
            cpu = next((line.split(":", 1)[1].strip() for line in info if line.startswith("model name")), "")
    except OSError:
        cpu = ""
    return f"{cpu or platform.processor() or platform.machine()} | torch {torch.__version__}"


def _recorded() -> dict[str, float]:
    from trtspec.artifacts import linear_timings_file

    try:
        return json.loads(linear_timings_file().read_text())
    except (OSError, ValueError):
        return {}


def _record(key: str, seconds: float) -> None:
    """Keep `seconds` for `key` in this process and, unless another process recorded it first, in
    the cache file (re-read and merged: the first timing on a machine is the one every load uses)."""
    from trtspec.artifacts import linear_timings_file

    recorded = _recorded()
    _SECONDS[key] = recorded.setdefault(key, seconds)
    path = linear_timings_file()
    partial = None
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        with tempfile.NamedTemporaryFile("w", dir=path.parent, prefix=".linear-timings-", delete=False) as out:
            partial = out.name
            json.dump(recorded, out, indent=0, sort_keys=True)
        os.replace(partial, path)  # readers see the old file or the new one, never half of one
    except OSError:  # a read-only cache: this process keeps its own timings
        if partial is not None and os.path.exists(partial):
            os.unlink(partial)
