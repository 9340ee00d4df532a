"""Deploy targets as a table, like modes and backends: a row per target says what it starts or writes,
how `deploy status` and `deploy stop` reach it, and what it refuses. trtspec.serve.deploy walks a row
and never branches on a target's name.

| target | starts or writes | status / stop | refuses | speaks |
|---|---|---|---|---|
| local | one supervised tritonserver here (+ the OpenAI frontend) | server.json, supervisor, probe / SIGTERM | a second server on its ports | triton |
| docker | one `docker run` of the image | `docker ps` / `docker stop` | - | triton |
| k8s | Deployment + Service manifests, applied where kubectl is | `kubectl get` / `kubectl delete -f` | - | triton |
| dynamo | a Dynamo frontend + serve.dynamo.workers trtspec workers here | stack.json, /health, worker /metrics / SIGTERM | GPU backends; Dynamo missing | openai |
| dynamo-k8s | a DynamoGraphDeployment (+ engine-args ConfigMap); --apply applies | `kubectl get dgd` / `kubectl delete -f` | what the 1.3 release removed | openai (`bench --openai-url`) |
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from trtspec.artifacts import Layout

Say = Callable[[str], None]


@dataclass(frozen=True)
class Target:
    name: str
    starts: str                 # what it starts or writes
    status_how: str             # how `deploy status` reaches it
    stop_how: str               # how `deploy stop` reaches it
    refuses: str                # what it refuses, in words (check() raises the one line)
    renders_repository: bool    # a Triton model repository is rendered first
    in_container: bool          # the engine is mounted at launch.CONTAINER_ENGINES
    plan: Callable[[Any, Path, str | None, Layout], str]            # the dry run's command or manifests
    start: Callable[[Any, Path, str | None, Layout, Say, bool], dict[str, Any]]  # ..., say, apply
    check: Callable[[Any], None] | None = None                      # refusals, before anything runs
    status: Callable[..., dict[str, Any]] | None = None             # (layout, probe=, probe_timeout_s=)
    stop: Callable[[Layout], dict[str, Any]] | None = None
    recorded: Callable[[Layout], bool] | None = None                # a record of it exists in this workdir
    # what infer, bench and tune --served send requests to: Triton's gRPC, or OpenAI's API (a Dynamo
    # frontend: trtspec.serve.dynamo.ask, trtspec.bench.openai_target)
    speaks: str = "triton"


# -- local ---------------------------------------------------------------------------------------

def _local_plan(spec: Any, engine: Path, image: str | None, layout: Layout) -> str:
    from trtspec import subproc
    from trtspec.serve import launch, server

    command = subproc.format_command(launch.local_command(spec, server.find_tritonserver(), layout.repository,
                                                          layout.backend_dir.resolve()))
    if spec.serve.openai_port:
        from trtspec.serve.openai_frontend import command as openai_command

        command += "\n" + subproc.format_command(openai_command(spec))
    return command


def _local_check_free(spec: Any, layout: Layout) -> None:
    from trtspec.errors import ServerError
    from trtspec.serve import server

    current = server.status(layout, probe=False)
    if current["running"] or current.get("supervised"):
        raise ServerError(f"a trtspec tritonserver is already running (pid {current.get('pid')})",
                          fix="`trtspec deploy stop` first")


def _local_start(spec: Any, engine: Path, image: str | None, layout: Layout, say: Say, apply: bool) -> dict[str, Any]:
    from trtspec.serve import server

    if spec.build.backend == "trtllm":  # the container's probe: the installed release knows every key written
        from trtspec.serve.probe import check_before_start

        say(check_before_start(engine))
    say(f"repository: {layout.repository}; starting tritonserver ...")
    report = server.start_local(spec, layout.repository, layout)
    return {**report, "grpc_url": f"{spec.serve.host}:{spec.serve.grpc_port}"}


def _local_status(layout: Layout, **probe: Any) -> dict[str, Any]:
    from trtspec.serve import server

    return server.status(layout, **probe)


def _local_stop(layout: Layout) -> dict[str, Any]:
    from trtspec.serve import server

    return server.stop_local(layout)


# -- docker and k8s ------------------------------------------------------------------------------

def _docker_plan(spec: Any, engine: Path, image: str | None, layout: Layout) -> str:
    from trtspec import subproc
    from trtspec.serve import launch

    return subproc.format_command(launch.docker_command(spec, layout.repository, engine, image))


def _docker_start(spec: Any, engine: Path, image: str | None, layout: Layout, say: Say, apply: bool) -> dict[str, Any]:
    from trtspec import subproc
    from trtspec.serve import launch

    command = launch.docker_command(spec, layout.repository, engine, image)
    result = subproc.run(command, timeout=120)
    return {"command": subproc.format_command(command), "container": result.stdout.strip()}


def _k8s_plan(spec: Any, engine: Path, image: str | None, layout: Layout) -> str:
    from trtspec.serve import k8s

    return k8s.manifests_yaml(k8s.k8s_manifests(spec, engine.name, image))


def _k8s_start(spec: Any, engine: Path, image: str | None, layout: Layout, say: Say, apply: bool) -> dict[str, Any]:
    """Write the manifests under <workdir>/server/k8s/ and `kubectl apply` them where kubectl is."""
    import shutil

    from trtspec import subproc

    path = layout.server_dir / "k8s" / "trtspec.yaml"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(_k8s_plan(spec, engine, image, layout))
    applied = "not applied (kubectl not found): kubectl apply -f " + str(path)
    if shutil.which("kubectl"):
        subproc.run(["kubectl", "apply", "-f", str(path)], timeout=120)
        applied = "applied with kubectl"
    return {"manifests": str(path), "applied": applied}


# -- dynamo (here) and dynamo-k8s (a cluster) ------------------------------------------------------------

def _cpu_only(spec: Any) -> None:
    from trtspec.errors import SpecError

    if spec.build.backend != "cpu":
        raise SpecError([f"build.backend: deploy --target dynamo runs trtspec cpu workers on this machine, "
                         f"{spec.build.backend} needs GPUs (got {spec.build.backend}); use --target dynamo-k8s "
                         "for TensorRT-LLM workers"])


def _dynamo_plan(spec: Any, engine: Path, image: str | None, layout: Layout) -> str:
    from trtspec.serve.dynamo import launcher

    plan = launcher.plan(spec, engine)
    env = " ".join(f"{key}={value}" for key, value in plan["env"].items())
    lines = [f"env: {env}", plan["frontend"], *plan["workers"]]
    warning = launcher.exposure_warning(spec)
    return "\n".join(lines + ([warning] if warning else []))


def _dynamo_start(spec: Any, engine: Path, image: str | None, layout: Layout, say: Say, apply: bool) -> dict[str, Any]:
    from trtspec.serve.dynamo import launcher

    warning = launcher.exposure_warning(spec)
    if warning:
        say(warning)
    say(f"starting a Dynamo frontend on {spec.serve.host}:{launcher.http_port(spec)} (router "
        f"{spec.serve.dynamo.router}) and {spec.serve.dynamo.workers} trtspec workers ...")
    return launcher.start(spec, engine, layout)


def _dynamo_status(layout: Layout, **probe: Any) -> dict[str, Any]:
    from trtspec.serve.dynamo import launcher

    return launcher.status(layout)


def _dynamo_stop(layout: Layout) -> dict[str, Any]:
    from trtspec.serve.dynamo import launcher

    return launcher.stop(layout)


def _dynamo_recorded(layout: Layout) -> bool:
    from trtspec.serve.dynamo import launcher

    return launcher.record_path(layout).exists()


def _graph_refusals(spec: Any) -> None:
    from trtspec.builders import contracts
    from trtspec.serve.dynamo import graph

    graph.refuse(spec, contracts.for_dynamo(spec.serve.dynamo.release))


# The dynamo-k8s row calls the graph writer (trtspec.serve.dynamo.graph: graph_manifests, write).
def _graph_plan(spec: Any, engine: Path, image: str | None, layout: Layout) -> str:
    from trtspec.serve.dynamo import graph

    return graph.graph_yaml(graph.graph_manifests(spec, engine, image))


def _graph_start(spec: Any, engine: Path, image: str | None, layout: Layout, say: Say, apply: bool) -> dict[str, Any]:
    from trtspec.serve.dynamo import graph

    return graph.write(spec, layout.server_dir, engine, image, apply=apply)


TARGETS: dict[str, Target] = {row.name: row for row in (
    Target("local", "one supervised tritonserver on this machine (and the OpenAI frontend with serve.openai_port)",
           "server.json, the supervisor's pid and a one-token gRPC probe", "SIGTERM to the supervisor",
           "a second server on the same ports or workdir", True, False, _local_plan, _local_start,
           status=_local_status, stop=_local_stop, recorded=lambda layout: layout.server_pid.exists()),
    Target("docker", "one `docker run` of the image, repository and engine mounted",
           "not tracked: `docker ps`, then `deploy status --url HOST:GRPC_PORT`", "`docker stop <container>`",
           "nothing beyond the spec's checks", True, True, _docker_plan, _docker_start),
    Target("k8s", "Deployment + Service manifests under <workdir>/server/k8s/, applied where kubectl is",
           "`kubectl get deploy`, then `deploy status --url`", "`kubectl delete -f <manifests>`",
           "nothing beyond the spec's checks", True, True, _k8s_plan, _k8s_start),
    Target("dynamo", "an NVIDIA Dynamo frontend (OpenAI API, router serve.dynamo.router) and serve.dynamo.workers "
           "trtspec workers on this machine, under one supervisor",
           "stack.json, the frontend's /health and each worker's /metrics", "SIGTERM to the supervisor",
           "GPU backends (use dynamo-k8s); no Dynamo installed (`make dynamo`)", False, False, _dynamo_plan,
           _dynamo_start, check=_cpu_only, status=_dynamo_status, stop=_dynamo_stop, recorded=_dynamo_recorded,
           speaks="openai"),
    Target("dynamo-k8s", "a DynamoGraphDeployment (+ the LLM-API options' ConfigMap) under "
           "<workdir>/server/dynamo-k8s/; --apply applies it with kubectl",
           "`kubectl get dynamographdeployment`", "`kubectl delete -f <graph.yaml>`",
           "what the pinned TensorRT-LLM 1.3 release removed (trtllm-engine, Medusa, lookahead, eagle_choices)",
           False, True, _graph_plan, _graph_start, check=_graph_refusals, speaks="openai"),
)}
NAMES = tuple(TARGETS)


def get(name: str) -> Target:
    from trtspec.errors import SpecError

    if name not in TARGETS:
        raise SpecError([f"--target: {name!r} is not a deploy target; use one of {', '.join(NAMES)}"])
    return TARGETS[name]


def running(layout: Layout) -> Target:
    """The row whose record this workdir holds (a Dynamo stack, else the local server)."""
    for row in TARGETS.values():
        if row.recorded is not None and row.recorded(layout) and row.name != "local":
            return row
    return TARGETS["local"]
