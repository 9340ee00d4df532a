"""On-disk layout and manifests: the only place in trtspec that builds artifact paths.

Layout (relative to the current directory unless the spec gives absolute paths):

    <workdir>/checkpoints/{target, target-fp8, target-fp8-trtllm, eagle3, draft, draft-fp8}/
    <workdir>/server/         tritonserver and supervisor logs, server.json, backend directory
    <tmp>/trtspec-ports-<uid>/<port>.lock   held by the server on that port (any workdir)
    /dev/shm/<prefix>*        a running server's Python backend regions
    <workdir>/reports/        bench, tune and training reports
    <build.output_dir>/<engine name>/engine.json (+ backend artifacts)
    <serve.repository>/       the Triton model repository
    $TRTSPEC_CACHE (default ~/.cache/trtspec)/models/<name>/   converted model sources
    $TRTSPEC_CACHE/linear-timings.json   the cpu engine's first linear-kernel timings on each machine
    $TRTSPEC_CACHE/kernels/              the cpu engine's compiled kernels (cpu-kernels-<hash>.so)

Every artifact directory carries manifest.json: what it is, the tool versions, the settings and
the sha256 of its inputs. `atomic_dir()` writes into a temporary sibling and renames it into
place, so an interrupted stage never leaves a half-written artifact behind.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import shutil
import tempfile
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

from trtspec import __version__
from trtspec.errors import TrtSpecError

MANIFEST = "manifest.json"
ENGINE_JSON = "engine.json"
WEIGHT_SUFFIXES = (".safetensors", ".bin", ".gguf", ".pt")


def cache_root() -> Path:
    """Where converted model sources are cached: $TRTSPEC_CACHE or ~/.cache/trtspec."""
    return Path(os.environ.get("TRTSPEC_CACHE") or Path.home() / ".cache" / "trtspec")


def model_cache_dir(name: str) -> Path:
    return cache_root() / "models" / name


def linear_timings_file() -> Path:
    """The cpu engine's linear-kernel timings, kept so every load on a machine chooses alike
    (trtspec.runtime.forward.linear_choice)."""
    return cache_root() / "linear-timings.json"


def kernels_dir() -> Path:
    """Compiled cpu kernels (trtspec.runtime.kernels.native), one file per sources and compiler flags."""
    return cache_root() / "kernels"


def downloads_dir() -> Path:
    return cache_root() / "downloads"


@dataclass(frozen=True)
class Layout:
    """Every path a pipeline stage reads or writes, derived from the spec."""

    workdir: Path
    engines_dir: Path
    repository: Path

    @classmethod
    def from_spec(cls, spec: Any) -> Layout:
        return cls(workdir=Path(spec.workdir), engines_dir=Path(spec.build.output_dir),
                   repository=Path(spec.serve.repository))

    @property
    def checkpoints(self) -> Path:
        return self.workdir / "checkpoints"

    def checkpoint(self, kind: str) -> Path:
        """kind: target | target-fp8 | target-fp8-trtllm | eagle3 | draft | draft-fp8."""
        return self.checkpoints / kind

    def engine_dir(self, name: str) -> Path:
        return self.engines_dir / name

    @property
    def server_dir(self) -> Path:
        return self.workdir / "server"

    @property
    def server_log(self) -> Path:
        return self.server_dir / "tritonserver.log"

    @property
    def server_pid(self) -> Path:
        return self.server_dir / "server.json"

    @property
    def supervisor_log(self) -> Path:
        return self.server_dir / "supervisor.log"

    @property
    def backend_dir(self) -> Path:
        return self.server_dir / "backends"

    @property
    def reports(self) -> Path:
        return self.workdir / "reports"

    def report_dir(self, name: str) -> Path:
        return self.reports / name


def port_lock_path(port: int) -> Path:
    """The lock a trtspec server holds for one TCP port while it runs, shared by every workdir:
    $TRTSPEC_LOCK_DIR or <tmp>/trtspec-ports-<uid>/<port>.lock."""
    base = os.environ.get("TRTSPEC_LOCK_DIR") or Path(tempfile.gettempdir()) / f"trtspec-ports-{os.getuid()}"
    return Path(base) / f"{port}.lock"


SHM_DIR = Path("/dev/shm")


def shm_regions(prefix: str) -> list[Path]:
    """The Python backend's shared-memory regions named with `prefix` (see launch.local_command)."""
    return sorted(SHM_DIR.glob(f"{prefix}*")) if prefix else []


def engine_name(model_name: str, mode: str, backend: str, fp8: bool) -> str:
    """engines/<name>: e.g. smollm2-ngram-cpu, llama-3.1-8b-eagle3-fp8-trtllm."""
    return "-".join([model_name, mode] + (["fp8"] if fp8 else []) + [backend])


def sha256_file(path: Path, chunk: int = 1 << 20) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as handle:
        while block := handle.read(chunk):
            digest.update(block)
    return digest.hexdigest()


def weights_sha256(directory: Path) -> str:
    """sha256 over the weight files of a checkpoint directory (names and contents, sorted).

    A hash of hashes keeps it stable across copies and independent of config edits.
    """
    directory = Path(directory)
    files = sorted(p for p in directory.rglob("*") if p.is_file() and p.name.endswith(WEIGHT_SUFFIXES))
    if not files:
        raise TrtSpecError(f"{directory}: no weight files found", fix="point at a checkpoint with *.safetensors")
    digest = hashlib.sha256()
    for path in files:
        digest.update(str(path.relative_to(directory)).encode())
        digest.update(sha256_file(path).encode())
    return digest.hexdigest()


def tool_versions() -> dict[str, str | None]:
    """Versions of the tools that shape an artifact (None where not installed)."""
    from importlib.metadata import PackageNotFoundError, version

    versions: dict[str, str | None] = {"trtspec": __version__}
    for package in ("torch", "transformers", "nvidia-modelopt", "tensorrt_llm", "tritonclient"):
        try:
            versions[package] = version(package)
        except PackageNotFoundError:
            versions[package] = None
    return versions


def write_manifest(directory: Path, kind: str, **fields: Any) -> dict[str, Any]:
    """Write manifest.json: kind, creation time, tool versions, and the caller's fields."""
    manifest = {"kind": kind, "created": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
                "versions": tool_versions(), **fields}
    write_json(Path(directory) / MANIFEST, manifest)
    return manifest


def read_manifest(directory: Path) -> dict[str, Any] | None:
    """The manifest of an artifact directory, or None when it has none."""
    path = Path(directory) / MANIFEST
    if not path.exists():
        return None
    return read_json(path)


def read_json(path: Path) -> Any:
    try:
        return json.loads(Path(path).read_text())
    except json.JSONDecodeError as error:
        raise TrtSpecError(f"{path}: not valid JSON ({error})", fix="delete it and re-run the stage") from None


def write_json(path: Path, data: Any) -> None:
    Path(path).write_text(json.dumps(data, indent=2, sort_keys=False) + "\n")


def is_up_to_date(directory: Path, inputs: dict[str, Any]) -> bool:
    """True when `directory` exists and its manifest recorded exactly these `inputs`.

    Stages call this to skip a re-run with the same inputs (and say so).
    """
    manifest = read_manifest(directory)
    return manifest is not None and manifest.get("inputs") == json.loads(json.dumps(inputs))



# What a stage did to one artifact directory. Every stage runs the same idiom: `settled()` first
# (skipped when the manifest recorded these inputs, planned on a dry run), else write it with
# `atomic_dir()` and `write_manifest()` and say "written".
Status = Literal["written", "skipped", "planned"]


@dataclass
class StageResult:
    """What one stage did to one artifact directory: `status` is "written" | "skipped" (up to date
    with these inputs) | "planned" (a dry run: nothing written)."""

    kind: str
    path: Path
    status: Status
    manifest: dict[str, Any] | None = None
    report: dict[str, Any] | None = None

    def to_dict(self) -> dict[str, Any]:
        return {"kind": self.kind, "path": str(self.path), "status": self.status,
                "weights_sha256": (self.manifest or {}).get("weights_sha256"), "report": self.report}


def settled(kind: str, final: Path, inputs: dict[str, Any], *, dry_run: bool) -> StageResult | None:
    """The stage's answer without writing: skipped when `final` is up to date with `inputs`,
    planned on a dry run; None when the stage has to write `final`."""
    if is_up_to_date(final, inputs):
        return StageResult(kind, final, "skipped", read_manifest(final))
    if dry_run:
        return StageResult(kind, final, "planned")
    return None

@contextlib.contextmanager
def atomic_dir(final: Path) -> Iterator[Path]:
    """Yield a temporary directory beside `final`; on success it replaces `final` in one rename.

    An existing `final` is swapped with the new directory by one renameat2(RENAME_EXCHANGE), so
    no moment exists without a complete `final` (moving the old one aside first and the new one
    in second left nothing there when interrupted in between). Where the filesystem lacks the
    exchange, the two renames remain. On any exception the temporary directory is removed and
    `final` is left as it was.
    """
    final = Path(final)
    final.parent.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(prefix=f".{final.name}.tmp-", dir=final.parent))
    try:
        yield staging
        if not (final.exists() or final.is_symlink()):
            os.replace(staging, final)
        elif not exchange_paths(staging, final):
            old = final.with_name(f".{final.name}.old-{os.getpid()}")
            os.replace(final, old)
            os.replace(staging, final)
            os.replace(old, staging)
    finally:
        # What is left at `staging` is the unused new directory, or the old one after a swap.
        if staging.is_symlink() or staging.is_file():
            staging.unlink()
        else:
            shutil.rmtree(staging, ignore_errors=True)


def exchange_paths(a: Path, b: Path) -> bool:
    """Swap two paths atomically (Linux renameat2 RENAME_EXCHANGE); False where unsupported."""
    import ctypes
    import errno

    try:
        renameat2 = ctypes.CDLL(None, use_errno=True).renameat2
    except (OSError, AttributeError):
        return False
    renameat2.argtypes = [ctypes.c_int, ctypes.c_char_p, ctypes.c_int, ctypes.c_char_p, ctypes.c_uint]
    renameat2.restype = ctypes.c_int
    at_fdcwd, rename_exchange = -100, 2
    if renameat2(at_fdcwd, os.fsencode(a), at_fdcwd, os.fsencode(b), rename_exchange) == 0:
        return True
    code = ctypes.get_errno()
    if code in (errno.EINVAL, errno.ENOSYS, errno.EOPNOTSUPP, errno.EXDEV):
        return False
    raise OSError(code, os.strerror(code), str(b))
