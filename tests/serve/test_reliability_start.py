"""Starting the server wherever the user's shell puts Python (issue 15, finding 1).

Each test starts a real tritonserver on free loopback ports. Docstrings of the form
"Fault: ... / Behaviour: ..." feed the Reliability table in docs/DEPLOY.md
(scripts/reliability_table.py).
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest

from trtspec.errors import ToolMissingError

pytestmark = pytest.mark.e2e


def _linked_prefix(tiny_cpu_engine, tmp_path, respec) -> Path:
    """The installation prefix of the libpython the wheel's stub links on this machine."""
    from trtspec.artifacts import Layout
    from trtspec.serve import setup as server_setup

    spec = respec(tiny_cpu_engine[0], tmp_path / "probe")
    binary = server_setup.find_tritonserver()
    backends = server_setup.prepare_backends(Layout.from_spec(spec), binary)
    env = {**os.environ, **server_setup.server_env(binary, "cpu")}
    result = server_setup.subproc.run(["ldd", str(backends / "python" / server_setup.STUB_NAME)], env=env)
    return server_setup.installation_prefix(server_setup.libpython_from_ldd(result.stdout, Path("stub")))


def _poisoned_prefix(root: Path) -> Path:
    """A directory that looks like a CPython 3.11 installation to the stub's path search but
    holds no usable standard library: first on PATH, it used to become the stub's home."""
    (root / "bin").mkdir(parents=True)
    python = root / "bin" / "python3"
    python.write_text("#!/bin/sh\nexit 1\n")
    python.chmod(0o755)
    stdlib = root / "lib" / f"python{sys.version_info.major}.{sys.version_info.minor}"
    stdlib.mkdir(parents=True)
    (stdlib / "os.py").write_text("raise ImportError('not a real standard library')\n")
    return root / "bin"


@pytest.mark.parametrize("first_on_path", ["standalone-cpython", "look-alike-prefix"])
def test_server_starts_with_a_foreign_python_first_on_path(tiny_cpu_engine, tmp_path, monkeypatch, respec, serving,
                                                            first_on_path):
    """Fault: a standalone (non-venv) CPython's bin directory, or a directory that looks like one,
    is first on PATH when the server starts.
    Behaviour: the stub's interpreter home is anchored to the libpython it links; the model
    loads and answers."""
    from trtspec.client.triton import TritonLLMClient

    if first_on_path == "standalone-cpython":
        base = Path(sys.base_prefix)
        if base == _linked_prefix(tiny_cpu_engine, tmp_path, respec) or not (base / "bin" / "python3").exists():
            pytest.skip(f"this interpreter's installation ({base}) is the one the stub links: no second CPython here")
        bin_dir = base / "bin"
    else:
        bin_dir = _poisoned_prefix(tmp_path / "fake-python")
    monkeypatch.setenv("PATH", f"{bin_dir}{os.pathsep}{os.environ.get('PATH', '')}")
    built, engine_dir = tiny_cpu_engine
    spec = respec(built, tmp_path)
    with serving(spec, engine_dir):
        client = TritonLLMClient(f"127.0.0.1:{spec.serve.grpc_port}")
        try:
            assert client.generate("hello there", max_tokens=2)["num_output_tokens"] >= 1
        finally:
            client.close()


LDD_MISSING = """\tlinux-vdso.so.1 (0x00007ffd6b5f2000)
\tlibcudart-09529672.so.12.6.77 => /x/nvidia_pytriton.libs/libcudart-09529672.so.12.6.77 (0x00007f3f90600000)
\tlibpython3.11.so.1.0 => not found
\tlibstdc++.so.6 => /lib/x86_64-linux-gnu/libstdc++.so.6 (0x00007f3f8fa00000)
"""


def test_missing_system_libpython_is_one_line_naming_the_package():
    """Fault: the system has no libpython3.11.so.1.0 for the stub to link.
    Behaviour: deploy stops with one line naming the library and the package to install."""
    from trtspec.serve import setup as server_setup

    with pytest.raises(ToolMissingError) as error:
        server_setup.libpython_from_ldd(LDD_MISSING, Path("triton_python_backend_stub"))
    assert str(error.value) == ("triton_python_backend_stub needs libpython3.11.so.1.0, which is not installed on "
                                "this system; install it (Debian/Ubuntu: apt-get install libpython3.11)")


def test_libpython_prefix_is_the_installation_that_owns_it(tmp_path):
    """The prefix search walks up from the real file to the directory holding lib/python3.X/os.py."""
    from trtspec.serve import setup as server_setup

    prefix = tmp_path / "opt" / "py"
    (prefix / "lib" / "python3.11").mkdir(parents=True)
    (prefix / "lib" / "python3.11" / "os.py").write_text("")
    lib = prefix / "lib" / "x86_64-linux-gnu" / "libpython3.11.so.1.0"
    lib.parent.mkdir()
    lib.write_bytes(b"")
    (tmp_path / "link.so").symlink_to(lib)
    assert server_setup.installation_prefix(tmp_path / "link.so") == prefix
