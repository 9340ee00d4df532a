"""The trtllm-engine fill lists against what upstream's inflight_batcher_llm models read (issue 23).

trtspec fills upstream's own templates in the container; these tests apply the same key:value
lists to the templates in the contract of each supported TensorRT-LLM release and check that the
result declares every parameter, input and output upstream's Python models (and the BLS decoder's
calls to tensorrt_llm) read or send, with no `${...}` left. A mutation of either side fails.
"""

from __future__ import annotations

import copy
import re

import pytest

from trtspec.builders import contracts
from trtspec.errors import IncompatibleArtifactError
from trtspec.repository import pbtxt
from trtspec.repository import trtllm_engine as te
from trtspec.repository import trtllm_engine_contract as contract

VERSIONS = contracts.supported_versions()
CITATION = re.compile(r"^[\w.-]+/[\w.-]+/\S+@[0-9a-f]{7,40}(:\d+)?$")


def _values(draft_target: bool) -> dict:
    return {"tensorrt_llm_version": None, "triton_max_batch_size": 8, "engine_dir": "/e/target",
            "draft_engine_dir": "/e/draft" if draft_target else None, "tokenizer_dir": "/e/hf/target",
            "decoupled_mode": not draft_target, "kv_cache_free_gpu_mem_fraction": 0.9,
            "max_tokens_in_paged_kv_cache": (4096, 1024) if draft_target else (None, None),
            "decoding_mode": "top_k_top_p", "gpu_device_ids": [0, 1], "multi_gpu": "single", "num_draft_tokens": 4,
            "use_draft_logits": False, "max_queue_delay_microseconds": 0, "draft_target": draft_target,
            "instance_count": 1}


@pytest.mark.parametrize("version", VERSIONS)
def test_contract_cites_upstream_for_every_name(version):
    sec = contract.section(version)
    for model, kinds in sec["reads"].items():
        for kind, names in kinds.items():
            for name, entries in names.items():
                for entry in entries:
                    assert CITATION.match(entry["at"]), (model, kind, name, entry["at"])
                    assert entry["how"]


@pytest.mark.parametrize("version", VERSIONS)
@pytest.mark.parametrize("draft_target", [False, True], ids=["none", "draft-target"])
def test_fills_declare_every_name_upstream_reads(version, draft_target):
    sec = contract.section(version)
    fills = te.fills(_values(draft_target), version)
    configs = contract.filled(sec, fills)
    assert contract.problems(sec, configs) == []
    te.check(fills, version)
    for name, config in configs.items():
        message = pbtxt.to_message(config)
        assert "${" not in str(message), name
        assert message.name == name
    assert ("tensorrt_llm_draft" in configs) == draft_target
    # every placeholder of every template has a value; the planned ones are what the plan says
    for model, values in fills.items():
        assert set(values) == set(contract.placeholders(sec, model))
    assert configs["preprocessing"]["parameters"]["multimodal_model_path"]["string_value"] == ""
    llm = configs["tensorrt_llm"]
    assert llm["parameters"]["gpu_device_ids"]["string_value"] == "0,1"
    assert llm["parameters"]["exclude_input_in_output"]["string_value"] == ("false" if draft_target else "true")
    table = next(i for i in llm["input"] if i["name"] == "prompt_embedding_table")
    assert table["data_type"] == "TYPE_FP16"


def test_a_dropped_parameter_fails_the_check():
    """Mutation: the key list leaves multimodal_model_path out, so upstream's preprocessing would
    read '${multimodal_model_path}' (and a config without the key raises KeyError)."""
    version = contracts.default_version()
    sec = contract.section(version)
    fills = te.fills(_values(True), version)
    del fills["preprocessing"]["multimodal_model_path"]
    found = contract.problems(sec, contract.filled(sec, fills))
    assert any("preprocessing: parameter multimodal_model_path has no value" in p for p in found), found
    assert any("placeholders left unfilled: multimodal_model_path" in p for p in found), found
    with pytest.raises(IncompatibleArtifactError, match="multimodal_model_path"):
        te.check(fills, version)
    configs = contract.filled(sec, te.fills(_values(True), version))
    del configs["tensorrt_llm_bls"]["parameters"]["tensorrt_llm_draft_model_name"]
    assert any("parameter tensorrt_llm_draft_model_name is not declared" in p
               for p in contract.problems(sec, configs))


@pytest.mark.parametrize("model, kind, name", [
    ("tensorrt_llm_draft", "output", "arrival_time_ns"),    # the failure issue 23 saw through the BLS
    ("tensorrt_llm", "input", "return_generation_logits"),  # the decoder sends it on every call
    ("preprocessing", "output", "IMAGE_SIZES"),             # initialize looks up its config
    ("preprocessing", "input", "EMBEDDING_BIAS_WORDS"),
])
def test_a_dropped_input_or_output_fails_the_check(model, kind, name):
    version = contracts.default_version()
    sec = contract.section(version)
    configs = contract.filled(sec, te.fills(_values(True), version))
    mutated = copy.deepcopy(configs)
    mutated[model][kind] = [entry for entry in mutated[model][kind] if entry["name"] != name]
    assert len(mutated[model][kind]) == len(configs[model][kind]) - 1
    found = contract.problems(sec, mutated)
    assert f"{model}: {kind} {name} is not declared" in " ".join(found), found
    assert all(p.split(":")[0] == model for p in found)


def test_fill_script_copies_whole_model_directories_and_refuses_leftovers():
    version = contracts.default_version()
    script = te.fill_script(te.fills(_values(True), version))
    assert 'cp -r "$APP"/all_models/inflight_batcher_llm/. "$1"/' in script      # lib/ comes along
    assert 'cp -r "$1"/tensorrt_llm "$1"/tensorrt_llm_draft' in script
    assert '"$APP"/tools/fill_template.py -i' in script
    assert "refusing to start" in script
    assert "'gpu_device_ids:0\\,1'" in script
    assert "*.py" not in script


def test_a_value_fill_template_cannot_carry_is_refused():
    values = {**_values(False), "tokenizer_dir": "/e/hf:target"}
    with pytest.raises(IncompatibleArtifactError, match="colon"):
        te.fill_script(te.fills(values, contracts.default_version()))


def test_names_checked_per_model_and_release(capsys):
    """The figure issue 23 asks for: names the check holds each model to, per release."""
    for version in VERSIONS:
        sec = contract.section(version)
        counts = {model: contract.names_checked(sec, model)
                  for model in ("preprocessing", "postprocessing", "tensorrt_llm_bls", "tensorrt_llm",
                                "tensorrt_llm_draft")}
        assert all(counts.values()), counts
        print(version, counts, "total", sum(counts.values()))
