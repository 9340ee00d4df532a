"""Kubernetes manifests for a deployment: a Deployment and a Service, as plain data and YAML.

Pure plans, like trtspec.serve.launch: `k8s_manifests` returns dictionaries, `manifests_yaml` renders
them; `trtspec deploy --target k8s` writes or applies them.
"""

from __future__ import annotations

from typing import Any

from trtspec.serve.launch import CONTAINER_ENGINES, CONTAINER_REPOSITORY, DEFAULT_IMAGE, SHM_SIZE, container_server


def liveness_command(serve: Any) -> list[str]:
    """The exec liveness probe: a one-token inference against the pod's own gRPC port."""
    return ["trtspec", "deploy", "status", "--url", f"127.0.0.1:{serve.grpc_port}", "--timeout", "30"]


def base_image_annotation(spec: Any) -> dict[str, str]:
    """GPU backends: the Triton container the image must be built FROM for the release the engine
    was written for (contract data: 26.07 for TensorRT-LLM 1.2.1), so a pod names its release."""
    if spec.build.backend == "cpu":
        return {}
    from trtspec.builders import contracts

    return {"trtspec.dev/base-image": contracts.for_spec(spec).image}


def k8s_manifests(spec: Any, engine_name: str, image: str | None = None) -> list[dict[str, Any]]:
    """Deployment + Service: GPU limits, startup and readiness on /v2/health/ready, liveness by a
    one-token inference, Prometheus annotations.

    The repository and the engine are expected on a PersistentVolumeClaim `<name>-artifacts`
    holding `model_repository/` and `engines/<engine>/` (rendered with engine_path under /engines).
    """
    serve, backend = spec.serve, spec.build.backend
    name = f"trtspec-{engine_name}"[:63].rstrip("-")
    labels = {"app.kubernetes.io/name": "trtspec", "app.kubernetes.io/instance": name}
    gpus = spec.build.tp_size * spec.build.pp_size if backend != "cpu" else 0
    resources: dict[str, Any] = {"requests": {"cpu": "2", "memory": "8Gi"}}
    if gpus:  # a resource quantity is a string in the Kubernetes API (the client's models refuse an int)
        resources["limits"] = {"nvidia.com/gpu": str(gpus)}
        resources["requests"]["nvidia.com/gpu"] = str(gpus)
    container = {
        "name": "tritonserver", "image": image or DEFAULT_IMAGE[backend],
        "command": ["bash", "-c", container_server(serve, backend, spec, engine_name)],
        "ports": [{"name": "http", "containerPort": serve.http_port}, {"name": "grpc", "containerPort": serve.grpc_port},
                  {"name": "metrics", "containerPort": serve.metrics_port}]
        + ([{"name": "openai", "containerPort": serve.openai_port}] if serve.openai_port else []),
        "readinessProbe": {"httpGet": {"path": "/v2/health/ready", "port": serve.http_port},
                           "initialDelaySeconds": 10, "periodSeconds": 5, "failureThreshold": 3},
        # Loading a large model takes minutes: the startup probe gives it serve.startup_timeout_s
        # (at least 5 minutes) before liveness counts.
        "startupProbe": {"httpGet": {"path": "/v2/health/ready", "port": serve.http_port},
                         "periodSeconds": 10, "failureThreshold": max(30, int(serve.startup_timeout_s // 10) + 1)},
        # /v2/health/live and model-ready stay 200 after the model's Python stub died; a one-token
        # inference does not. trtspec is in both images (Dockerfile).
        "livenessProbe": {"exec": {"command": liveness_command(serve)},
                          "periodSeconds": 30, "timeoutSeconds": 40, "failureThreshold": 3},
        "resources": resources,
        "volumeMounts": [{"name": "artifacts", "mountPath": CONTAINER_REPOSITORY, "subPath": "model_repository"},
                         {"name": "artifacts", "mountPath": f"{CONTAINER_ENGINES}/{engine_name}",
                          "subPath": f"engines/{engine_name}", "readOnly": True},
                         {"name": "dshm", "mountPath": "/dev/shm"}],
    }
    annotations = {"prometheus.io/scrape": "true", "prometheus.io/port": str(serve.metrics_port),
                   "prometheus.io/path": "/metrics", **base_image_annotation(spec)}
    deployment = {
        "apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": name, "labels": labels},
        "spec": {"replicas": 1, "selector": {"matchLabels": labels},
                 "template": {"metadata": {"labels": labels, "annotations": annotations},
                              "spec": {"containers": [container],
                                       "volumes": [{"name": "artifacts", "persistentVolumeClaim":
                                                    {"claimName": f"{name}-artifacts"}},
                                                   {"name": "dshm", "emptyDir": {"medium": "Memory",
                                                                                 "sizeLimit": SHM_SIZE.upper() + "i"}}]}}},
    }
    service = {
        "apiVersion": "v1", "kind": "Service",
        "metadata": {"name": name, "labels": labels, "annotations": annotations},
        "spec": {"selector": labels, "ports": [{"name": p["name"], "port": p["containerPort"],
                                                "targetPort": p["name"]} for p in container["ports"]]},
    }
    return [deployment, service]


def manifests_yaml(manifests: list[dict[str, Any]]) -> str:
    """Manifests as one multi-document YAML, written out in full (no &anchors for shared labels)."""
    import yaml

    class Plain(yaml.SafeDumper):
        def ignore_aliases(self, data: Any) -> bool:
            return True

    return "---\n".join(yaml.dump(m, Dumper=Plain, sort_keys=False) for m in manifests)
