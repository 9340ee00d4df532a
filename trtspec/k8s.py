"""Kubernetes manifests for a deployment: a Deployment and a Service, as plain data and YAML.

Pure plans, like trtspec.launch: `k8s_manifests` returns dictionaries, `manifests_yaml` renders
them; `trtspec deploy --target k8s` writes or applies them.
"""

from __future__ import annotations

from typing import Any

from trtspec.launch import CONTAINER_ENGINES, CONTAINER_REPOSITORY, DEFAULT_IMAGE, SHM_SIZE, container_server


def k8s_manifests(spec: Any, engine_name: str, image: str | None = None) -> list[dict[str, Any]]:
    """Deployment + Service: GPU limits, readiness on /v2/health/ready, Prometheus annotations.

    The repository and the engine are expected on a PersistentVolumeClaim `<name>-artifacts`
    holding `model_repository/` and `engines/<engine>/` (rendered with engine_path under /engines).
    """
    serve, backend = spec.serve, spec.build.backend
    name = f"trtspec-{engine_name}"[:63].rstrip("-")
    labels = {"app.kubernetes.io/name": "trtspec", "app.kubernetes.io/instance": name}
    gpus = spec.build.tp_size * spec.build.pp_size if backend != "cpu" else 0
    resources: dict[str, Any] = {"requests": {"cpu": "2", "memory": "8Gi"}}
    if gpus:
        resources["limits"] = {"nvidia.com/gpu": gpus}
        resources["requests"]["nvidia.com/gpu"] = gpus
    container = {
        "name": "tritonserver", "image": image or DEFAULT_IMAGE[backend],
        "command": ["bash", "-c", container_server(serve, backend)],
        "ports": [{"name": "http", "containerPort": serve.http_port}, {"name": "grpc", "containerPort": serve.grpc_port},
                  {"name": "metrics", "containerPort": serve.metrics_port}],
        "readinessProbe": {"httpGet": {"path": "/v2/health/ready", "port": serve.http_port},
                           "initialDelaySeconds": 10, "periodSeconds": 5, "failureThreshold": 3},
        "livenessProbe": {"httpGet": {"path": "/v2/health/live", "port": serve.http_port},
                          "initialDelaySeconds": 60, "periodSeconds": 10},
        "resources": resources,
        "volumeMounts": [{"name": "artifacts", "mountPath": CONTAINER_REPOSITORY, "subPath": "model_repository"},
                         {"name": "artifacts", "mountPath": f"{CONTAINER_ENGINES}/{engine_name}",
                          "subPath": f"engines/{engine_name}", "readOnly": True},
                         {"name": "dshm", "mountPath": "/dev/shm"}],
    }
    annotations = {"prometheus.io/scrape": "true", "prometheus.io/port": str(serve.metrics_port),
                   "prometheus.io/path": "/metrics"}
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
