"""`trtspec deploy`'s stage: what a deploy would do (a pure plan) and doing it (a thin executor).

`dry_run` renders the repository into a throwaway directory and returns the plan: the files, the
command line (local tritonserver, docker run) or the Kubernetes manifests, and for trtllm-engine
the fill_template.py calls. `deploy` renders the repository for real and starts the server where
`target` says: locally under the supervisor (trtspec.serve.server), one `docker run`, or the
manifests written under <workdir>/server/k8s/ and applied with kubectl when it is on PATH.
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
    """Where the server finds the engine: None locally (its own path), the mount in a container."""
    return None if target == "local" else f"{launch.CONTAINER_ENGINES}/{engine.name}"


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
    """Render into a throwaway directory to check everything; return what deploy would do."""
    import tempfile

    from trtspec import repository, subproc
    from trtspec.serve import k8s, server

    layout = Layout.from_spec(spec)
    with tempfile.TemporaryDirectory() as scratch:
        files = repository.render(engine, spec, Path(scratch) / "repo", engine_path=engine_path(target, engine))
        names = [str(f.relative_to(Path(scratch) / "repo")) for f in files]
        fills = _fills(Path(scratch) / "repo")
    if target == "local":
        binary = server.find_tritonserver()
        command = subproc.format_command(launch.local_command(spec, binary, layout.repository,
                                                              layout.backend_dir.resolve()))
        if spec.serve.openai_port:
            from trtspec.serve.openai_frontend import command as openai_command

            command += "\n" + subproc.format_command(openai_command(spec))
    elif target == "docker":
        command = subproc.format_command(launch.docker_command(spec, layout.repository, engine, image))
    else:
        command = k8s.manifests_yaml(k8s.k8s_manifests(spec, engine.name, image))
    return DryRun(target, layout.repository, engine, names, command, fills)


def _fills(repo: Path) -> dict[str, Any] | None:
    """trtllm-engine: fills.json (per-model key:value lists) and the fill_template.py calls."""
    from trtspec.repository import trtllm_engine

    path = repo / trtllm_engine.FILLS_JSON
    if not path.exists():
        return None
    data = artifacts.read_json(path)
    return {**data, "calls": trtllm_engine.fill_calls(data["models"])}


def deploy(spec: Any, engine: Path, target: str, image: str | None,
           on_line: Callable[[str], None] | None = None) -> dict[str, Any]:
    """Render the repository (one rename swaps it in) and start the server at `target`; the report."""
    from trtspec import repository
    from trtspec.errors import ServerError
    from trtspec.serve import server

    say = on_line or (lambda line: None)
    layout = Layout.from_spec(spec)
    if target == "local":
        current = server.status(layout, probe=False)
        if current["running"] or current.get("supervised"):
            raise ServerError(f"a trtspec tritonserver is already running (pid {current.get('pid')})",
                              fix="`trtspec deploy stop` first")
    files = repository.render(engine, spec, layout.repository, engine_path=engine_path(target, engine))
    report: dict[str, Any] = {"target": target, "engine": str(engine), "repository": str(layout.repository),
                              "files": [str(f) for f in files]}
    if target == "local":
        if spec.build.backend == "trtllm":  # the container's probe: the installed release knows every key written
            from trtspec.serve.probe import check_before_start

            say(check_before_start(engine))
        say(f"repository: {layout.repository} ({len(files)} files); starting tritonserver ...")
        report.update(server.start_local(spec, layout.repository, layout))
        report["grpc_url"] = f"{spec.serve.host}:{spec.serve.grpc_port}"
    elif target == "docker":
        from trtspec import subproc

        command = launch.docker_command(spec, layout.repository, engine, image)
        result = subproc.run(command, timeout=120)
        report.update(command=subproc.format_command(command), container=result.stdout.strip())
    else:
        report.update(apply_k8s(spec, layout, engine, image))
    return report


def apply_k8s(spec: Any, layout: Layout, engine: Path, image: str | None) -> dict[str, str]:
    """Write the manifests under <workdir>/server/k8s/ and `kubectl apply` them where kubectl is."""
    import shutil

    from trtspec import subproc
    from trtspec.serve import k8s

    text = k8s.manifests_yaml(k8s.k8s_manifests(spec, engine.name, image))
    path = layout.server_dir / "k8s" / "trtspec.yaml"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)
    applied = "not applied (kubectl not found): kubectl apply -f " + str(path)
    if shutil.which("kubectl"):
        subproc.run(["kubectl", "apply", "-f", str(path)], timeout=120)
        applied = "applied with kubectl"
    return {"manifests": str(path), "applied": applied}
