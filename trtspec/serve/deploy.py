"""`trtspec deploy`'s stage: what a deploy would do (a pure plan) and doing it (a thin executor).

`dry_run` renders the repository into a throwaway directory and returns the plan: the files, the
command line (local tritonserver, docker run) or the Kubernetes manifests, and for trtllm-engine
the fill_template.py calls. `deploy` renders the repository for real (where the target serves one) and starts or writes what the
target's row in trtspec.serve.targets says: locally under the supervisor (trtspec.serve.server), one
`docker run`, manifests applied with kubectl, a Dynamo stack here, or a DynamoGraphDeployment.
Commands run only through trtspec.subproc. Progress goes out through `on_line`; this module
prints nothing (cli/deploy_cmd.py draws).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from trtspec import artifacts
from trtspec.artifacts import Layout
from trtspec.serve import launch


def engine_dir(spec: Any, engine: str | None) -> Path:
    """--engine, else the directory `trtspec build` writes for the spec (engines/<name>)."""
    if engine:
        return Path(engine)
    name = artifacts.engine_name(spec.model_name, spec.speculative.mode, spec.build.backend, spec.quantization.fp8)
    return Layout.from_spec(spec).engine_dir(name)


def engine_path(target: str, engine: Path) -> str | None:
    """Where the server finds the engine: None here (its own path), the mount in a container."""
    from trtspec.serve import targets

    return f"{launch.CONTAINER_ENGINES}/{engine.name}" if targets.get(target).in_container else None


@dataclass(frozen=True)
class DryRun:
    """What `deploy` would do: the files it would render, the command (or manifests) it would run."""

    target: str
    repository: Path
    engine_dir: Path
    files: list[str]                # relative to the repository
    command: str                    # the command line(s), or for k8s the manifests' YAML
    fills: dict[str, Any] | None    # trtllm-engine: fills.json and the fill_template.py calls

    def to_dict(self) -> dict[str, Any]:
        return {"target": self.target, "repository": str(self.repository), "files": self.files,
                "command": self.command, **({"fill_template": self.fills} if self.fills else {})}


def dry_run(spec: Any, engine: Path, target: str, image: str | None) -> DryRun:
    """Render into a throwaway directory to check everything (targets that serve a Triton
    repository); return what deploy would do: the target row's command or manifests."""
    import tempfile

    from trtspec import repository
    from trtspec.serve import targets

    row = targets.get(target)
    if row.check is not None:
        row.check(spec)
    layout = Layout.from_spec(spec)
    names: list[str] = []
    fills = None
    if row.renders_repository:
        with tempfile.TemporaryDirectory() as scratch:
            files = repository.render(engine, spec, Path(scratch) / "repo", engine_path=engine_path(target, engine))
            names = [str(f.relative_to(Path(scratch) / "repo")) for f in files]
            fills = _fills(Path(scratch) / "repo")
    return DryRun(target, layout.repository, engine, names, row.plan(spec, engine, image, layout), fills)


def _fills(repo: Path) -> dict[str, Any] | None:
    """trtllm-engine: fills.json (per-model key:value lists) and the fill_template.py calls."""
    from trtspec.repository import trtllm_engine

    path = repo / trtllm_engine.FILLS_JSON
    if not path.exists():
        return None
    data = artifacts.read_json(path)
    return {**data, "calls": trtllm_engine.fill_calls(data["models"])}


def deploy(spec: Any, engine: Path, target: str, image: str | None,
           on_line: Callable[[str], None] | None = None, apply: bool = False) -> dict[str, Any]:
    """Check the target's refusals, render the repository where the target serves one (one rename
    swaps it in), then start or write what the target row says; the report."""
    from trtspec import repository
    from trtspec.serve import targets

    say = on_line or (lambda line: None)
    row = targets.get(target)
    layout = Layout.from_spec(spec)
    if row.check is not None:
        row.check(spec)
    if row.status is not None and row.recorded is not None and row.recorded(layout):
        from trtspec.errors import ServerError

        current = row.status(layout, probe=False)
        if current.get("running") or current.get("supervised"):
            raise ServerError(f"a trtspec {target} deployment is already running in {layout.workdir}",
                              fix="`trtspec deploy stop` first")
    report: dict[str, Any] = {"target": target, "engine": str(engine)}
    if row.renders_repository:
        files = repository.render(engine, spec, layout.repository, engine_path=engine_path(target, engine))
        report.update(repository=str(layout.repository), files=[str(f) for f in files])
    report.update(row.start(spec, engine, image, layout, say, apply))
    return report
