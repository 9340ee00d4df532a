"""Triton model repositories, one renderer per backend, written atomically.

    from trtspec.repository import render
    files = render("engines/smollm2-ngram-cpu", spec, "model_repository")

`render()` reads engine.json, cross-checks it against the spec (backend, max_batch_size,
max_draft_len, streaming needs decoupled), renders into a staging directory beside `dest` and
swaps it in with one rename (artifacts.atomic_dir): a failed render leaves the previous
repository exactly as it was. Every config.pbtxt is checked to parse as Triton's ModelConfig
with no `${...}` left before the swap. `engine_path` is how the server will see the engine
directory: the absolute local path by default, `/engines/<name>` inside a container.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from trtspec import artifacts
from trtspec.errors import IncompatibleArtifactError, TrtSpecError

ENGINE_FORMAT = "trtspec-engine/1"
MANIFEST_KIND = "model-repository"


def read_engine(engine_dir: str | Path) -> dict[str, Any]:
    """engine.json of a built engine, or a TrtSpecError saying how to build it."""
    path = Path(engine_dir) / artifacts.ENGINE_JSON
    if not path.exists():
        raise TrtSpecError(f"{path}: no engine here", fix="run `trtspec build` first (or pass --engine)")
    engine = artifacts.read_json(path)
    if engine.get("format") != ENGINE_FORMAT:
        raise IncompatibleArtifactError(f"{path}: format {engine.get('format')!r}, expected {ENGINE_FORMAT!r}",
                                        fix="rebuild the engine with this trtspec")
    return engine


def cross_check(engine: dict[str, Any], spec: Any) -> None:
    """engine.json and the spec describe the same deployment."""
    build = engine["build_config"]
    if engine["backend"] != spec.build.backend:
        raise IncompatibleArtifactError(f"engine {engine['name']} was built for backend {engine['backend']}, "
                                        f"the spec says {spec.build.backend}", fix="rebuild or pass --engine")
    if build["max_batch_size"] != spec.build.max_batch_size:
        raise IncompatibleArtifactError(f"engine max_batch_size {build['max_batch_size']} differs from "
                                        f"build.max_batch_size {spec.build.max_batch_size}", fix="rebuild the engine")
    cap = spec.speculative.draft_cap  # the mode's own (suffix: speculative.suffix.max_draft_len)
    if engine["mode"] != "none" and cap > build["max_draft_len"]:
        from trtspec.modes import draft_cap_field

        raise IncompatibleArtifactError(f"{draft_cap_field(spec.speculative.mode)} {cap} exceeds the "
                                        f"engine's max_draft_len {build['max_draft_len']}", fix="rebuild the engine")


def render(engine_dir: str | Path, spec: Any, dest: str | Path, *, engine_path: str | None = None) -> list[Path]:
    """Render the repository for the engine's backend into `dest`, atomically; return the files written."""
    engine_dir = Path(engine_dir).resolve()
    engine = read_engine(engine_dir)
    cross_check(engine, spec)
    engine_path = engine_path or str(engine_dir)
    dest = Path(dest)
    with artifacts.atomic_dir(dest) as staging:
        files = _render_backend(engine, spec, engine_path, staging, engine_dir)
        for path in files:
            if path.name == "config.pbtxt":
                from trtspec.repository import pbtxt

                pbtxt.check(path.read_text(), where=str(path.relative_to(staging)))
        artifacts.write_manifest(staging, MANIFEST_KIND, engine=engine["name"], backend=engine["backend"],
                                 mode=engine["mode"], engine_dir=engine_path,
                                 models=sorted(p.name for p in staging.iterdir() if p.is_dir()))
        relative = [path.relative_to(staging) for path in files]
    return [dest / path for path in relative]


def _render_backend(engine: dict[str, Any], spec: Any, engine_path: str, staging: Path,
                    engine_dir: Path) -> list[Path]:
    from trtspec import backends

    backend = engine["backend"]
    if backend in backends.BACKENDS:  # the table names each backend's renderer
        return backends.resolve(backends.row(backend).renderer)(engine, spec, engine_path, staging, engine_dir)
    raise IncompatibleArtifactError(f"engine {engine.get('name')}: unknown backend {backend!r}")


def models(repository: str | Path) -> list[str]:
    """The model names in a rendered repository."""
    manifest = artifacts.read_manifest(Path(repository)) or {}
    return list(manifest.get("models", []))
