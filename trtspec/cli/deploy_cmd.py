"""`trtspec deploy [stop|status]`: render the model repository and start tritonserver."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any

import click

from trtspec.cli._options import config_option, dry_run_option, emit_json, json_option, resolve_spec
from trtspec.serve.targets import NAMES as TARGET_NAMES

if TYPE_CHECKING:
    from trtspec.serve.deploy import DryRun

EXAMPLES = """\b
Examples:
  trtspec deploy                         # render model_repository/, start tritonserver on 127.0.0.1
  trtspec deploy -c trtspec.yaml --dry-run
  trtspec deploy --target docker         # print/run the docker run command for the image
  trtspec deploy --target k8s --dry-run  # Deployment + Service manifests
  trtspec deploy --target dynamo         # Dynamo frontend + serve.dynamo.workers trtspec workers here
  trtspec deploy --target dynamo-k8s --apply   # a DynamoGraphDeployment, applied with kubectl
  trtspec deploy status --json          # state, restarts, and a one-token probe
  trtspec deploy stop
"""


@click.group(invoke_without_command=True, epilog=EXAMPLES)
@config_option
@click.option("--target", type=click.Choice(TARGET_NAMES), default="local", show_default=True,
              help="Where the server runs (trtspec.serve.targets: local, docker, k8s, dynamo, dynamo-k8s).")
@click.option("--engine", "engine", type=click.Path(file_okay=False), default=None,
              help="Engine directory (default: the one the spec builds, engines/<name>).")
@click.option("--image", default=None, help="Container image for docker/k8s (default trtspec:cpu or trtspec:gpu).")
@click.option("--openai-port", type=click.IntRange(0, 65535), default=None,
              help="Serve the OpenAI-compatible API on this port (serve.openai_port; 0 turns it off).")
@click.option("--apply", is_flag=True, help="dynamo-k8s: `kubectl apply` the graph it writes.")
@dry_run_option
@json_option
@click.pass_context
def deploy(ctx: click.Context, config_path: str | None, target: str, engine: str | None, image: str | None,
           openai_port: int | None, apply: bool, dry_run: bool, as_json: bool) -> None:
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
    from trtspec.serve import deploy as stage

    spec = resolve_spec(config_path, serve__openai_port=openai_port)
    engine_dir = stage.engine_dir(spec, engine)
    if target == "local" and spec.serve.exposed:  # on stderr, so --json output stays one document
        click.secho(f"warning: serve.host {spec.serve.host} {'would listen' if dry_run else 'listens'} beyond this "
                    f"machine and Triton has no authentication: anyone who reaches ports {spec.serve.http_port}, "
                    f"{spec.serve.grpc_port}, {spec.serve.metrics_port}"
                    f"{f' and {spec.serve.openai_port} (OpenAI API)' if spec.serve.openai_port else ''} can use the model",
                    fg="yellow", err=True)
    if dry_run:
        _print_dry_run(stage.dry_run(spec, engine_dir, target, image), as_json)
        return
    say = None if as_json else (lambda line: click.echo(line, err=line.startswith("warning")))
    report = stage.deploy(spec, engine_dir, target, image, on_line=say, apply=apply)
    if as_json:
        emit_json(report)
    elif target == "local":
        openai = f", openai http://{spec.serve.host}:{spec.serve.openai_port}/v1" if spec.serve.openai_port else ""
        click.echo(f"ready in {report['startup_s']} s (a one-token probe answered): grpc {spec.serve.host}:"
                   f"{spec.serve.grpc_port}, http {spec.serve.http_port}, metrics {spec.serve.metrics_port}{openai} "
                   f"(pid {report['pid']}, supervisor {report['supervisor_pid']}, restart: {spec.serve.restart})\n"
                   f"log: {report['log']}\nnext: trtspec infer \"What is the capital of France?\"")
    elif target == "dynamo":
        click.echo(f"ready in {report['startup_s']} s: openai http://{report['host']}:{report['openai_port']}/v1 "
                   f"(Dynamo frontend, router {spec.serve.dynamo.router}), {len(report['workers'])} workers "
                   f"(metrics ports {', '.join(str(w['system_port']) for w in report['workers'])}), supervisor "
                   f"{report['supervisor_pid']}\nlogs: {Path(report['supervisor_log']).parent}\n"
                   f"next: trtspec deploy status")
    elif target == "docker":
        click.echo(f"container {report['container'][:12]} started; wait for "
                   f"http://{spec.serve.host}:{spec.serve.http_port}/v2/health/ready")
    else:
        click.echo(f"manifests: {report['manifests']}; {report['applied']}")


def _print_dry_run(plan: DryRun, as_json: bool) -> None:
    """What deploy would do (trtspec.serve.deploy.DryRun), as JSON or as lines."""
    if as_json:
        emit_json(plan.to_dict())
        return
    if plan.files:
        click.echo(f"would render {plan.repository}/ from {plan.engine_dir}:")
    for name in plan.files:
        click.echo(f"  {name}")
    if plan.fills:
        click.echo(f"at start, fill_template.sh copies {plan.fills['container_models']} and fills it "
                   "(only the keys each template has):")
        for call in plan.fills["calls"]:
            click.echo(f"  {call}")
    click.echo("would apply:" if plan.target.endswith("k8s") else "would run:")
    click.echo(plan.command)


@deploy.command(epilog="\b\nExamples:\n  trtspec deploy stop\n  trtspec deploy stop -c trtspec.yaml --json")
@config_option
@json_option
@click.pass_context
def stop(ctx: click.Context, config_path: str | None, as_json: bool) -> None:
    """Stop the tritonserver this workdir started (and no other process)."""
    from trtspec.artifacts import Layout
    from trtspec.serve import targets

    spec = resolve_spec(config_path or ctx.obj.get("config_path"))
    layout = Layout.from_spec(spec)
    row = targets.running(layout)
    assert row.stop is not None
    result = row.stop(layout)
    if as_json:
        emit_json(result)
    elif result["stopped"]:
        click.echo(f"stopped {'the Dynamo stack' if row.name == 'dynamo' else 'tritonserver'} (pid {result['pid']})")
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

    if url:
        from trtspec.client.triton import probe as one_token

        result = {"url": url, **one_token(url, timeout_s=timeout_s)}
        if as_json:
            emit_json(result)
        else:
            click.echo(f"serving: {result['model']} answered in {result['seconds']} s" if result["ok"]
                       else f"not serving: {result['error']}")
        ctx.exit(0 if result["ok"] else 1)
    from trtspec.serve import targets

    spec = resolve_spec(config_path or ctx.obj.get("config_path"))
    layout = Layout.from_spec(spec)
    row = targets.running(layout)
    assert row.status is not None
    result = row.status(layout, probe=probe, probe_timeout_s=timeout_s)
    if as_json:
        emit_json(result)
    else:
        click.echo(_dynamo_status_line(result) if row.name == "dynamo" else _status_line(result))
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


def _dynamo_status_line(result: dict[str, Any]) -> str:
    if result.get("state") == "stopped":
        return f"not running ({result['reason']})"
    head = (f"{'serving' if result['ready'] else result.get('state') or 'not serving'}: Dynamo frontend "
            f"http://{result['host']}:{result['openai_port']}/v1, {result['registered_workers']} of "
            f"{len(result['workers'])} workers registered, supervisor {result['supervisor_pid']}, up {result['uptime_s']} s")
    lines = [head]
    for worker in result["workers"]:
        served = worker.get("served")
        did = (f"served {served['requests']:.0f} requests, {served['generation_tokens']:.0f} tokens, "
               f"{served['accepted_tokens']:.0f} of {served['draft_tokens']:.0f} draft tokens accepted"
               if served else "no metrics")
        lines.append(f"  worker {worker['index']}: {'running' if worker['running'] else 'down'} pid {worker['pid']}, "
                     f"restarts {worker.get('restarts', 0)}, metrics :{worker['system_port']}, {did}")
    return "\n".join(lines + [f"logs: {Path(result['supervisor_log']).parent}"])


def _openai_part(result: dict[str, Any]) -> str:
    openai = result.get("openai")
    if not openai:
        return ""
    state = "serving" if openai["health"] == 200 else "not serving" if openai["running"] else "gone"
    return f", openai {result['host']}:{openai['port']} ({state})"
