"""The DynamoGraphDeployments trtspec writes, against the DynamoGraphDeployment CRD's own schema.

The CRD is ai-dynamo/dynamo's generated
`deploy/operator/config/crd/bases/nvidia.com_dynamographdeployments.yaml` (1.6 MB; versions
v1alpha1 and v1beta1, storage v1beta1). It is not vendored here: give its path in
TRTSPEC_DGD_CRD, e.g. from a Dynamo checkout

    git show df7deed0d81bb2ad53dcb6ee4230631d5a9cd7e1:deploy/operator/config/crd/bases/nvidia.com_dynamographdeployments.yaml

(upstream main of 2026-08-20, PR #13273, pyproject version 1.5.0: the newest copy that could be
brought here; the v1.6.1 tag could not be read, the repository being over the fetch limit). Without
it, or without jsonschema, the test skips in one line.

Validation is stricter than the API server's default: every object schema that lists
`properties` (and does not preserve unknown fields) refuses other keys, as `kubectl apply` with
field validation Strict does, so a misspelt field fails instead of being pruned. CEL rules
(`x-kubernetes-validations`) are not evaluated. The pinned Dynamo wheel's own trtllm template
(agg.yaml) must pass the same check, so a CRD that does not fit the release fails loudly.

Without the CRD, the same graphs are checked against dgd_crd_v1beta1.json (crd_contract.py): the
CRD's schema nodes that these graphs and the template reach, rebuilt from the CRD and compared with
the committed file wherever TRTSPEC_DGD_CRD is set (TRTSPEC_WRITE_DGD_CONTRACT=1 rewrites it).
"""

from __future__ import annotations

import copy
import hashlib
import json
import os
from pathlib import Path

import pytest
import yaml

from tests.serve.dynamo import crd_contract
from trtspec.serve.dynamo import graph

CONTRACT = Path(__file__).with_name("dgd_crd_v1beta1.json")
# the copy the contract was read from (see above); a CRD file that differs fails the rebuild test
SOURCE = {"repo": "ai-dynamo/dynamo", "path": "deploy/operator/config/crd/bases/nvidia.com_dynamographdeployments.yaml",
          "commit": "df7deed0d81bb2ad53dcb6ee4230631d5a9cd7e1"}


def strict(schema):
    """The v1beta1 openAPIV3Schema with unknown keys refused where the schema lists properties."""
    if isinstance(schema, list):
        return [strict(item) for item in schema]
    if not isinstance(schema, dict):
        return schema
    out = {key: (({k: strict(v) for k, v in value.items()} if key == "properties" else strict(value))
                 if key != "x-kubernetes-validations" else value) for key, value in schema.items()}
    if "properties" in out and "additionalProperties" not in out and not out.get("x-kubernetes-preserve-unknown-fields"):
        out["additionalProperties"] = False
    return out


@pytest.fixture(scope="module")
def crd_file():
    path = os.environ.get("TRTSPEC_DGD_CRD")
    if not path or not Path(path).is_file():
        pytest.skip("TRTSPEC_DGD_CRD names no DynamoGraphDeployment CRD file (see this module's docstring)")
    return Path(path)


def _openapi_schema(crd_file):
    crd = yaml.safe_load(crd_file.read_text())
    assert (crd["spec"]["group"], crd["spec"]["names"]["kind"]) == ("nvidia.com", graph.KIND)
    (version,) = [v for v in crd["spec"]["versions"] if "nvidia.com/" + v["name"] == graph.API_VERSION]
    assert version["served"] and version["storage"]
    return version["schema"]["openAPIV3Schema"]


@pytest.fixture(scope="module")
def validator(crd_file):
    jsonschema = pytest.importorskip("jsonschema", reason="jsonschema is not installed")
    return jsonschema.Draft7Validator(strict(_openapi_schema(crd_file)))


def _template():
    from importlib import resources

    pytest.importorskip("dynamo.profiler", reason="ai-dynamo is not installed (Makefile dynamo step)")
    return yaml.safe_load(resources.files("dynamo.profiler").joinpath("templates/dgd/trtllm/agg.yaml").read_text())


def _errors(validator, dgd):
    return sorted(f"{'/'.join(map(str, e.absolute_path))}: {e.message}" for e in validator.iter_errors(dgd))


def _graphs(tmp_path, tiny_llama, spec_factory):
    import json

    eagle3 = spec_factory(tmp_path / "a", tiny_llama, backend="trtllm", mode="eagle3",
                          speculative={"tree": {"topk": 2, "depth": 3, "num_draft_tokens": 6}},
                          serve={"openai_port": 8000, "dynamo": {"workers": 3}})
    source = tmp_path / "DeepSeek-R1"
    source.mkdir()
    config = json.loads((Path(__file__).resolve().parents[2] / "builders" / "configs" / "deepseek-r1.json").read_text())
    config["quantization_config"] = {"quant_method": "fp8", "weight_block_size": [128, 128]}
    (source / "config.json").write_text(json.dumps(config))
    r1 = spec_factory(tmp_path / "b", source, backend="trtllm", mode="mtp", speculative={"max_draft_len": 1},
                      build={"gpu": "h100", "tp_size": 8, "max_seq_len": 8192, "max_input_len": 4096})
    cpu = spec_factory(tmp_path / "c", tiny_llama)
    return {"eagle3": graph.graph_manifests(eagle3, tmp_path / "engines" / "tiny-eagle3-trtllm")[-1],
            "deepseek-r1-h100": graph.graph_manifests(r1, tmp_path / "engines" / "deepseek-r1-mtp-trtllm")[-1],
            "cpu": graph.graph_manifests(cpu, tmp_path / "engines" / "tiny-ngram-cpu")[-1]}


def test_written_graphs_validate_against_the_crd(validator, tmp_path, tiny_llama, spec_factory):
    graphs = _graphs(tmp_path, tiny_llama, spec_factory)
    assert graphs["deepseek-r1-h100"]["spec"]["components"][1]["multinode"] == {"nodeCount": 2}
    for name, dgd in graphs.items():
        assert _errors(validator, dgd) == [], name


def test_dynamos_own_template_passes_and_mistakes_fail(validator, tmp_path, tiny_llama, spec_factory):
    assert _errors(validator, _template()) == []
    dgd = _graphs(tmp_path, tiny_llama, spec_factory)["deepseek-r1-h100"]
    for change, where in [(lambda w: w.update(multiNode=w.pop("multinode")), "multiNode"),
                          (lambda w: w.update(replicas="2"), "replicas"),
                          (lambda w: w.update(multinode={"nodeCount": 1}), "nodeCount"),
                          (lambda w: w.update(type="trtllm"), "type")]:
        broken = copy.deepcopy(dgd)
        change(broken["spec"]["components"][1])
        assert any(where in line for line in _errors(validator, broken)), where


MISTAKES = [(lambda w: w.update(multiNode=w.pop("multinode")), "multiNode is not a field"),
            (lambda w: w.update(replicas="2"), "replicas: str where the CRD wants integer"),
            (lambda w: w.update(multinode={"nodeCount": 1}), "nodeCount: 1 is below the minimum 2"),
            (lambda w: w.update(type="trtllm"), "type: 'trtllm' is none of"),
            (lambda w: w["podTemplate"]["spec"]["containers"][0].update(imagePullPolice="Always"),
             "imagePullPolice is not a field")]


def test_graphs_and_dynamos_template_keep_to_the_crds_fields(tmp_path, tiny_llama, spec_factory):
    """Runs everywhere: the contract cut from the CRD, not the CRD itself."""
    contract = json.loads(CONTRACT.read_text())
    assert contract["source"]["commit"] == SOURCE["commit"]
    graphs = _graphs(tmp_path, tiny_llama, spec_factory)
    for name, dgd in [*graphs.items(), ("dynamo's agg.yaml", _template())]:
        assert crd_contract.check(contract["nodes"], dgd) == [], name
    for change, words in MISTAKES:
        broken = copy.deepcopy(graphs["deepseek-r1-h100"])
        change(broken["spec"]["components"][1])
        assert any(words in line for line in crd_contract.check(contract["nodes"], broken)), words


def test_the_contract_is_the_crds(crd_file, tmp_path, tiny_llama, spec_factory):
    """Rebuilt from the CRD file, the contract equals the committed one (or is rewritten, on request)."""
    documents = [*_graphs(tmp_path, tiny_llama, spec_factory).values(), _template()]
    rebuilt = {"about": "The DynamoGraphDeployment CRD's v1beta1 schema nodes that trtspec's graphs and Dynamo's "
                        "trtllm agg.yaml reach: tests/serve/dynamo/crd_contract.py, test_graph_crd.py",
               "source": SOURCE | {"sha256": hashlib.sha256(crd_file.read_bytes()).hexdigest()},
               "nodes": crd_contract.extract(_openapi_schema(crd_file), documents)}
    if os.environ.get("TRTSPEC_WRITE_DGD_CONTRACT") == "1":
        CONTRACT.write_text(json.dumps(rebuilt, indent=1) + "\n")
    assert json.loads(CONTRACT.read_text()) == rebuilt
