"""The row kernel (trtspec.runtime.kernels.rowdot): F.linear's numbers up to rounding, every row the same
at any row count and any thread count (by construction, checked here bit for bit), built once per
source into the kernels cache (with the attention kernel: trtspec.runtime.kernels.native), and a clear
reason where it cannot be used."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest
import torch

from trtspec.runtime.kernels import native, rowdot

needs_kernel = pytest.mark.skipif(not native.available(), reason=f"row kernel unavailable: {native.unavailable()}")
needs_bfloat16 = pytest.mark.skipif(rowdot.bfloat16_unavailable() is not None,
                                    reason=f"bfloat16 row kernel unavailable: {rowdot.bfloat16_unavailable()}")


@needs_kernel
@pytest.mark.parametrize("shape", [(16, 8), (21, 37), (576, 192), (1536, 576), (577, 1537)],
                         ids=["tiny", "odd", "kv", "down", "tails"])
@pytest.mark.parametrize("bias", [False, True])
def test_it_computes_f_linear(shape, bias):
    """Inputs that are not a multiple of 8 and outputs that are not a multiple of the packed group
    (3 weight rows) take the tails."""
    generator = torch.Generator().manual_seed(0)
    in_features, out_features = shape
    weight = torch.randn(out_features, in_features, generator=generator)
    b = torch.randn(out_features, generator=generator) if bias else None
    x = torch.randn(2, 5, in_features, generator=generator)
    packed = rowdot.pack(weight)
    out = rowdot.linear(x, packed, b)
    assert out.shape == (2, 5, out_features)
    torch.testing.assert_close(out, torch.nn.functional.linear(x, weight, b), rtol=1e-5, atol=1e-4)
    strided = x.transpose(0, 1)  # not contiguous: copied first
    torch.testing.assert_close(rowdot.linear(strided, packed, b), torch.nn.functional.linear(strided, weight, b),
                               rtol=1e-5, atol=1e-4)


@needs_kernel
@pytest.mark.parametrize("bfloat16", [False, True], ids=["float32", "bfloat16"])
@pytest.mark.parametrize("shape", [(576, 576), (1536, 576), (577, 1537)], ids=["q", "down", "tails"])
def test_a_row_is_the_same_alone_among_others_and_on_any_thread_count(shape, bfloat16):
    if bfloat16 and rowdot.bfloat16_unavailable():
        pytest.skip(rowdot.bfloat16_unavailable())
    in_features, out_features = shape
    generator = torch.Generator().manual_seed(1)
    weight = torch.randn(out_features, in_features, generator=generator)
    x = torch.randn(300, in_features, generator=generator)
    packed = rowdot.pack(weight, bfloat16=bfloat16)
    before = torch.get_num_threads()
    try:
        torch.set_num_threads(1)
        alone = [rowdot.linear(x[r:r + 1], packed) for r in (0, 2, 299)]
        for threads in (1, 2, 3):
            torch.set_num_threads(threads)
            # passes of 4 or 8 rows (two split evenly: 9 rows at 8 are 5 + 4; 2-3 passes share the
            # weight stream: 9-24 rows at 8), slabs of 64
            for rows in (2, 3, 4, 5, 7, 8, 9, 10, 12, 15, 16, 17, 24, 25, 64, 65, 100, 300):
                batch = rowdot.linear(x[:rows], packed)
                for index, r in enumerate((0, 2, 299)):
                    if r < rows:
                        assert torch.equal(batch[r:r + 1], alone[index]), (threads, rows, r)
    finally:
        torch.set_num_threads(before)


@needs_kernel
def test_an_avx2_only_build_gives_the_same_numbers(tmp_path):
    """Where the CPU has AVX-512VL the library is built for 32 vector registers (8 input rows a
    pass), elsewhere for 16 (4 rows a pass): each output's arithmetic is the same, so are its bits.
    The AVX2-only build is made here by hiding the CPU's AVX-512 flags from native.py."""
    code = ("import sys, torch\n"
            "from trtspec.runtime.kernels import native, rowdot\n"
            "native._cpu_flags = lambda: {'avx2', 'fma'}\n"
            "assert '-mavx512vl' not in native.flags() and native.available(), native.unavailable()\n"
            "generator = torch.Generator().manual_seed(2)\n"
            "weight, x = torch.randn(577, 1537, generator=generator), torch.randn(300, 1537, generator=generator)\n"
            "torch.save([rowdot.linear(x[:rows], rowdot.pack(weight)) for rows in (1, 5, 9, 16, 300)], sys.argv[1])\n")
    out = tmp_path / "avx2.pt"
    result = subprocess.run([sys.executable, "-c", code, str(out)], capture_output=True, text=True, timeout=300,
                            env={**os.environ, "TRTSPEC_CACHE": str(tmp_path)})
    assert result.returncode == 0, result.stderr[-2000:]
    generator = torch.Generator().manual_seed(2)
    weight, x = torch.randn(577, 1537, generator=generator), torch.randn(300, 1537, generator=generator)
    here = [rowdot.linear(x[:rows], rowdot.pack(weight)) for rows in (1, 5, 9, 16, 300)]
    assert all(torch.equal(a, b) for a, b in zip(torch.load(out), here, strict=True))


@needs_bfloat16
@pytest.mark.parametrize("shape", [(16, 8), (21, 37), (576, 192), (1536, 576), (577, 1537)],
                         ids=["tiny", "odd", "kv", "down", "tails"])
@pytest.mark.parametrize("bias", [False, True])
def test_the_bfloat16_kernel_sums_bfloat16_products_in_float32(shape, bias):
    """Against float64 sums of the bfloat16-rounded input and weight: float32 summation error only
    (inputs of 16 and 37 take the scalar tail; 577 both). A kernel that skipped rounding the input
    or the weight would be ~1e-2 off, far outside the tolerance."""
    generator = torch.Generator().manual_seed(0)
    in_features, out_features = shape
    weight = torch.randn(out_features, in_features, generator=generator)
    b = torch.randn(out_features, generator=generator) if bias else None
    x = torch.randn(2, 5, in_features, generator=generator)
    packed = rowdot.pack(weight, bfloat16=True)
    assert packed.data.dtype == torch.bfloat16
    out = rowdot.linear(x, packed, b)
    exact = x.to(torch.bfloat16).double() @ weight.to(torch.bfloat16).double().T
    if b is not None:
        exact = exact + b.double()
    assert out.dtype == torch.float32 and out.shape == (2, 5, out_features)
    torch.testing.assert_close(out.double(), exact, rtol=1e-5, atol=2e-5 * in_features ** 0.5)
    assert not torch.allclose(out.double(), x.double() @ weight.double().T, rtol=1e-5, atol=1e-4)


@needs_kernel
def test_without_avx512_bf16_the_bfloat16_kernel_says_why(tmp_path):
    """A CPU without AVX512_BF16 still builds the library (float32 kernels); the bfloat16 one is
    then unavailable with a reason, not a crash."""
    code = ("from trtspec.runtime.kernels import native, rowdot\n"
            "native._cpu_flags = lambda: {'avx2', 'fma', 'avx512f', 'avx512vl'}\n"
            "assert '-mavx512bf16' not in native.flags()\n"
            "print(native.available(), rowdot.bfloat16_unavailable())\n")
    result = _python(code, TRTSPEC_CACHE=str(tmp_path))
    assert result.returncode == 0, result.stderr[-2000:]
    assert result.stdout.startswith("True ") and "AVX512_BF16" in result.stdout


def _python(code: str, **env: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300,
                          env={**os.environ, **env})


@needs_kernel
def test_it_is_built_once_into_the_kernels_cache(tmp_path):
    code = "from trtspec.runtime.kernels import native; print(native.available(), native.library()._name)"
    first = _python(code, TRTSPEC_CACHE=str(tmp_path))
    assert first.returncode == 0 and first.stdout.split()[0] == "True", first.stderr[-2000:]
    built = list((tmp_path / "kernels").iterdir())
    assert [p.name for p in built] == [f"cpu-kernels-{native.digest()}.so"]  # nothing half-written beside it
    stamp = built[0].stat()
    again = _python(code, TRTSPEC_CACHE=str(tmp_path))
    assert again.stdout.split() == first.stdout.split()
    now = built[0].stat()  # a rebuild would have renamed a new file into place
    assert (now.st_ino, now.st_mtime_ns) == (stamp.st_ino, stamp.st_mtime_ns)


def test_without_a_compiler_it_says_why_and_the_engine_keeps_onednn(tmp_path):
    code = ("import torch\n"
            "from trtspec.runtime.kernels import native\n"
            "from trtspec.runtime.forward.prepack import prepack_linears\n"
            "print(native.unavailable())\n"
            "model = torch.nn.Sequential(torch.nn.Linear(16, 8))\n"
            "prepack_linears(model)\n"
            "print('kernel', model[0].kernel)\n")
    result = _python(code, TRTSPEC_CACHE=str(tmp_path), CXX="/nonexistent/g++")
    assert result.returncode == 0, result.stderr[-2000:]
    lines = result.stdout.splitlines()
    assert "/nonexistent/g++" in lines[0] and "not found" in lines[0]
    assert lines[-1] in ("kernel onednn", "kernel mkl")
    assert "not the row kernel" in result.stderr and result.stderr.count("trtspec:") == 1
    assert not list((tmp_path / "kernels").glob("*"))  # no partial library left behind
