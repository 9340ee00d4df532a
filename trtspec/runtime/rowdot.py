"""The row kernel (rowdot.cpp): a batch-invariant linear layer for AVX2 + FMA CPUs, compiled once
per machine and loaded with ctypes.

Why: on a 2-core AVX2 AMD EPYC it ran SmolLM2's linear layers in sequence in 0.61-0.71 of oneDNN's
time at one row and 0.59-0.64 at 8 rows (slower from about 64 rows: 1.23-1.30x at 256;
docs/BENCHMARKS.md, "A row kernel"), and every row of a call rounds as it would alone, at any
thread count, by construction. trtspec.runtime.linear_choice makes it the default kernel where
it builds; oneDNN or MKL take a layer from it only where they measure clearly faster.

Built with the system's g++ (or $CXX) into $TRTSPEC_CACHE/kernels/rowdot-<hash>.so, the hash
covering the source and the flags: about a second, on the first load on a machine; written to
a temporary name and renamed, so a concurrent or interrupted build never leaves half a library.
No torch headers: the library takes plain pointers, and its OpenMP is the libgomp.so.1 torch
already loaded (one thread pool). Where it cannot be built or run (not x86-64, no AVX2 or FMA, no
compiler, a failed build) `library()` returns None, `unavailable()` says why, and the engine
uses the other kernels.

Contract: `linear(x, weight, bias)` equals `F.linear` up to float32 rounding for float32 CPU
tensors whose weight is contiguous; inference only (no gradient).
"""

from __future__ import annotations

import ctypes
import hashlib
import os
import platform
import tempfile
from functools import cache
from pathlib import Path
from typing import Any

SOURCE = Path(__file__).with_name("rowdot.cpp")
# -ffp-contract=off: the scalar tail must not become an FMA in some instantiations and not others
FLAGS = ("-O3", "-mavx2", "-mfma", "-ffp-contract=off", "-fopenmp", "-fPIC", "-shared")
_WHY: list[str] = []  # why the library is unavailable, once known


def available() -> bool:
    return library() is not None


def unavailable() -> str | None:
    """Why the row kernel is not used here, or None when it is."""
    library()
    return _WHY[0] if _WHY else None


@cache
def library() -> Any:
    """The loaded library (ctypes), or None where it cannot run here."""
    if platform.machine().lower() not in ("x86_64", "amd64"):
        return _unusable(f"the CPU is {platform.machine()}, not x86-64")
    missing = {"avx2", "fma"} - _cpu_flags()
    if missing:
        return _unusable(f"the CPU lacks {', '.join(sorted(missing))}")
    try:
        path = _built()
        lib = ctypes.CDLL(str(path))
    except (OSError, RuntimeError) as error:
        return _unusable(str(error))
    lib.rowdot_linear.argtypes = [ctypes.c_void_p, ctypes.c_int64, ctypes.c_int64, ctypes.c_void_p, ctypes.c_int64,
                                  ctypes.c_void_p, ctypes.c_void_p, ctypes.c_int]
    lib.rowdot_linear.restype = None
    return lib


def linear(x: Any, weight: Any, bias: Any = None) -> Any:
    """F.linear on the row kernel. # x: [..., in_features]; weight: [out_features, in_features]
    Returns [..., out_features]."""
    import torch

    rows = x.reshape(-1, x.shape[-1])
    if not rows.is_contiguous():
        rows = rows.contiguous()
    out = torch.empty(rows.shape[0], weight.shape[0], dtype=x.dtype)
    library().rowdot_linear(rows.data_ptr(), rows.shape[0], rows.shape[1], weight.data_ptr(), weight.shape[0],
                            None if bias is None else bias.data_ptr(), out.data_ptr(), torch.get_num_threads())
    return out.view(*x.shape[:-1], weight.shape[0])


@cache
def digest() -> str:
    """What a build and its timings are valid for: the source, the compiler and the flags."""
    return hashlib.sha256(SOURCE.read_bytes() + " ".join((_compiler(), *FLAGS)).encode()).hexdigest()[:16]


def _compiler() -> str:
    return os.environ.get("CXX") or "g++"


def _unusable(why: str) -> None:
    _WHY[:] = [why]
    return None


def _cpu_flags() -> set[str]:
    try:
        with open("/proc/cpuinfo") as info:
            line = next((line for line in info if line.startswith("flags")), "")
    except OSError:
        return set()
    return set(line.split(":", 1)[-1].split())


def _built() -> Path:
    """The library for this source and these flags, built into the kernels cache on first use (or
    into a temporary directory where the cache cannot be written)."""
    from trtspec import subproc
    from trtspec.artifacts import kernels_dir
    from trtspec.errors import TrtSpecError

    target = kernels_dir() / f"rowdot-{digest()}.so"
    if target.exists():
        return target
    try:
        target.parent.mkdir(parents=True, exist_ok=True)
        folder = str(target.parent)
    except OSError:
        folder, target = tempfile.mkdtemp(prefix="trtspec-kernels-"), None
    handle, partial = tempfile.mkstemp(suffix=".so", prefix=".rowdot-", dir=folder)
    os.close(handle)
    try:
        subproc.run([_compiler(), *FLAGS, str(SOURCE), "-o", partial], timeout=120)
        if target is None:
            return Path(partial)
        os.replace(partial, target)  # loaders see no library or a whole one
    except TrtSpecError as error:
        raise RuntimeError(f"building {SOURCE.name} failed: {error.problem.splitlines()[0]}") from None
    finally:
        if target is not None and os.path.exists(partial):
            os.unlink(partial)
    return target
