"""`deploy --target dynamo-k8s`: a DynamoGraphDeployment (nvidia.com/v1beta1) for the spec, as data.

Started from Dynamo's own template (dynamo/profiler/templates/dgd/trtllm/agg.yaml in the ai-dynamo
wheel of the pinned release): `spec.components[]` with a `Frontend` (type frontend, `python3 -m
dynamo.frontend`) and one worker (type worker). GPU backends run TensorRT-LLM's worker,

    python3 -m dynamo.trtllm --model-path /engines/<engine>/target --served-model-name <name>
        --extra-engine-args /etc/trtspec/llm_api_options.yaml --publish-kv-events
        --tensor-parallel-size T --pipeline-parallel-size P

in `nvcr.io/nvidia/ai-dynamo/tensorrtllm-runtime:<serve.dynamo.release>`, with the LLM-API options
(written for the TensorRT-LLM release that image carries: contracts.for_dynamo, the 1.3 line) in a
ConfigMap mounted at /etc/trtspec, and the target beside its EAGLE-3 head or draft on the one
artifacts volume (PVC `<name>-artifacts` holding engines/<engine>/, as --target k8s expects).
Replicas are serve.dynamo.workers; each replica gets tp x pp GPUs, spread over
`multinode.nodeCount` nodes of GPUS_PER_NODE when trtspec's planner says one node of build.gpu
is not enough (`placement`): the operator then starts the leader under mpirun, and tensor
parallelism equals nodes x GPUs per node. The cpu backend gets the same graph with trtspec's own
Dynamo worker (`python -m trtspec.serve.dynamo.worker`, the engine bundle built for cpu).

What the 1.3 line removed (contract `removed`) is refused here in one line. Pure plans: nothing
runs but `write`, which writes the YAML under <workdir>/server/dynamo-k8s/ and, asked to, applies
it with kubectl through trtspec.subproc.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from trtspec.builders import contracts
from trtspec.errors import IncompatibleArtifactError, ToolMissingError, TrtSpecError

API_VERSION = "nvidia.com/v1beta1"
KIND = "DynamoGraphDeployment"
GPUS_PER_NODE = 8          # an HGX H100/H200 node
MAX_NODES = 8
ENGINES = "/engines"       # as trtspec.serve.launch.CONTAINER_ENGINES
CONFIG_DIR = "/etc/trtspec"
OPTIONS_FILE = "llm_api_options.yaml"
FRONTEND, TRTLLM_WORKER, TRTSPEC_WORKER = "Frontend", "TRTLLMWorker", "TrtspecWorker"
WORKER_MODULE = "trtspec.serve.dynamo.worker"


@dataclass(frozen=True)
class Placement:
    """Where one worker replica runs: nodes x GPUs per node, and the parallel sizes that fill them."""

    nodes: int
    gpus_per_node: int
    tp_size: int
    pp_size: int
    why: str


def refuse(spec: Any, contract: contracts.Contract) -> None:
    """One line for what the release the Dynamo image carries cannot serve (contract `removed`)."""
    s, backend = spec.speculative, spec.build.backend
    if backend == "cpu":
        return
    release = f"TensorRT-LLM {contract.version} (Dynamo {spec.serve.dynamo.release})"
    if contract.removed(s.mode):
        raise IncompatibleArtifactError(f"speculative.mode {s.mode}: {release} has none: {contract.removed(s.mode)}",
                                        fix="use eagle3, draft-target, ngram or mtp, or deploy --target k8s "
                                            "(Triton 26.07, TensorRT-LLM 1.2.1)")
    if contract.removed(backend):
        raise IncompatibleArtifactError(f"build.backend {backend}: {release} has no TensorRT engines: "
                                        f"{contract.removed(backend)}",
                                        fix="build with --backend trtllm, or deploy --target k8s (Triton 26.07)")
    if s.mode == "eagle3" and s.eagle_choices:
        raise IncompatibleArtifactError(f"speculative.eagle_choices: {release}: {contract.removed('eagle_choices')}",
                                        fix="remove eagle_choices (a chain) or set speculative.tree")


def placement(spec: Any, plan: Callable[[Any], Any] | None = None) -> Placement:
    """One node of build.gpu when the spec's tp x pp fits it (trtspec's planner), else the fewest
    whole nodes (tensor parallelism = nodes x GPUS_PER_NODE / pp) that fit; PlanError-style one
    line when none up to MAX_NODES does."""
    from trtspec.builders import plan_inputs
    from trtspec.builders.planner import PlanError

    plan = plan or plan_inputs
    b = spec.build
    world = b.tp_size * b.pp_size
    if world > GPUS_PER_NODE:  # asked for more GPUs than a node has: whole nodes of them
        if world % GPUS_PER_NODE:
            raise TrtSpecError(f"build.tp_size x build.pp_size = {world}: a worker over several nodes takes whole "
                               f"nodes of {GPUS_PER_NODE} GPUs", fix=f"use a multiple of {GPUS_PER_NODE}")
        return Placement(world // GPUS_PER_NODE, GPUS_PER_NODE, b.tp_size, b.pp_size, "build.tp_size x pp_size")
    first = plan(spec)
    if first.fits:
        return Placement(1, world, b.tp_size, b.pp_size, f"fits {world} x {first.gpu_name}")
    for nodes in range(2, MAX_NODES + 1):
        tp = nodes * GPUS_PER_NODE // b.pp_size
        try:
            wider = plan(spec.model_copy(update={"build": b.model_copy(update={"tp_size": tp})}))
        except PlanError:  # tp does not divide the heads
            continue
        if wider.fits:
            return Placement(nodes, GPUS_PER_NODE, tp, b.pp_size,
                             f"one node ({world} x {first.gpu_name}) does not fit: {first.problem}; "
                             f"{nodes} nodes at tp {tp} do")
    raise TrtSpecError(f"the model does not fit {MAX_NODES} nodes of {GPUS_PER_NODE} x {first.gpu_name}: "
                       f"{first.problem}", fix=first.suggestion or "quantize with --fp8 or plan for build.gpu: h200")


def resource_name(engine_name: str) -> str:
    """A DNS-1123 name for the graph's objects (lowercase, digits and '-', at most 63)."""
    name = re.sub(r"[^a-z0-9-]+", "-", f"trtspec-{engine_name}".lower()).strip("-")
    return name[:63].rstrip("-")


def engine_args_options(spec: Any, engine_dir: Path, where: Placement, contract: contracts.Contract) -> dict[str, Any]:
    """The worker's --extra-engine-args: the LLM-API options for the release the image carries,
    paths inside the pod, every key checked against that release's contract."""
    from trtspec.builders import trtllm, upstream

    mounted = f"{ENGINES}/{engine_dir.name}"
    draft = f"{mounted}/draft" if spec.speculative.mode in ("eagle3", "draft-target", "layerskip") else None
    written = spec
    if spec.speculative.mode == "layerskip":  # served as draft-target with its first-layers copy (builders)
        written = spec.model_copy(update={"speculative": spec.speculative.model_copy(update={"mode": "draft-target"})})
    written = written.model_copy(update={"build": spec.build.model_copy(update={"pp_size": where.pp_size})})
    options = trtllm.llm_api_options(written, contract, target=f"{mounted}/target", draft=draft,
                                     layers_to_capture=_captured_layers(engine_dir), tp_size=where.tp_size)
    upstream.check_llm_api_options(options, contract, upstream.pinned_fields(contract))
    return options


def _captured_layers(engine_dir: Path) -> list[int] | None:
    """The EAGLE-3 head's captured target layers as `trtspec build` recorded them (engine.json)."""
    from trtspec import artifacts

    path = engine_dir / artifacts.ENGINE_JSON
    if not path.is_file():
        return None
    head = (artifacts.read_json(path).get("trtllm") or {}).get("eagle3_head") or {}
    return head.get("layers_to_capture")


def graph_manifests(spec: Any, engine_dir: Path, image: str | None = None,
                    plan: Callable[[Any], Any] | None = None) -> list[dict[str, Any]]:
    """[ConfigMap (GPU backends), DynamoGraphDeployment] for the spec and its engine directory."""
    contract = contracts.for_dynamo(spec.serve.dynamo.release)
    refuse(spec, contract)
    name, dynamo, gpu = resource_name(engine_dir.name), spec.serve.dynamo, spec.build.backend != "cpu"
    runtime = image or (contract.image if gpu else None)
    # no --http-port: the operator sets DYN_HTTP_PORT to its service port (8000) and probes /live and
    # /health there (deploy/operator/internal/dynamo/component_frontend.go); a flag would move the server
    frontend_args = ["-m", "dynamo.frontend", "--router-mode", dynamo.router,
                     "--migration-limit", str(dynamo.migration_limit)]
    artifacts_volume = {"name": "artifacts", "persistentVolumeClaim": {"claimName": f"{name}-artifacts"}}
    engine_mount = {"name": "artifacts", "mountPath": f"{ENGINES}/{engine_dir.name}",
                    "subPath": f"engines/{engine_dir.name}", "readOnly": True}
    manifests: list[dict[str, Any]] = []
    if gpu:
        where = placement(spec, plan)
        options = engine_args_options(spec, engine_dir, where, contract)
        config_map = f"{name}-engine-args"
        manifests.append({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": config_map},
                          "data": {OPTIONS_FILE: _options_yaml(options, contract)}})
        worker = _component(TRTLLM_WORKER, "worker", dynamo.workers, {
            "name": "main", "image": runtime, "command": ["python3", "-m", "dynamo.trtllm"],
            "args": ["--model-path", f"{ENGINES}/{engine_dir.name}/target", "--served-model-name", spec.model_name,
                     "--extra-engine-args", f"{CONFIG_DIR}/{OPTIONS_FILE}", "--publish-kv-events",
                     "--tensor-parallel-size", str(where.tp_size), "--pipeline-parallel-size", str(where.pp_size)],
            "resources": {"limits": {"nvidia.com/gpu": str(where.gpus_per_node)}},
            "volumeMounts": [engine_mount, {"name": "engine-args", "mountPath": CONFIG_DIR, "readOnly": True}],
        }, [artifacts_volume, {"name": "engine-args", "configMap": {"name": config_map}}])
        if where.nodes > 1:
            worker["multinode"] = {"nodeCount": where.nodes}
    else:
        from trtspec.serve.launch import DEFAULT_IMAGE

        runtime = image or DEFAULT_IMAGE["cpu"]
        worker = _component(TRTSPEC_WORKER, "worker", dynamo.workers, {
            "name": "main", "image": runtime, "command": ["python", "-m", WORKER_MODULE],
            "args": ["--engine-dir", f"{ENGINES}/{engine_dir.name}", "--model-name", spec.model_name],
            "resources": {"requests": {"cpu": "2", "memory": "8Gi"}},
            "volumeMounts": [engine_mount],
        }, [artifacts_volume])
    frontend = _component(FRONTEND, "frontend", 1, {"name": "main", "image": runtime, "command": ["python3"],
                                                    "args": frontend_args}, None)
    manifests.append({"apiVersion": API_VERSION, "kind": KIND,
                      "metadata": {"name": name, "labels": {"app.kubernetes.io/name": "trtspec",
                                                            "app.kubernetes.io/instance": name}},
                      "spec": {"components": [frontend, worker]}})
    return manifests


def _component(name: str, kind: str, replicas: int, container: dict[str, Any],
               volumes: list[dict[str, Any]] | None) -> dict[str, Any]:
    pod: dict[str, Any] = {"containers": [container]}
    if volumes:
        pod["volumes"] = volumes
    return {"name": name, "type": kind, "replicas": replicas, "podTemplate": {"spec": pod}}


def _options_yaml(options: dict[str, Any], contract: contracts.Contract) -> str:
    from trtspec.builders import trtllm

    return trtllm.render_yaml(options, contract).replace(
        "# Use: trtllm-serve <model> --backend pytorch --extra_llm_api_options llm_api_options.yaml\n",
        "# Use: python3 -m dynamo.trtllm ... --extra-engine-args llm_api_options.yaml\n")


def graph_yaml(manifests: list[dict[str, Any]]) -> str:
    """Multi-document YAML, written out in full; the ConfigMap's options file as a literal block."""
    import yaml

    class Dumper(yaml.SafeDumper):
        def ignore_aliases(self, data: Any) -> bool:
            return True

    def text(dumper: yaml.SafeDumper, value: str) -> yaml.Node:
        return dumper.represent_scalar("tag:yaml.org,2002:str", value, style="|" if "\n" in value else None)

    Dumper.add_representer(str, text)
    return "---\n".join(yaml.dump(m, Dumper=Dumper, sort_keys=False) for m in manifests)


def write(spec: Any, server_dir: Path, engine_dir: Path, image: str | None = None, *,
          apply: bool = False) -> dict[str, str]:
    """Write the graph under <server_dir>/dynamo-k8s/graph.yaml; with `apply`, `kubectl apply` it."""
    import shutil

    from trtspec import subproc

    path = server_dir / "dynamo-k8s" / "graph.yaml"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(graph_yaml(graph_manifests(spec, engine_dir, image)))
    report = {"manifests": str(path), "applied": f"not applied: kubectl apply -f {path}"}
    if apply:
        if not shutil.which("kubectl"):
            raise ToolMissingError("deploy --apply: kubectl is not on PATH",
                                   fix=f"install kubectl, or apply {path} from where it is")
        subproc.run(["kubectl", "apply", "-f", str(path)], timeout=120)
        report["applied"] = "applied with kubectl"
    return report

