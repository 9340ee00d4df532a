"""`trtspec deploy [stop|status]`: render the model repository and start tritonserver."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import click

from trtspec.cli._options import config_option, dry_run_option, emit_json, json_option, resolve_spec

EXAMPLES = """\b
Examples:
  trtspec deploy                         # render model_repository/, start tritonserver on 127.0.0.1
  trtspec deploy -c trtspec.yaml --dry-run
  trtspec deploy --target docker         # print/run the docker run command for the image
  trtspec deploy --target k8s --dry-run  # Deployment + Service manifests
  trtspec deploy status --json          # state, restarts, and a one-token probe
  trtspec deploy stop
"""


def _engine_dir(spec: Any, engine: str | None) -> Path:
    from trtspec import artifacts
    from trtspec.artifacts import Layout

    if engine:
        return Path(engine)
    name = artifacts.engine_name(spec.model_name, spec.speculative.mode, spec.build.backend, spec.quantization.fp8)
    return Layout.from_spec(spec).engine_dir(name)


@click.group(invoke_without_command=True, epilog=EXAMPLES)
@config_option
@click.option("--target", type=click.Choice(["local", "docker", "k8s"]), default="local", show_default=True,
              help="Where the server runs.")
@click.option("--engine", "engine", type=click.Path(file_okay=False), default=None,
              help="Engine directory (default: the one the spec builds, engines/<name>).")
@click.option("--image", default=None, help="Container image for docker/k8s (default trtspec:cpu or trtspec:gpu).")
@click.option("--openai-port", type=click.IntRange(0, 65535), default=None,
              help="Serve the OpenAI-compatible API on this port (serve.openai_port; 0 turns it off).")
@dry_run_option
@json_option
@click.pass_context
def deploy(ctx: click.Context, config_path: str | None, target: str, engine: str | None, image: str | None,
           openai_port: int | None, dry_run: bool, as_json: bool) -> None:
    """Render the Triton model repository for the engine's backend and start the server.

    The repository is rendered into a temporary directory and swapped in with one rename, so a
    failed or interrupted deploy leaves the previous one intact. Locally the server binds
    serve.host (127.0.0.1 by default), logs to <workdir>/server/tritonserver.log and serves when
    this command returns (a one-token inference answered); a supervisor process then watches it
    and restarts it per serve.restart. Ctrl-C while waiting stops what was started.
    """
    ctx.ensure_object(dict)
    ctx.obj["config_path"] = config_path
    if ctx.invoked_subcommand is not None:
        return
    from trtspec import repository
    from trtspec.artifacts import Layout
    from trtspec.errors import ServerError
    from trtspec.serve import launch, server

    spec = resolve_spec(config_path, serve__openai_port=openai_port)
    layout = Layout.from_spec(spec)
    engine_dir = _engine_dir(spec, engine)
    engine_path = None if target == "local" else f"{launch.CONTAINER_ENGINES}/{engine_dir.name}"
    if target == "local" and spec.serve.exposed:  # on stderr, so --json output stays one document
        click.secho(f"warning: serve.host {spec.serve.host} {'would listen' if dry_run else 'listens'} beyond this "
                    f"machine and Triton has no authentication: anyone who reaches ports {spec.serve.http_port}, "
                    f"{spec.serve.grpc_port}, {spec.serve.metrics_port}"
                    f"{f' and {spec.serve.openai_port} (OpenAI API)' if spec.serve.openai_port else ''} can use the model",
                    fg="yellow", err=True)
    if dry_run:
        _dry_run(spec, layout, engine_dir, engine_path, target, image, as_json)
        return
    if target == "local":
        current = server.status(layout, probe=False)
        if current["running"] or current.get("supervised"):
            raise ServerError(f"a trtspec tritonserver is already running (pid {current.get('pid')})",
                              fix="`trtspec deploy stop` first")
    files = repository.render(engine_dir, spec, layout.repository, engine_path=engine_path)
    report: dict[str, Any] = {"target": target, "engine": str(engine_dir), "repository": str(layout.repository),
                              "files": [str(f) for f in files]}
    if target == "local":
        if spec.build.backend == "trtllm":  # the container's probe: the installed release knows every key written
            from trtspec.serve.probe import check_before_start

            line = check_before_start(engine_dir)
            if not as_json:
                click.echo(line)
        if not as_json:
            click.echo(f"repository: {layout.repository} ({len(files)} files); starting tritonserver ...")
        record = server.start_local(spec, layout.repository, layout)
        report.update(record)
        report["grpc_url"] = f"{spec.serve.host}:{spec.serve.grpc_port}"
        if not as_json:
            openai = f", openai http://{spec.serve.host}:{spec.serve.openai_port}/v1" if spec.serve.openai_port else ""
            click.echo(f"ready in {record['startup_s']} s (a one-token probe answered): grpc {spec.serve.host}:"
                       f"{spec.serve.grpc_port}, http {spec.serve.http_port}, metrics {spec.serve.metrics_port}{openai} "
                       f"(pid {record['pid']}, supervisor {record['supervisor_pid']}, restart: {spec.serve.restart})\n"
                       f"log: {record['log']}\nnext: trtspec infer \"What is the capital of France?\"")
    elif target == "docker":
        from trtspec import subproc

        command = launch.docker_command(spec, layout.repository, engine_dir, image)
        result = subproc.run(command, timeout=120)
        report.update(command=subproc.format_command(command), container=result.stdout.strip())
        if not as_json:
            click.echo(f"container {result.stdout.strip()[:12]} started; wait for "
                       f"http://{spec.serve.host}:{spec.serve.http_port}/v2/health/ready")
    else:
        report.update(_k8s(spec, layout, engine_dir, image, apply=True))
        if not as_json:
            click.echo(f"manifests: {report['manifests']}; {report['applied']}")
    if as_json:
        emit_json(report)


def _k8s(spec: Any, layout: Any, engine_dir: Path, image: str | None, *, apply: bool) -> dict[str, Any]:
    import shutil

    from trtspec import subproc
    from trtspec.serve import k8s

    text = k8s.manifests_yaml(k8s.k8s_manifests(spec, engine_dir.name, image))
    path = layout.server_dir / "k8s" / "trtspec.yaml"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)
    applied = "not applied (kubectl not found): kubectl apply -f " + str(path)
    if apply and shutil.which("kubectl"):
        subproc.run(["kubectl", "apply", "-f", str(path)], timeout=120)
        applied = "applied with kubectl"
    return {"manifests": str(path), "applied": applied}


def _dry_run(spec: Any, layout: Any, engine_dir: Path, engine_path: str | None, target: str, image: str | None,
             as_json: bool) -> None:
    """Render into a throwaway directory to check everything, print what deploy would do."""
    import tempfile

    from trtspec import repository, subproc
    from trtspec.serve import k8s, launch, server

    with tempfile.TemporaryDirectory() as scratch:
        files = repository.render(engine_dir, spec, Path(scratch) / "repo", engine_path=engine_path)
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
        command = subproc.format_command(launch.docker_command(spec, layout.repository, engine_dir, image))
    else:
        command = k8s.manifests_yaml(k8s.k8s_manifests(spec, engine_dir.name, image))
    if as_json:
        emit_json({"target": target, "repository": str(layout.repository), "files": names, "command": command,
                   **({"fill_template": fills} if fills else {})})
        return
    click.echo(f"would render {layout.repository}/ from {engine_dir}:")
    for name in names:
        click.echo(f"  {name}")
    if fills:
        click.echo(f"at start, fill_template.sh copies {fills['container_models']} and fills it "
                   "(only the keys each template has):")
        for call in fills["calls"]:
            click.echo(f"  {call}")
    click.echo("would run:" if target != "k8s" else "would apply:")
    click.echo(command)


def _fills(repo: Path) -> dict[str, Any] | None:
    """trtllm-engine: fills.json (per-model key:value lists) and the fill_template.py calls."""
    import json

    from trtspec.repository import trtllm_engine

    path = repo / trtllm_engine.FILLS_JSON
    if not path.exists():
        return None
    data = json.loads(path.read_text())
    return {**data, "calls": trtllm_engine.fill_calls(data["models"])}


@deploy.command(epilog="\b\nExamples:\n  trtspec deploy stop\n  trtspec deploy stop -c trtspec.yaml --json")
@config_option
@json_option
@click.pass_context
def stop(ctx: click.Context, config_path: str | None, as_json: bool) -> None:
    """Stop the tritonserver this workdir started (and no other process)."""
    from trtspec.artifacts import Layout
    from trtspec.serve import server

    spec = resolve_spec(config_path or ctx.obj.get("config_path"))
    result = server.stop_local(Layout.from_spec(spec))
    if as_json:
        emit_json(result)
    elif result["stopped"]:
        click.echo(f"stopped tritonserver (pid {result['pid']})")
    else:
        click.echo(f"nothing stopped: {result['reason']}")


@deploy.command(epilog="\b\nExamples:\n  trtspec deploy status\n  trtspec deploy status --json --no-probe\n"
                      "  trtspec deploy status --url 127.0.0.1:8001     # any server, no spec (k8s liveness)")
@config_option
@click.option("--probe/--no-probe", default=True, show_default=True,
              help="Send a one-token inference: the only check that sees a dead model stub.")
@click.option("--url", default=None, help="Probe the server at this gRPC host:port instead of this workdir's.")
@click.option("--timeout", "timeout_s", type=click.FloatRange(min=1), default=30.0, show_default=True,
              help="Seconds the probe waits for its token.")
@json_option
@click.pass_context
def status(ctx: click.Context, config_path: str | None, probe: bool, url: str | None, timeout_s: float,
           as_json: bool) -> None:
    """Say whether the server serves: state, supervisor, restarts, ports, log, and a one-token probe.

    Exits 0 when the server serves (with --no-probe: when it runs and says ready), 1 otherwise.
    """
    from trtspec.artifacts import Layout
    from trtspec.serve import server

    if url:
        from trtspec.client.triton import probe as one_token

        result = {"url": url, **one_token(url, timeout_s=timeout_s)}
        if as_json:
            emit_json(result)
        else:
            click.echo(f"serving: {result['model']} answered in {result['seconds']} s" if result["ok"]
                       else f"not serving: {result['error']}")
        ctx.exit(0 if result["ok"] else 1)
    spec = resolve_spec(config_path or ctx.obj.get("config_path"))
    result = server.status(Layout.from_spec(spec), probe=probe, probe_timeout_s=timeout_s)
    if as_json:
        emit_json(result)
    else:
        click.echo(_status_line(result))
    ctx.exit(0 if result["ready"] else 1)


def _status_line(result: dict[str, Any]) -> str:
    state = result.get("state")
    if state == "stopped":
        return f"not running ({result['reason']})"
    if state in ("dead", "restarting", "unsupervised") or not result["running"]:
        return f"{state or 'not running'}: {result.get('reason') or 'process gone'}\nlog: {result.get('log')}"
    if state == "starting":
        last = (result.get("failures") or [{}])[-1].get("reason")
        return (f"starting (restarts {result.get('restarts', 0)}{'; last failure: ' + last if last else ''}): "
                f"pid {result['pid']}\nlog: {result['log']}")
    answer = result.get("probe")
    if answer and not answer["ok"]:
        head = f"running, not serving (one-token probe: {answer['error']})"
    elif answer:
        head = f"serving (one-token probe {answer['seconds']} s)"
    else:
        head = "ready (not probed)" if result["ready"] else "running, not ready"
    return (f"{head}: pid {result['pid']}, supervisor {result.get('supervisor_pid')}, restarts "
            f"{result.get('restarts', 0)}, grpc {result['host']}:{result['grpc_port']}, http {result['http_port']}, "
            f"metrics {result['metrics_port']}{_openai_part(result)}, up {result['uptime_s']} s\nlog: {result['log']}")


def _openai_part(result: dict[str, Any]) -> str:
    openai = result.get("openai")
    if not openai:
        return ""
    state = "serving" if openai["health"] == 200 else "not serving" if openai["running"] else "gone"
    return f", openai {result['host']}:{openai['port']} ({state})"
