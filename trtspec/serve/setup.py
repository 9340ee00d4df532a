"""What a local tritonserver needs before it starts: the binary, a Python backend directory with
the stub for this Python, the stub's interpreter home, and the environment.

The binary is $TRTSPEC_TRITONSERVER, `/opt/tritonserver/bin/tritonserver` (the container) or the
one inside the nvidia-pytriton wheel (CPU). For the wheel, the Python backend directory is built
under <workdir>/server/backends: the wheel's libtriton_python.so plus the stub built for the
running Python's minor version.

The stub embeds CPython with an *isolated* config: it ignores PYTHONHOME and PYTHONPATH and takes
its home (stdlib and lib-dynload) from the first `python3` on PATH, while it links whatever
libpython3.X.so the dynamic loader finds. When the two belong to different builds (a pyenv or
other standalone CPython first on PATH, the system libpython linked), extension modules fail
with undefined symbols (`_ssl`: `_PyModule_Add`). So the home is anchored to the libpython the
stub really links: `ldd` names it, its installation prefix is the ancestor holding
lib/python3.X/os.py, and a one-file `bin/python3` inside the backend directory (next to a
`lib/python3.X` link to that prefix's stdlib) is put first on the server's PATH.
"""

from __future__ import annotations

import importlib.util
import os
import re
import shutil
import sys
import sysconfig
from pathlib import Path

from trtspec import subproc
from trtspec.artifacts import Layout
from trtspec.errors import ToolMissingError
from trtspec.serve.launch import CONTAINER_TRITONSERVER

STUB_NAME = "triton_python_backend_stub"


def pytriton_root() -> Path | None:
    """The tritonserver tree inside the nvidia-pytriton wheel, or None."""
    spec = importlib.util.find_spec("pytriton")
    if spec is None or not spec.submodule_search_locations:
        return None
    root = Path(list(spec.submodule_search_locations)[0]) / "tritonserver"
    return root if (root / "bin" / "tritonserver").exists() else None


def find_tritonserver() -> Path:
    """The tritonserver binary to run here."""
    override = os.environ.get("TRTSPEC_TRITONSERVER")
    if override:
        if not Path(override).is_file():
            raise ToolMissingError(f"TRTSPEC_TRITONSERVER={override}: no such file", fix="unset it or fix the path")
        return Path(override)
    if Path(CONTAINER_TRITONSERVER).is_file():
        return Path(CONTAINER_TRITONSERVER)
    root = pytriton_root()
    if root is not None:
        return root / "bin" / "tritonserver"
    raise ToolMissingError("tritonserver not found (not in /opt/tritonserver, nvidia-pytriton not installed)",
                           fix="pip install nvidia-pytriton==0.7.0, or use --target docker")


def _python_minor() -> str:
    return f"{sys.version_info.major}.{sys.version_info.minor}"


def prepare_backends(layout: Layout, binary: Path) -> Path:
    """A backend directory whose python backend carries the stub for this Python; returns it."""
    source = binary.parent.parent / "backends"
    if binary == Path(CONTAINER_TRITONSERVER):
        return source  # the container's backends already match its Python
    stub_dir = binary.parent.parent / "python_backend_stubs" / _python_minor()
    stub = stub_dir / STUB_NAME
    if not stub.exists():
        raise ToolMissingError(f"no Triton Python backend stub for Python {_python_minor()} in {stub_dir.parent}",
                               fix="use Python 3.11")
    target = layout.backend_dir.resolve()
    python = target / "python"
    python.mkdir(parents=True, exist_ok=True)
    for name in ("libtriton_python.so", "triton_python_backend_utils.py"):
        _copy_if_changed(source / "python" / name, python / name)
    _copy_if_changed(stub, python / STUB_NAME)
    return target


def _copy_if_changed(source: Path, dest: Path) -> None:
    # A stub left running by a crashed server keeps its file busy (ETXTBSY): replace by rename,
    # never by writing into the file, and skip the copy when nothing changed.
    if dest.exists() and dest.stat().st_size == source.stat().st_size and dest.read_bytes() == source.read_bytes():
        return
    partial = dest.with_name(f".{dest.name}.{os.getpid()}")
    shutil.copy2(source, partial)
    os.replace(partial, dest)


# -- the stub's interpreter home ---------------------------------------------------------------

def libpython_from_ldd(ldd_output: str, stub: Path) -> Path:
    """The libpython3.X.so path in `ldd` output; ToolMissingError naming the package when not found."""
    for line in ldd_output.splitlines():
        match = re.match(r"\s*(libpython3\.\d+\S*\.so[.\d]*)\s*=>\s*(.*?)\s*(\(0x[0-9a-f]+\))?$", line)
        if not match:
            continue
        name, where = match.group(1), match.group(2)
        if where == "not found" or not where:
            version = re.search(r"python(3\.\d+)", name).group(1)
            raise ToolMissingError(f"{stub.name} needs {name}, which is not installed on this system",
                                   fix=f"install it (Debian/Ubuntu: apt-get install libpython{version})")
        return Path(where)
    raise ToolMissingError(f"{stub}: ldd shows no libpython3.X.so", fix="reinstall nvidia-pytriton")


def installation_prefix(libpython: Path) -> Path:
    """The installation a libpython belongs to: the nearest ancestor with lib/python3.X/os.py."""
    real = libpython.resolve()
    version = re.search(r"libpython(3\.\d+)", real.name).group(1)
    for parent in real.parents:
        if (parent / "lib" / f"python{version}" / "os.py").is_file():
            return parent
    raise ToolMissingError(f"{real}: no Python {version} standard library (lib/python{version}/os.py) beside it",
                           fix=f"install the standard library that belongs to it (Debian: apt-get install "
                               f"libpython{version}-stdlib)")


def anchor_stub_home(backend_dir: Path, env: dict[str, str]) -> Path:
    """Make <backend_dir>/python/home the stub's interpreter home; return its bin directory.

    home/lib/python3.X links to the stdlib of the libpython the stub links, and home/bin/python3
    is a small script (a real file, so the stub's path search stops there) that runs that
    installation's own interpreter if anybody executes sys.executable.
    """
    stub = backend_dir / "python" / STUB_NAME
    result = subproc.run(["ldd", str(stub)], env=env, timeout=30, check=False)
    libpython = libpython_from_ldd(result.stdout, stub)
    prefix = installation_prefix(libpython)
    version = re.search(r"libpython(3\.\d+)", libpython.name).group(1)
    home = backend_dir / "python" / "home"
    (home / "bin").mkdir(parents=True, exist_ok=True)
    (home / "lib").mkdir(exist_ok=True)
    link = home / "lib" / f"python{version}"
    target = prefix / "lib" / f"python{version}"
    if not link.is_symlink() or Path(os.readlink(link)) != target:
        partial = link.with_name(f".{link.name}.{os.getpid()}")
        partial.unlink(missing_ok=True)
        partial.symlink_to(target)
        os.replace(partial, link)
    interpreter = next((p for p in (prefix / "bin" / f"python{version}", prefix / "bin" / "python3") if p.is_file()),
                       None)
    script = home / "bin" / "python3"
    body = (f'exec "{interpreter}" "$@"\n' if interpreter
            else f'echo "no Python {version} interpreter in {prefix}/bin" >&2; exit 127\n')
    script.write_text("#!/bin/sh\n# Anchors the Triton Python backend stub's home (trtspec.serve.setup).\n" + body)
    script.chmod(0o755)
    return home / "bin"


# -- the environment ---------------------------------------------------------------------------

def server_env(binary: Path | None = None, backend: str = "cpu", backend_dir: Path | None = None) -> dict[str, str]:
    """Environment for tritonserver and the Python backend stub.

    TRTSPEC_PYTHONPATH carries the project root and this interpreter's site-packages (the stub
    ignores PYTHONPATH; the cpu model.py adds them). The wheel's stub finds its bundled libraries
    through an RPATH relative to where the wheel put it; the copy in our backend directory gets
    them through LD_LIBRARY_PATH instead. With `backend_dir`, the stub's home is anchored to the
    libpython it links (module docstring).
    """
    import trtspec

    paths = [str(Path(trtspec.__file__).resolve().parent.parent), sysconfig.get_paths()["purelib"],
             sysconfig.get_paths()["platlib"]]
    existing = os.environ.get("PYTHONPATH")
    ordered = list(dict.fromkeys(paths + ([existing] if existing else [])))
    env = {"PYTHONPATH": os.pathsep.join(ordered), "TRTSPEC_PYTHONPATH": os.pathsep.join(ordered)}
    if backend == "cpu":
        # One engine loop per model instance runs every request's steps (in-flight batching) on
        # OMP_NUM_THREADS threads, every usable core by default; the model loads in the stub's main
        # thread, whose OpenMP team ends once the engine is built (trtspec/runtime/cores/threads.py). A
        # caller's OMP_NUM_THREADS and OMP_WAIT_POLICY are kept; trtspec sets no wait policy.
        env["OMP_NUM_THREADS"] = os.environ.get("OMP_NUM_THREADS") or str(len(os.sched_getaffinity(0)))
    root = pytriton_root()
    libs = root.parent.parent / "nvidia_pytriton.libs" if root else None
    if libs and libs.is_dir() and (binary is None or root in binary.parents):
        existing_ld = os.environ.get("LD_LIBRARY_PATH")
        env["LD_LIBRARY_PATH"] = os.pathsep.join([str(libs)] + ([existing_ld] if existing_ld else []))
    if backend_dir is not None and binary is not None and binary != Path(CONTAINER_TRITONSERVER):
        anchor = anchor_stub_home(backend_dir, {**os.environ, **env})
        env["PATH"] = os.pathsep.join([str(anchor), os.environ.get("PATH", "")])
    return env
