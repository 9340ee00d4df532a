"""TensorRT-LLM 1.3.0rc29 as the second release contract: the one NVIDIA Dynamo 1.6.1's
tensorrtllm-runtime image carries, used for the Dynamo targets only.

- The pin and the image are read from the installed ai-dynamo wheel itself where it is installed
  (its METADATA's trtllm extra, its own DGD template's image), so the contract cannot drift from
  the Dynamo release trtspec names.
- LLM-API options for every mode the 1.3 line has pass the contract check, with 1.3's names only:
  Eagle3 (no eagle3_one_model), Draft_Target, NGram, MTP, speculative_model, dynamic-tree fields,
  draft_len_schedule in last-batch-size keys, the rate gate (acceptance_rate_window_size /
  acceptance_rate_threshold); 1.2.1's names (Eagle, speculative_model_dir, acceptance_window,
  acceptance_length_threshold) fail it.
- `tune --served` decides the 1.3 schedule and gate for a Dynamo target, and what it writes builds
  into options that pass; the Triton targets keep 1.2.1.
"""

from __future__ import annotations

import pytest
import yaml

from trtspec.bench import tune_served
from trtspec.builders import contracts, trtllm, upstream
from trtspec.errors import IncompatibleArtifactError, TrtSpecError
from trtspec.spec.schema import validate_spec

ROWS = [  # concurrency 1: 4 wins; 4: 2 wins; 16: plain decoding (100) beats every draft length
    {"concurrency": c, "max_draft_len": k, "eagle_choices": None, "tree": None, "output_throughput": t,
     "spec_decode_acceptance_length": al, "speedup": t / base}
    for c, k, t, base, al in [(1, 2, 60, 40, 2.5), (1, 4, 70, 40, 3.5), (4, 2, 95, 80, 2.5), (4, 4, 90, 80, 3.5),
                              (16, 2, 90, 100, 2.5), (16, 4, 80, 100, 3.5)]]
BASELINES = {1: {"output_throughput": 40.0}, 4: {"output_throughput": 80.0}, 16: {"output_throughput": 100.0}}


def _spec(mode="eagle3", **speculative):
    draft = {"draft": "smollm2"} if mode == "draft-target" else {}
    return validate_spec({"model": {"source": "smollm2"}, "build": {"backend": "trtllm", "max_batch_size": 32},
                          "speculative": {"mode": mode, **draft, **speculative}})


def _options(spec, contract=None):
    contract = contract or contracts.for_dynamo("1.6.1")
    draft = "/engines/e/draft" if spec.speculative.mode in ("eagle3", "draft-target") else None
    options = trtllm.llm_api_options(spec, contract, target="/engines/e/target", draft=draft)
    upstream.check_llm_api_options(options, contract, upstream.pinned_fields(contract))
    return options


def test_dynamo_1_6_1_carries_1_3_0rc29_and_triton_targets_keep_1_2_1():
    contract = contracts.for_dynamo("1.6.1")
    assert contract.version == "1.3.0rc29" and not contract.container_tags
    assert contract.image == "nvcr.io/nvidia/ai-dynamo/tensorrtllm-runtime:1.6.1"
    assert "1.3.0rc29" not in contracts.supported_versions()  # not a build.trtllm_version: no Triton carries it
    spec = _spec()
    assert contracts.for_target(spec, "dynamo-k8s").version == "1.3.0rc29"
    assert {contracts.for_target(spec, t).version for t in ("local", "docker", "k8s")} == {"1.2.1"}
    with pytest.raises(IncompatibleArtifactError, match="serve.dynamo.release 1.5.0"):
        contracts.for_dynamo("1.5.0")


def test_the_contract_matches_the_installed_dynamo_wheel():
    """The trtllm extra's pin and the template's image, read from the ai-dynamo distribution."""
    from importlib import metadata, resources

    try:
        requires = metadata.requires("ai-dynamo") or []
    except metadata.PackageNotFoundError:
        pytest.skip("ai-dynamo is not installed (Makefile dynamo step)")
    release = metadata.version("ai-dynamo")
    contract = contracts.for_dynamo(release)
    pins = [r for r in requires if r.startswith("tensorrt-llm") and "trtllm" in r]
    assert pins and pins[0].split(";")[0].strip() == f"tensorrt-llm=={contract.version}"
    template = yaml.safe_load(resources.files("dynamo.profiler").joinpath("templates/dgd/trtllm/agg.yaml").read_text())
    images = {c["image"] for comp in template["spec"]["components"] for c in comp["podTemplate"]["spec"]["containers"]}
    assert images == {contract.image}


def test_eagle3_chain_and_tree_in_1_3_names():
    chain = _options(_spec(max_draft_len=3))["speculative_config"]
    assert chain == {"decoding_type": "Eagle3", "max_draft_len": 3, "speculative_model": "/engines/e/draft"}
    tree = _options(_spec(max_draft_len=3, tree={"topk": 2, "depth": 3, "num_draft_tokens": 6}))["speculative_config"]
    assert (tree["use_dynamic_tree"], tree["dynamic_tree_max_topK"], tree["max_total_draft_tokens"]) == (True, 2, 6)


@pytest.mark.parametrize("mode, decoding_type", [("draft-target", "Draft_Target"), ("ngram", "NGram"), ("mtp", "MTP")])
def test_every_other_mode_passes(mode, decoding_type):
    options = _options(_spec(mode))
    assert options["speculative_config"]["decoding_type"] == decoding_type
    assert "model" not in options and "backend" not in options  # dynamo.trtllm passes --model-path


def test_schedule_in_last_batch_size_keys_and_the_rate_gate():
    spec = _spec("ngram", max_draft_len=4, draft_len_schedule=[[1, 4], [4, 2], [16, 0]], acceptance_window=512,
                 acceptance_rate_threshold=0.4, acceptance_length_threshold=2.0)
    speculative = _options(spec)["speculative_config"]
    # 1-3 sequences draft 4, 4-15 draft 2, 16 and more nothing (the release's implicit 0 above the last key)
    assert speculative["draft_len_schedule"] == {3: 4, 15: 2}
    assert (speculative["acceptance_rate_window_size"], speculative["acceptance_rate_threshold"]) == (512, 0.4)
    assert not {"acceptance_window", "acceptance_length_threshold"} & set(speculative)
    # the last range ends at build.max_batch_size when its length is not 0
    spec = _spec("eagle3", max_draft_len=4, draft_len_schedule=[[1, 4], [8, 2]])
    assert _options(spec)["speculative_config"]["draft_len_schedule"] == {7: 4, 32: 2}
    # the same spec for 1.2.1 keeps first-batch-size keys and its length gate
    old = _options(_spec("ngram", max_draft_len=4, draft_len_schedule=[[1, 4], [4, 2]], acceptance_window=32,
                         acceptance_length_threshold=2.0), contracts.load("1.2.1"))["speculative_config"]
    assert old["draft_len_schedule"] == {1: 4, 4: 2} and old["acceptance_length_threshold"] == 2.0


@pytest.mark.parametrize("key, value", [("eagle3_one_model", True), ("speculative_model_dir", "/d"),
                                        ("acceptance_window", 32), ("eagle_choices", [[0]])])
def test_1_2_1_names_fail_the_1_3_check(key, value):
    contract = contracts.for_dynamo("1.6.1")
    options = _options(_spec())
    options["speculative_config"][key] = value
    with pytest.raises(IncompatibleArtifactError, match=key):
        upstream.check_llm_api_options(options, contract, upstream.pinned_fields(contract))
    options["speculative_config"] = {"decoding_type": "Eagle", "max_draft_len": 3}
    with pytest.raises(IncompatibleArtifactError, match="'Eagle'"):
        upstream.check_llm_api_options(options, contract, upstream.pinned_fields(contract))


def test_tune_served_writes_the_1_3_schedule_and_rate_gate_for_dynamo(tmp_path):
    from trtspec.bench.tune import write_choice

    path = tmp_path / "trtspec.yaml"
    path.write_text("model:\n  source: smollm2\nbuild:\n  backend: trtllm\n  max_batch_size: 32\n"
                    "speculative:\n  mode: eagle3\n")
    spec = validate_spec(yaml.safe_load(path.read_text()))
    decision = tune_served.decide(spec, ROWS, BASELINES, target="dynamo-k8s")
    # one-model EAGLE-3 gets a schedule in 1.3 (1.2.1: the fixed best length, no gate)
    assert decision.schedule == [[1, 4], [4, 2], [16, 0]] and decision.gate_kind == "rate"
    # break-even acceptance length 3.5 / 1.75 = 2.0 with 4 drafted: rate (2.0 - 1) / 4
    assert decision.gate == (tune_served.GATE_WINDOW_ITERATIONS, 0.25) and not decision.notes
    assert tune_served.decide(spec, ROWS, BASELINES, target="k8s").gate is None  # 1.2.1, one-model EAGLE-3
    write_choice(path, decision.max_draft_len, schedule=decision.schedule, extra=decision.fields())
    written = validate_spec(yaml.safe_load(path.read_text()))
    assert written.speculative.acceptance_rate_threshold == 0.25
    speculative = _options(written)["speculative_config"]
    assert speculative["draft_len_schedule"] == {3: 4, 15: 2}
    assert speculative["acceptance_rate_threshold"] == 0.25


def test_suffix_is_the_1_3_suffix_automaton_with_the_cited_names(tmp_path):
    """Mode suffix on a Dynamo target: SADecodingConfig (decoding_type SA), every written key in the
    contract's cited field list; the global pool follows speculative.suffix.max_cached_requests."""
    from trtspec.serve.dynamo import graph

    contract = contracts.for_dynamo("1.6.1")
    entry = contract.decoding("suffix")
    assert entry["class"] == "SADecodingConfig" and "SA" in contract.llm_api["dispatch"]["names"]
    assert "@bf0ee2fb9e631721224a86a367f65930b0fea1e2" in entry["source"] and "@7568f407" in entry["source"]
    spec = _spec("suffix", suffix={"max_draft_len": 4}, draft_len_schedule=[[1, 4], [8, 2]], acceptance_window=256,
                 acceptance_rate_threshold=0.3)
    speculative = _options(spec)["speculative_config"]
    assert speculative == {"decoding_type": "SA", "max_draft_len": 4, "max_matching_ngram_size": -1,
                           "enable_global_pool": True, "draft_len_schedule": {7: 4, 32: 2},
                           "acceptance_rate_window_size": 256, "acceptance_rate_threshold": 0.3}
    assert set(speculative) <= set(entry["fields"])
    alone = _options(_spec("suffix", suffix={"max_cached_requests": 0}))["speculative_config"]
    assert alone["enable_global_pool"] is False
    # SA's max_draft_len is the mode's own cap (speculative.suffix.max_draft_len, upstream's 24), not
    # speculative.max_draft_len, and the step's token budget makes room for it
    default = _options(_spec("suffix", max_draft_len=6))
    assert default["speculative_config"]["max_draft_len"] == 24 and default["max_num_tokens"] >= 32 * 25
    with pytest.raises(TrtSpecError, match="set speculative.suffix.max_draft_len to the schedule"):
        _options(_spec("suffix", draft_len_schedule=[[1, 4], [8, 2]]))
    # the DynamoGraphDeployment's engine args: no draft directory, the same SA config
    where = graph.Placement(1, 1, 1, 1, "test")
    written = graph.engine_args_options(spec, tmp_path / "tiny-suffix-trtllm", where, contract)
    assert written["speculative_config"]["decoding_type"] == "SA" and "speculative_model" not in \
        written["speculative_config"]
    # a name SADecodingConfig does not have fails the check (n-gram's pool flag)
    bad = _options(spec)
    bad["speculative_config"]["is_public_pool"] = False
    with pytest.raises(IncompatibleArtifactError, match="is_public_pool"):
        upstream.check_llm_api_options(bad, contract, upstream.pinned_fields(contract))


def test_suffix_trees_and_the_1_2_1_release_are_refused_in_one_line():
    from trtspec.builders.steps import LlmApiSteps

    with pytest.raises(TrtSpecError, match="suffix automaton .* drafts chains") as raised:
        _options(_spec("suffix", suffix={"tree": True}))
    assert "\n" not in str(raised.value)
    spec = _spec("suffix")
    for refuse in (lambda: trtllm.llm_api_options(spec, contracts.load("1.2.1"), target="t", draft=None),
                   lambda: LlmApiSteps().refuse(spec, dict)):
        with pytest.raises(IncompatibleArtifactError) as raised:
            refuse()
        message = str(raised.value)
        assert "TensorRT-LLM 1.2.1 has no speculative config" in message and "\n" not in message
        assert "TensorRT-LLM 1.3.0rc29 (SADecodingConfig, decoding_type SA, in Dynamo 1.6.1)" in message
        assert "--target dynamo-k8s" in raised.value.fix
    # modes 1.2.1 does have, layerskip (served as draft-target) included, pass the same check
    for mode in ("eagle3", "ngram", "mtp", "layerskip", "none"):
        trtllm.refuse_unmapped(_spec(mode), contracts.load("1.2.1"))
