"""`deploy --target k8s` manifests loaded by the official Kubernetes Python client's models.

Each manifest is deserialized into the client's typed model (V1Deployment, V1Service) and
serialized back: the round trip must give the manifest unchanged, so a misspelt field (the client
drops keys it does not know), a wrong type (the models refuse it) or a value in the wrong place
fails here. What the deployment promises is then read from the typed objects.
"""

from __future__ import annotations

import json

import pytest
import yaml

from trtspec.serve import k8s

KINDS = {("apps/v1", "Deployment"): "V1Deployment", ("v1", "Service"): "V1Service"}


def _load(manifest: dict):
    from kubernetes import client

    api = client.ApiClient()
    model = api.deserialize(json.dumps(manifest), KINDS[(manifest["apiVersion"], manifest["kind"])], "application/json")
    assert api.sanitize_for_serialization(model) == manifest, "a field the Kubernetes API does not know, or mistyped"
    return model


@pytest.fixture(params=["cpu", "trtllm-tp2"])
def spec(request, tmp_path, tiny_llama, spec_factory):
    if request.param == "cpu":
        return spec_factory(tmp_path, tiny_llama)
    return spec_factory(tmp_path, tiny_llama, backend="trtllm", mode="ngram", build={"tp_size": 2})


def test_manifests_are_valid_kubernetes_objects(spec):
    manifests = k8s.k8s_manifests(spec, "tiny-engine")
    deployment, service = (_load(m) for m in manifests)
    assert [m["kind"] for m in yaml.safe_load_all(k8s.manifests_yaml(manifests))] == ["Deployment", "Service"]
    pod = deployment.spec.template
    assert deployment.spec.selector.match_labels == pod.metadata.labels == service.spec.selector
    (container,) = pod.spec.containers
    gpus = 2 if spec.build.backend != "cpu" else 0
    assert (container.resources.limits or {}).get("nvidia.com/gpu", "0") == str(gpus)
    assert {p.container_port for p in container.ports} == {p.port for p in service.spec.ports} == \
        {spec.serve.http_port, spec.serve.grpc_port, spec.serve.metrics_port}
    assert {m.name for m in container.volume_mounts} <= {v.name for v in pod.spec.volumes}
    assert {"/models", "/engines/tiny-engine", "/dev/shm"} <= {m.mount_path for m in container.volume_mounts}
    assert pod.metadata.annotations["prometheus.io/port"] == str(spec.serve.metrics_port)
    assert pod.metadata.annotations.get("trtspec.dev/base-image") == (
        None if spec.build.backend == "cpu" else "nvcr.io/nvidia/tritonserver:26.07-trtllm-python-py3")


def test_probes_see_a_dead_stub_and_give_loading_time(spec):
    """Readiness and startup on /v2/health/ready; liveness is a one-token inference (the e2e
    test_liveness_probe_catches_a_dead_stub_without_a_supervisor runs this exact command)."""
    container = _load(k8s.k8s_manifests(spec, "tiny-engine")[0]).spec.template.spec.containers[0]
    assert container.readiness_probe.http_get.path == container.startup_probe.http_get.path == "/v2/health/ready"
    assert container.startup_probe.period_seconds * container.startup_probe.failure_threshold >= \
        max(300, spec.serve.startup_timeout_s)
    assert container.liveness_probe.var_exec.command == \
        ["trtspec", "deploy", "status", "--url", f"127.0.0.1:{spec.serve.grpc_port}", "--timeout", "30"]
    assert container.liveness_probe.timeout_seconds > 30


def test_a_misspelt_field_fails_the_round_trip(spec):
    deployment = k8s.k8s_manifests(spec, "tiny-engine")[0]
    deployment["spec"]["template"]["spec"]["containers"][0]["livenesProbe"] = {"httpGet": {"path": "/"}}
    with pytest.raises(AssertionError, match="does not know"):
        _load(deployment)


@pytest.mark.parametrize("backend", ["cpu", "trtllm"])
def test_openai_port_is_exposed_by_the_container_and_the_service(tmp_path, tiny_llama, spec_factory, backend):
    spec = spec_factory(tmp_path, tiny_llama, backend=backend, mode="ngram", serve={"openai_port": 18298})
    deployment, service = (_load(m) for m in k8s.k8s_manifests(spec, "tiny-engine"))
    (container,) = deployment.spec.template.spec.containers
    assert {p.name: p.container_port for p in container.ports}["openai"] == 18298
    assert {p.name: p.port for p in service.spec.ports}["openai"] == 18298
    server = "trtspec.serve.openai_app" if backend == "cpu" else "trtllm-serve serve /engines/tiny-engine"
    assert server in container.command[-1] and "--port 18298" in container.command[-1]
