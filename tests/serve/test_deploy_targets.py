"""The deploy-target table (trtspec.serve.targets) and what deploy --dry-run prints from a row."""

from __future__ import annotations

import pytest


def test_every_target_is_a_row_that_says_what_it_does():
    from trtspec.serve import targets

    assert targets.NAMES == ("local", "docker", "k8s", "dynamo", "dynamo-k8s")
    for row in targets.TARGETS.values():
        assert row.starts and row.status_how and row.stop_how and row.refuses
        assert (row.status is None) == (row.stop is None) == (row.recorded is None)
    assert targets.TARGETS["dynamo"].renders_repository is False and targets.TARGETS["local"].renders_repository


def test_unknown_target_is_one_line(tmp_path):
    from trtspec.errors import SpecError
    from trtspec.serve import targets

    with pytest.raises(SpecError, match="not a deploy target; use one of local, docker, k8s, dynamo, dynamo-k8s"):
        targets.get("swarm")


def test_dynamo_dry_run_plans_frontend_and_workers_on_loopback(tmp_path, tiny_llama, spec_factory):
    from trtspec.serve import deploy

    spec = spec_factory(tmp_path, tiny_llama, serve={"openai_port": 18777, "dynamo": {"workers": 3,
                                                                                        "router": "round-robin"}})
    plan = deploy.dry_run(spec, tmp_path / "engines" / "tiny-ngram-cpu", "dynamo", None)
    lines = plan.command.splitlines()
    assert plan.files == []  # the workers load the engine itself: no Triton repository
    assert "DYN_DISCOVERY_BACKEND=file" in lines[0] and "DYN_TCP_RPC_HOST=127.0.0.1" in lines[0]
    assert "-m dynamo.frontend --http-host 127.0.0.1 --http-port 18777 --router-mode round-robin" in lines[1]
    assert "--migration-limit 3" in lines[1]
    workers = [line for line in lines if "trtspec.serve.dynamo.worker" in line]
    assert len(workers) == 3 and all("--no-kv-events" in w for w in workers)
    assert not any(line.startswith("warning") for line in lines)  # no KV events: nothing on 0.0.0.0
    kv = spec_factory(tmp_path, tiny_llama)
    assert deploy.dry_run(kv, tmp_path / "e", "dynamo", None).command.splitlines()[-1].startswith(
        "warning: Dynamo's ZeroMQ KV-event publishers")


def test_dynamo_refuses_gpu_backends_in_one_line(tmp_path, tiny_llama, spec_factory):
    from trtspec.errors import SpecError
    from trtspec.serve import deploy

    spec = spec_factory(tmp_path, tiny_llama, backend="trtllm")
    with pytest.raises(SpecError, match="use --target dynamo-k8s") as error:
        deploy.dry_run(spec, tmp_path / "e", "dynamo", None)
    assert "\n" not in str(error.value)


def test_status_without_a_stack_is_the_local_row(tmp_path, tiny_llama, spec_factory):
    from trtspec.artifacts import Layout
    from trtspec.serve import targets

    layout = Layout.from_spec(spec_factory(tmp_path, tiny_llama))
    assert targets.running(layout).name == "local"
    path = layout.server_dir / "dynamo" / "stack.json"
    path.parent.mkdir(parents=True)
    path.write_text("{}")
    assert targets.running(layout).name == "dynamo"
