"""`deploy --target dynamo-k8s`: the DynamoGraphDeployment as the Kubernetes client and Dynamo read it.

Checked against what reads it, not against a golden file:
- every pod template and the ConfigMap round-trip through the official Kubernetes client's typed
  models (V1PodTemplateSpec, V1ConfigMap): a misspelt or mistyped field fails;
- Dynamo's own DGD code from the pinned ai-dynamo wheel (dynamo.profiler.utils.config `Config`,
  `get_worker_component_from_config`, `set_multinode_config`, `setup_worker_component_resources`,
  and config_modifiers.trtllm `TrtllmConfigModifier`) parses the graph, finds the worker, reads
  the model name and path, and places the worker on the same number of nodes with the same GPU
  limit as trtspec wrote (its placement is computed from the worker's --tensor-parallel-size and
  --pipeline-parallel-size);
- the mounted LLM-API options name only fields of TensorRT-LLM 1.3.0rc29 (the release Dynamo
  1.6.1's tensorrtllm-runtime image carries) and put the head on the model's volume.
Two graphs: a trtllm EAGLE-3 spec (one node) and DeepSeek-R1 in block FP8 on H100 with MTP (its
released config.json: 8 x H100 do not hold it, so two nodes at tensor parallelism 16).
"""

from __future__ import annotations

import copy
import json
import sys
import types
from pathlib import Path

import pytest
import yaml

from trtspec.serve.dynamo import graph

CONFIGS = Path(__file__).resolve().parents[2] / "builders" / "configs"
BLOCK_FP8 = {"activation_scheme": "dynamic", "fmt": "e4m3", "quant_method": "fp8", "weight_block_size": [128, 128]}


def _client_round_trip(data: dict, kind: str):
    from kubernetes import client

    api = client.ApiClient()
    model = api.deserialize(json.dumps(data), kind, "application/json")
    assert api.sanitize_for_serialization(model) == data, f"a field the Kubernetes API does not know ({kind})"
    return model


def dynamo_dgd():
    """Dynamo's DGD reader from the installed wheel, or a one-line skip.

    dynamo.profiler.utils.config imports dynamo.planner, which imports scikit-learn and
    `aisimulate_core` (NVIDIA's planner simulator: the `aisimulate` wheel is a placeholder that
    downloads from NVIDIA's own index, so it cannot be installed here). aisimulate_core is stubbed
    with empty modules ONLY when it is missing; the planner's performance models use it, the DGD
    reading code under test does not.
    """
    pytest.importorskip("dynamo.common", reason="ai-dynamo is not installed (Makefile dynamo step)")
    pytest.importorskip("sklearn", reason="scikit-learn, which dynamo.planner imports, is not installed")
    try:
        import aisimulate_core  # noqa: F401
    except ImportError:
        for name in ("aisimulate_core", "aisimulate_core.sdk", "aisimulate_core._native"):
            stub = types.ModuleType(name)
            stub.__path__ = []  # type: ignore[attr-defined]

            def attribute(attr: str, _name=name):
                if attr.startswith("__"):
                    raise AttributeError(attr)
                return type(attr, (), {})

            stub.__getattr__ = attribute  # type: ignore[method-assign]
            sys.modules.setdefault(name, stub)
    from dynamo.profiler.utils import config
    from dynamo.profiler.utils.config_modifiers.trtllm import TrtllmConfigModifier

    return config, TrtllmConfigModifier


@pytest.fixture
def eagle3_spec(tmp_path, tiny_llama, spec_factory):
    return spec_factory(tmp_path, tiny_llama, backend="trtllm", mode="eagle3", name="tiny-eagle",
                        speculative={"max_draft_len": 3, "tree": {"topk": 2, "depth": 3, "num_draft_tokens": 6}},
                        serve={"openai_port": 8000, "dynamo": {"workers": 3, "router": "kv"}})


@pytest.fixture
def r1_spec(tmp_path, spec_factory):
    source = tmp_path / "DeepSeek-R1"
    source.mkdir()
    config = json.loads((CONFIGS / "deepseek-r1.json").read_text()) | {"quantization_config": BLOCK_FP8}
    (source / "config.json").write_text(json.dumps(config))
    return spec_factory(tmp_path, source, backend="trtllm", mode="mtp", name="deepseek-r1",
                        speculative={"max_draft_len": 1},
                        build={"gpu": "h100", "tp_size": 8, "max_batch_size": 8, "max_seq_len": 8192,
                               "max_input_len": 4096},
                        serve={"dynamo": {"workers": 2}})


def _parts(manifests):
    config_map, dgd = manifests
    assert (config_map["kind"], dgd["apiVersion"], dgd["kind"]) == ("ConfigMap", "nvidia.com/v1beta1",
                                                                    "DynamoGraphDeployment")
    frontend, worker = dgd["spec"]["components"]
    return config_map, dgd, frontend, worker


def test_eagle3_graph_one_node(eagle3_spec, tmp_path):
    engine = tmp_path / "engines" / "tiny-eagle-eagle3-trtllm"
    manifests = graph.graph_manifests(eagle3_spec, engine)
    config_map, dgd, frontend, worker = _parts(manifests)
    _client_round_trip(config_map, "V1ConfigMap")
    pods = [_client_round_trip(c["podTemplate"], "V1PodTemplateSpec") for c in (frontend, worker)]
    (main,) = pods[1].spec.containers
    assert main.image == "nvcr.io/nvidia/ai-dynamo/tensorrtllm-runtime:1.6.1"
    assert main.command == ["python3", "-m", "dynamo.trtllm"]
    args = main.args
    assert args[args.index("--extra-engine-args") + 1] == "/etc/trtspec/llm_api_options.yaml"
    assert "--publish-kv-events" in args and worker["replicas"] == 3 and "multinode" not in worker
    assert main.resources.limits == {"nvidia.com/gpu": "1"}
    # the options file is mounted where --extra-engine-args points; the head on the model's volume
    mounts = {m.mount_path: m for m in main.volume_mounts}
    volumes = {v.name: v for v in pods[1].spec.volumes}
    assert volumes[mounts["/etc/trtspec"].name].config_map.name == config_map["metadata"]["name"]
    options = yaml.safe_load(config_map["data"]["llm_api_options.yaml"])
    speculative = options["speculative_config"]
    model_path = args[args.index("--model-path") + 1]
    assert Path(speculative["speculative_model"]).parent == Path(model_path).parent
    assert mounts[str(Path(model_path).parent)].name == mounts[str(Path(model_path).parent)].name == "artifacts"
    # TensorRT-LLM 1.3.0rc29: Eagle3, no eagle3_one_model, the tree as dynamic-tree fields
    assert speculative["decoding_type"] == "Eagle3" and "eagle3_one_model" not in speculative
    assert (speculative["use_dynamic_tree"], speculative["dynamic_tree_max_topK"],
            speculative["max_total_draft_tokens"], speculative["max_draft_len"]) == (True, 2, 6, 3)
    assert "model" not in options and "backend" not in options
    frontend_args = frontend["podTemplate"]["spec"]["containers"][0]["args"]
    assert frontend["type"] == "frontend" and "--router-mode" in frontend_args
    # the operator owns the frontend's port (DYN_HTTP_PORT=8000, probed there): serve.openai_port is not passed
    assert "--http-port" not in frontend_args


def test_deepseek_r1_fp8_on_h100_spreads_over_two_nodes(r1_spec, tmp_path):
    manifests = graph.graph_manifests(r1_spec, tmp_path / "engines" / "deepseek-r1-mtp-trtllm")
    config_map, dgd, frontend, worker = _parts(manifests)
    pod = _client_round_trip(worker["podTemplate"], "V1PodTemplateSpec")
    assert worker["multinode"] == {"nodeCount": 2} and worker["replicas"] == 2
    (main,) = pod.spec.containers
    assert main.resources.limits == {"nvidia.com/gpu": "8"}
    options = yaml.safe_load(config_map["data"]["llm_api_options.yaml"])
    assert options["tensor_parallel_size"] == 16 == 2 * 8  # nodes x GPUs per node
    assert options["speculative_config"]["decoding_type"] == "MTP"
    # the same spec at 8 x H200 fits one node (the planner: 684.7 GB of block-FP8 weights)
    h200 = r1_spec.model_copy(update={"build": r1_spec.build.model_copy(update={"gpu": "h200"})})
    one = graph.graph_manifests(h200, tmp_path / "engines" / "x")[1]["spec"]["components"][1]
    assert "multinode" not in one and one["podTemplate"]["spec"]["containers"][0]["resources"]["limits"] == \
        {"nvidia.com/gpu": "8"}


@pytest.mark.parametrize("which", ["eagle3", "r1"])
def test_dynamo_reads_the_graph(which, eagle3_spec, r1_spec, tmp_path):
    config, modifier = dynamo_dgd()
    spec = eagle3_spec if which == "eagle3" else r1_spec
    dgd = graph.graph_manifests(spec, tmp_path / "engines" / "e")[1]
    cfg = config.Config.model_validate(dgd)
    worker = config.get_worker_component_from_config(cfg, backend="trtllm")
    assert worker.name == graph.TRTLLM_WORKER
    name, path = modifier.get_model_name(dgd)
    assert (name, path) == (spec.model_name, f"{graph.ENGINES}/e/target")
    # Dynamo's placement from the worker's own args (tp x pp) and 8 GPUs a node agrees with ours
    ours = copy.deepcopy(worker.model_dump())
    args = config.get_main_container(worker).args
    world = int(args[args.index("--tensor-parallel-size") + 1]) * int(args[args.index("--pipeline-parallel-size") + 1])
    worker.multinode = None
    config.setup_worker_component_resources(worker, gpu_count=world, num_gpus_per_node=graph.GPUS_PER_NODE)
    theirs = worker.model_dump()
    assert theirs.get("multinode") == ours.get("multinode")
    assert theirs["podTemplate"]["spec"]["containers"][0]["resources"] == \
        ours["podTemplate"]["spec"]["containers"][0]["resources"]
    assert cfg.model_dump() == dgd  # nothing dropped or renamed by Dynamo's model


def test_cpu_backend_gets_trtspec_workers(tmp_path, tiny_llama, spec_factory):
    spec = spec_factory(tmp_path, tiny_llama, serve={"dynamo": {"workers": 2, "router": "round-robin"}})
    (dgd,) = graph.graph_manifests(spec, tmp_path / "engines" / "tiny-ngram-cpu")
    frontend, worker = dgd["spec"]["components"]
    main = _client_round_trip(worker["podTemplate"], "V1PodTemplateSpec").spec.containers[0]
    assert main.command == ["python", "-m", "trtspec.serve.dynamo.worker"] and worker["replicas"] == 2
    assert main.args[main.args.index("--engine-dir") + 1] == "/engines/tiny-ngram-cpu"
    assert not (main.resources.limits or {}) and "multinode" not in worker
    args = frontend["podTemplate"]["spec"]["containers"][0]["args"]
    assert args[args.index("--router-mode") + 1] == "round-robin"


@pytest.mark.parametrize("backend, mode, extra, words", [
    ("trtllm-engine", "medusa", {}, "no MedusaDecodingConfig"),
    ("trtllm-engine", "lookahead", {}, "no LookaheadDecodingConfig"),
    ("trtllm-engine", "draft-target", {}, "has no TensorRT engines"),
    ("trtllm", "eagle3", {"eagle_choices": [[0], [1]]}, "no eagle_choices"),
])
def test_what_the_1_3_line_removed_is_refused_in_one_line(backend, mode, extra, words, tmp_path, tiny_llama,
                                                          tiny_llama_draft, spec_factory):
    from trtspec.errors import IncompatibleArtifactError

    spec = spec_factory(tmp_path, tiny_llama, backend=backend, mode=mode, speculative=extra,
                        draft=tiny_llama_draft if mode == "draft-target" else None)
    with pytest.raises(IncompatibleArtifactError) as error:
        graph.graph_manifests(spec, tmp_path / "engines" / "e")
    assert words in str(error.value) and "\n" not in str(error.value)


def test_apply_without_kubectl_is_one_line(tmp_path, tiny_llama, spec_factory, monkeypatch):
    from trtspec.errors import ToolMissingError

    monkeypatch.setenv("PATH", str(tmp_path / "empty"))
    spec = spec_factory(tmp_path, tiny_llama)
    written = graph.write(spec, tmp_path / "server", tmp_path / "engines" / "e")
    assert [d["kind"] for d in yaml.safe_load_all(Path(written["manifests"]).read_text())] == [graph.KIND]
    with pytest.raises(ToolMissingError, match="kubectl is not on PATH"):
        graph.write(spec, tmp_path / "server", tmp_path / "engines" / "e", apply=True)


def test_placement_takes_whole_nodes_and_says_when_nothing_fits(r1_spec):
    from trtspec.errors import TrtSpecError

    twelve = r1_spec.model_copy(update={"build": r1_spec.build.model_copy(update={"tp_size": 12})})
    with pytest.raises(TrtSpecError, match="whole nodes of 8 GPUs"):
        graph.placement(twelve)
    sixteen = r1_spec.model_copy(update={"build": r1_spec.build.model_copy(update={"tp_size": 16})})
    assert graph.placement(sixteen) == graph.Placement(2, 8, 16, 1, "build.tp_size x pp_size")

    class NeverFits:  # a planner answer that no node count satisfies
        fits, gpu_name, problem, suggestion = False, "H100", "weights exceed the GPU", None

    with pytest.raises(TrtSpecError, match="does not fit 8 nodes"):
        graph.placement(r1_spec, plan=lambda spec: NeverFits())


def test_deploy_command_writes_the_graph(tmp_path, tiny_llama, spec_factory):
    """`trtspec deploy --target dynamo-k8s` through the CLI (the targets table's dynamo-k8s row)."""
    from click.testing import CliRunner

    from trtspec.cli import main

    spec = spec_factory(tmp_path, tiny_llama, backend="trtllm", mode="ngram")
    path = tmp_path / "trtspec.yaml"
    path.write_text(yaml.safe_dump(spec.model_dump(mode="json")))
    dry = CliRunner().invoke(main, ["deploy", "-c", str(path), "--target", "dynamo-k8s", "--dry-run"])
    assert dry.exit_code == 0, dry.output
    assert not (tmp_path / "work" / "server" / "dynamo-k8s").exists() and "kind: DynamoGraphDeployment" in dry.output
    wrote = CliRunner().invoke(main, ["deploy", "-c", str(path), "--target", "dynamo-k8s"])
    assert wrote.exit_code == 0, wrote.output
    config_map, dgd = yaml.safe_load_all((tmp_path / "work" / "server" / "dynamo-k8s" / "graph.yaml").read_text())
    assert yaml.safe_load(config_map["data"]["llm_api_options.yaml"])["speculative_config"]["decoding_type"] == "NGram"
    assert [c["name"] for c in dgd["spec"]["components"]] == [graph.FRONTEND, graph.TRTLLM_WORKER]
