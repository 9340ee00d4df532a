"""A dynamic tree on the GPU path: written only where the release's LLM API grows them (contract
data), elsewhere a chain and one line saying why; the cpu engine bundle carries the shape."""

from __future__ import annotations

import pytest

from trtspec.builders import contracts, trtllm
from trtspec.spec.schema import validate_spec

TREE = {"topk": 4, "depth": 3, "num_draft_tokens": 8}


def _spec(version):
    return validate_spec({"speculative": {"mode": "eagle3", "max_draft_len": 3, "tree": TREE},
                          "build": {"backend": "trtllm", "trtllm_version": version}})


@pytest.mark.parametrize("version", ["1.1.0", "1.2.1"])
def test_releases_without_dynamic_trees_get_a_chain_and_a_reason(version):
    spec, contract = _spec(version), contracts.load(version)
    options = trtllm.checked_options(spec, contract, target="target", draft="draft")
    speculative = options["speculative_config"]
    assert speculative["max_draft_len"] == 3
    assert not {"use_dynamic_tree", "dynamic_tree_max_topK", "max_total_draft_tokens"} & set(speculative)
    note = trtllm.tree_note(spec, contract)
    assert note.startswith("speculative.tree written as a chain of max_draft_len 3: ")
    assert f"TensorRT-LLM {version}" in note and "#12062" in note and "\n" not in note


def test_a_release_whose_contract_lists_dynamic_trees_gets_the_tree_under_its_names():
    contract = contracts.load("1.2.1")
    data = {**contract.data}
    data["llm_api"] = {**data["llm_api"], "decoding": {**data["llm_api"]["decoding"]}}
    data["llm_api"]["decoding"]["eagle3"] = {**data["llm_api"]["decoding"]["eagle3"], "dynamic_tree": {"llm_api": True}}
    supporting = contracts.Contract(version="1.2.1", data=data)
    spec = _spec("1.2.1")
    options = trtllm.checked_options(spec, supporting, target="target", draft="draft")
    assert trtllm.tree_note(spec, supporting) is None
    assert {k: options["speculative_config"][k] for k in
            ("max_draft_len", "use_dynamic_tree", "dynamic_tree_max_topK", "max_total_draft_tokens")} == {
        "max_draft_len": 3, "use_dynamic_tree": True, "dynamic_tree_max_topK": 4, "max_total_draft_tokens": 8}


def test_no_tree_no_note():
    spec = validate_spec({"speculative": {"mode": "eagle3"}, "build": {"backend": "trtllm"}})
    assert trtllm.tree_note(spec, contracts.load("1.1.0")) is None


@pytest.mark.parametrize("backend", ["trtllm", "trtllm-engine"])
def test_draft_model_trees_become_chains_on_the_gpu_with_a_reason(backend):
    """TensorRT-LLM's draft-target decoding drafts chains: a draft-model tree (taken by the cpu
    engine) is written as the chain of max_draft_len, and the build says so in one line."""
    spec = validate_spec({"speculative": {"mode": "draft-target", "draft": "smollm2", "max_draft_len": 3,
                                          "tree": TREE}, "build": {"backend": backend}})
    note = trtllm.tree_note(spec, contracts.load("1.1.0"))
    assert note.startswith("speculative.tree written as a chain of max_draft_len 3: ") and "draft model" in note
    assert "\n" not in note
