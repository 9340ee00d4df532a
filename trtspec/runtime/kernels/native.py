"""The cpu engine's compiled kernels: rowdot.cpp (the linear layers' row kernel),
paged_attend.cpp (attention over the paged KV cache), rope_write.cpp (a layer's new rows
rotated and written into the cache) and llama_layers.cpp (a Llama's decoder layers in one call,
on the other three), one library built once per machine and loaded with ctypes.

Why compiled: all four are batch-invariant by construction (every output one fixed order of
operations, whatever else shares the call) and faster than torch's kernels at decoding's shapes on
an AVX2 CPU (docs/BENCHMARKS-log.md, "A row kernel" and "Attention in one call").

Built with the system's g++ (or $CXX) into $TRTSPEC_CACHE/kernels/cpu-kernels-<hash>.so, the hash
covering the sources, the compiler and the flags: about two seconds, on the first load on a
machine; written to a temporary name and renamed, so a concurrent or interrupted build never
leaves half a library. No torch headers: the functions take plain pointers, and their OpenMP is
the libgomp.so.1 torch already loaded (one thread pool). Where the library cannot be built or run
(not x86-64, no AVX2 or FMA, no compiler, a failed build) `library()` returns None,
`unavailable()` says why, and the engine uses torch's kernels (slower, and as exact under load).
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

SOURCES = tuple(Path(__file__).with_name(name)
                for name in ("rowdot.cpp", "rowdot_bf16.cpp", "paged_attend.cpp", "rope_write.cpp", "llama_layers.cpp"))
HEADERS = (Path(__file__).with_name("rowdot_rows.h"),)  # included by the sources: part of a build's digest
# -ffp-contract=off: a scalar tail must not become an FMA in some instantiations and not others
FLAGS = ("-O3", "-mavx2", "-mfma", "-ffp-contract=off", "-fopenmp", "-fPIC", "-shared")
# where the CPU has them: 32 vector registers for the row kernel's sums (the same 8-lane arithmetic,
# so the same numbers; rowdot.cpp), and no 512-bit vectors in code the compiler vectorizes itself
WIDE_REGISTERS = ("-mavx512f", "-mavx512vl", "-mprefer-vector-width=256")
# where the CPU has it: VDPBF16PS for the bfloat16 row kernel (rowdot_bf16.cpp; without it that
# file builds only rowdot_bf16_available, which answers 0)
BF16_DOT = ("-mavx512bf16",)
_WHY: list[str] = []  # why the library is unavailable, once known

_POINTER, _INT64, _INT, _FLOAT = ctypes.c_void_p, ctypes.c_int64, ctypes.c_int, ctypes.c_float
_SIGNATURES = {  # name: (argument types, result type)
    "rowdot_group": ([], _INT),
    # weight, out_features, in_features, packed
    "rowdot_pack": ([_POINTER, _INT64, _INT64, _POINTER], None),
    # x, rows, in_features, packed weight, out_features, bias, y, threads
    "rowdot_linear": ([_POINTER, _INT64, _INT64, _POINTER, _INT64, _POINTER, _POINTER, _INT], None),
    "rowdot_bf16_available": ([], _INT),
    # as rowdot_pack and rowdot_linear, on bfloat16 weights (present where rowdot_bf16_available says 1)
    "rowdot_bf16_pack": ([_POINTER, _INT64, _INT64, _POINTER], None),
    "rowdot_bf16_linear": ([_POINTER, _INT64, _INT64, _POINTER, _INT64, _POINTER, _POINTER, _INT], None),
    # query, rows, heads, kv_heads, head_dim, keys, key_row, values, slots, base, gather, gather_at,
    # key_counts, bias, bias_at, scaling, out, threads
    "paged_attend": ([_POINTER, _INT64, _INT64, _INT64, _INT64, _POINTER, _INT64, _POINTER, _INT64, _POINTER,
                      _POINTER, _POINTER, _POINTER, _POINTER, _POINTER, _FLOAT, _POINTER, _INT], None),
    # query, query_row, key, key_row_in, value, value_row, rows, heads, kv_heads, head_dim, cos, sin, slots,
    # keys, key_row, values, num_slots, query_out
    "rope_write": ([_POINTER, _INT64, _POINTER, _INT64, _POINTER, _INT64, _INT64, _INT64, _INT64, _INT64, _POINTER,
                    _POINTER, _POINTER, _POINTER, _INT64, _POINTER, _INT64, _POINTER], None),
    # x, weight, eps, rows, n, out
    "llama_rms_norm": ([_POINTER, _POINTER, _FLOAT, _INT64, _INT64, _POINTER], None),
    # gate_up, rows, n, exp, lanes, out
    "llama_silu_mul": ([_POINTER, _INT64, _INT64, _POINTER, _INT, _POINTER], None),
    # layers, table, hidden, rows, hidden_size, heads, kv_heads, head_dim, intermediate, eps, scaling, cos, sin,
    # slots, key_row, key_slots, value_slots, base, gather, gather_at, key_counts, bias, bias_at, exp, exp_lanes,
    # aux, bfloat16, threads
    "llama_layers": ([_INT64, _POINTER, _POINTER, _INT64, _INT64, _INT64, _INT64, _INT64, _INT64, _FLOAT, _FLOAT,
                      _POINTER, _POINTER, _POINTER, _INT64, _INT64, _INT64, _POINTER, _POINTER, _POINTER, _POINTER,
                      _POINTER, _POINTER, _POINTER, _INT, _POINTER, _INT, _INT], None),
}


def available() -> bool:
    return library() is not None


def unavailable() -> str | None:
    """Why the compiled kernels are not used here, or None when they are."""
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
    for name, (argtypes, restype) in _SIGNATURES.items():
        function = getattr(lib, name, None)
        if function is None:  # the bfloat16 kernel's entry points where the CPU cannot run them
            continue
        function.argtypes, function.restype = argtypes, restype
    return lib


@cache
def digest() -> str:
    """What a build and its timings are valid for: the sources, the compiler and the flags."""
    sources = b"".join(source.read_bytes() for source in (*SOURCES, *HEADERS))
    return hashlib.sha256(sources + " ".join((_compiler(), *flags())).encode()).hexdigest()[:16]


@cache
def flags() -> tuple[str, ...]:
    """The compiler flags for this CPU."""
    wide = {"avx512f", "avx512vl"} <= _cpu_flags()
    return FLAGS + (WIDE_REGISTERS if wide else ()) + (BF16_DOT if wide and "avx512_bf16" in _cpu_flags() else ())


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
    """The library for these sources and flags, built into the kernels cache on first use (or
    into a temporary directory where the cache cannot be written)."""
    from trtspec import subproc
    from trtspec.artifacts import kernels_dir
    from trtspec.errors import TrtSpecError

    target = kernels_dir() / f"cpu-kernels-{digest()}.so"
    if target.exists():
        return target
    try:
        target.parent.mkdir(parents=True, exist_ok=True)
        folder = str(target.parent)
    except OSError:
        folder, target = tempfile.mkdtemp(prefix="trtspec-kernels-"), None
    handle, partial = tempfile.mkstemp(suffix=".so", prefix=".cpu-kernels-", dir=folder)
    os.close(handle)
    try:
        subproc.run([_compiler(), *flags(), *map(str, SOURCES), "-o", partial], timeout=120)
        if target is None:
            return Path(partial)
        os.replace(partial, target)  # loaders see no library or a whole one
    except TrtSpecError as error:
        names = " and ".join(source.name for source in SOURCES)
        raise RuntimeError(f"building {names} failed: {error.problem.splitlines()[0]}") from None
    finally:
        if target is not None and os.path.exists(partial):
            os.unlink(partial)
    return target
