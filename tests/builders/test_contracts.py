"""The GPU target as data: one version table, one contract per release, every artifact checked.

What is real here: the contract files, the checks, and the builds on tiny models. What is not:
TensorRT-LLM itself (its PyPI package is a stub); where a test needs TensorRT-LLM's own YAML path
it builds a stand-in package of pydantic classes shaped as the cited llm_args.py versions are, and
says so.
"""

from __future__ import annotations

import json
import re
import sys
import types
from pathlib import Path
from typing import ClassVar, get_args

import pytest
from click.testing import CliRunner
from pydantic import BaseModel, ConfigDict

from tests.builders.conftest import write_workspace
from trtspec.builders import contracts, eagle3_head, trtllm, upstream
from trtspec.cli import main
from trtspec.errors import IncompatibleArtifactError
from trtspec.spec.schema import BuildSpec

ROOT = Path(__file__).resolve().parents[2]
VERSIONS = contracts.supported_versions()


def test_dockerfile_builds_from_the_tables_default_container():
    dockerfile = (ROOT / "Dockerfile").read_text()
    images = re.findall(r"^ARG TRITON_TRTLLM_IMAGE=(\S+)$", dockerfile, re.MULTILINE)
    assert images == [contracts.image(contracts.default_container())]
    comment = " ".join(line.lstrip("# ") for line in dockerfile.splitlines() if line.startswith("#"))
    row = contracts.containers()["containers"][contracts.default_container()]
    assert (f"TensorRT-LLM {row['tensorrt_llm']}, ModelOpt {row['modelopt']}, transformers {row['transformers']}, "
            f"Python {row['python']}") in comment


def test_spec_and_cli_offer_exactly_the_contracts():
    field = BuildSpec.model_fields["trtllm_version"]
    assert get_args(field.annotation) == VERSIONS == ("1.1.0", "1.2.1")
    assert field.default == contracts.default_version() == "1.2.1"
    from trtspec.cli.build_cmd import build

    option = next(p for p in build.params if p.name == "trtllm_version")
    assert tuple(option.type.choices) == VERSIONS


@pytest.mark.parametrize("version", VERSIONS)
def test_every_section_cites_an_upstream_file_at_the_release_tag(version):
    data = contracts.load(version).data

    def sources(node, path=""):
        if isinstance(node, dict):
            for key, value in node.items():
                if key == "source":
                    yield path, value
                else:
                    yield from sources(value, f"{path}.{key}")

    cited = dict(sources(data))
    for section in ("llm_api", "eagle3_head", "trtllm_build", "quantize", "triton.llmapi",
                    "triton.inflight_batcher_llm", "eagle3_head.default_capture"):
        assert f".{section}" in cited, section
        assert re.search(rf"^[\w.-]+/[\w.-]+/\S+@v{re.escape(version)}", cited[f".{section}"]), cited[f".{section}"]
    assert all(data[key]["read"] for key in ("llm_api", "eagle3_head", "trtllm_build", "quantize"))
    # the containers that carry the release, per the version table
    table = contracts.containers()["containers"]
    assert [tag for tag, row in table.items() if row["tensorrt_llm"] == version] == data["containers"]


def test_container_table_rows_are_complete():
    table = contracts.containers()
    for tag, row in table["containers"].items():
        assert set(row) >= {"triton", "tensorrt_llm", "python", "torch", "tensorrt", "cuda", "modelopt",
                            "transformers"}, tag
    assert table["default"] == "26.07" and table["containers"]["26.07"]["tensorrt_llm"] == "1.2.1"
    assert table["containers"]["25.12"]["tensorrt_llm"] == "1.1.0"


# -- mutations: a renamed field, a wrong decoding type, a wrong head name fail -----------------------

def _trtllm_workspace(in_tmp, target, **sections):
    return write_workspace(in_tmp, target, eagle3=True, speculative={"mode": "eagle3"},
                           build={"backend": "trtllm", **sections.pop("build", {})}, **sections)


@pytest.mark.parametrize("mutation, message", [
    (lambda o: o["kv_cache_config"].update(free_gpu_mem_fraction=o["kv_cache_config"].pop("free_gpu_memory_fraction")),
     "kv_cache_config: free_gpu_mem_fraction not a field"),
    (lambda o: o["speculative_config"].update(speculative_model=o["speculative_config"].pop("speculative_model_dir")),
     "speculative_config: speculative_model not a field"),
    (lambda o: o["speculative_config"].update(decoding_type="Eagle3"), "decoding_type 'Eagle3'"),
    (lambda o: o.update(max_num_tokens_per_batch=o.pop("max_num_tokens")), "max_num_tokens_per_batch not a field"),
])
def test_a_mutated_llm_api_option_fails_the_build(mutation, message, in_tmp, gpu_target, monkeypatch):
    real = trtllm.llm_api_options

    def mutated(*args, **kwargs):
        options = real(*args, **kwargs)
        mutation(options)
        return options

    monkeypatch.setattr(trtllm, "llm_api_options", mutated)
    config = _trtllm_workspace(in_tmp, gpu_target)
    result = CliRunner().invoke(main, ["build", "-c", str(config), "--dry-run"])
    assert result.exit_code == 1 and message in result.output, result.output
    assert not (in_tmp / "engines").exists()


@pytest.mark.parametrize("version", VERSIONS)
def test_a_mutated_contract_fails_the_build(version, in_tmp, gpu_target, monkeypatch):
    """Drop free_gpu_memory_fraction from the contract: what trtspec writes is no longer verified."""
    contract = contracts.load(version)
    data = json.loads(json.dumps(contract.data))
    data["llm_api"]["kv_cache_config"].remove("free_gpu_memory_fraction")
    monkeypatch.setattr(contracts, "load", lambda v: contracts.Contract(version=v, data=data))
    config = _trtllm_workspace(in_tmp, gpu_target, build={"trtllm_version": version})
    result = CliRunner().invoke(main, ["build", "-c", str(config), "--dry-run"])
    assert result.exit_code == 1 and "kv_cache_config: free_gpu_memory_fraction not a field" in result.output


@pytest.mark.parametrize("version", VERSIONS)
def test_the_head_is_written_under_the_names_the_release_binds(version, in_tmp, gpu_target):
    from safetensors import safe_open

    config = _trtllm_workspace(in_tmp, gpu_target, build={"trtllm_version": version})
    result = CliRunner().invoke(main, ["build", "-c", str(config), "--json"])
    assert result.exit_code == 0, result.output
    engine = json.loads(result.stdout)["engine"]
    with safe_open(str(in_tmp / "engines" / engine["name"] / "draft" / "model.safetensors"), "pt") as handle:
        names = set(handle.keys())
    contract = contracts.load(version)
    assert set(contract.head["tensors"]) <= names <= set(contract.head["tensors"]) | set(contract.head["optional_tensors"])
    assert "midlayer.self_attn.q_proj.weight" in names and not any(n.startswith("layers.") for n in names)
    head = json.loads((in_tmp / "work" / "checkpoints" / "eagle3" / "config.json").read_text())
    trained = head["eagle_config"]["eagle_aux_hidden_state_layer_ids"]  # the defaults, and still written
    assert engine["trtllm"]["eagle3_head"] | {"forward_note": None} == {
        "layer_prefix": "midlayer.", "layers_to_capture": trained, "forward_note": None}
    # convert's heads are ModelOpt's function, hidden_norm(input_layernorm(h)); the release computes hidden_norm(h)
    assert "hidden_norm(input_layernorm(h))" in engine["trtllm"]["eagle3_head"]["forward_note"]
    assert engine["trtllm"]["llm_api_options"]["speculative_config"]["eagle3_layers_to_capture"] == trained
    # convert's own export is untouched (vLLM and trtspec's engine read layers.0.*)
    with safe_open(str(in_tmp / "work" / "checkpoints" / "eagle3" / "model.safetensors"), "pt") as handle:
        assert "layers.0.self_attn.q_proj.weight" in set(handle.keys())


def test_a_wrong_head_name_is_refused():
    contract = contracts.load("1.1.0")
    names = set(contract.head["tensors"]) | {"lm_head.weight"}
    upstream.check_head_tensors(names, contract)
    renamed = {n.replace("midlayer.", "layers.0.") for n in names}
    with pytest.raises(IncompatibleArtifactError, match=r"missing \[.midlayer.hidden_norm.weight"):
        upstream.check_head_tensors(renamed, contract)


def test_layers_to_capture_is_always_written_where_the_release_has_the_field(in_tmp, tiny_llama):
    """A 4-layer target: TensorRT-LLM has no default capture below 6 layers; convert trains on (0, 2, 3).
    Both releases have EagleDecodingConfig.eagle3_layers_to_capture (1.1.0: the 1.1-line llm_args.py,
    contract `eagle3` fields), and the head's layers are written even where they are the default; a
    release without the field refuses a head that differs from its default and writes nothing for one
    that does not."""
    import dataclasses

    head = {"eagle_config": {"eagle_aux_hidden_state_layer_ids": [0, 2, 3]}}
    target = json.loads((tiny_llama / "config.json").read_text())
    for version in VERSIONS:
        assert eagle3_head.layers_to_capture(head, target, contracts.load(version)) == [0, 2, 3]
    without = contracts.load("1.1.0")
    data = json.loads(json.dumps(without.data))
    data["eagle3_head"]["layers_to_capture_field"] = None
    with pytest.raises(IncompatibleArtifactError, match="no verified eagle3_layers_to_capture"):
        eagle3_head.layers_to_capture(head, target, dataclasses.replace(without, data=data))
    deep = {"num_hidden_layers": 32}
    default_head = {"eagle_config": {"eagle_aux_hidden_state_layer_ids": [1, 15, 28]}}
    for version in VERSIONS:
        assert eagle3_head.layers_to_capture(default_head, deep, contracts.load(version)) == [1, 15, 28]
    assert eagle3_head.layers_to_capture(default_head, deep, dataclasses.replace(without, data=data)) is None


def test_shallow_target_builds_with_layers_to_capture_for_both_releases(in_tmp, tiny_llama):
    import yaml

    config = _trtllm_workspace(in_tmp, tiny_llama)
    for flags in ([], ["--trtllm-version", "1.2.1"]):
        built = CliRunner().invoke(main, ["build", "-c", str(config), "--json", "--force", *flags])
        assert built.exit_code == 0, built.output
        name = json.loads(built.stdout)["name"]
        options = yaml.safe_load((in_tmp / "engines" / name / "llm_api_options.yaml").read_text())
        assert options["speculative_config"]["eagle3_layers_to_capture"] == [0, 2, 3]


def test_tokens_per_block_other_than_32_needs_1_2_1(in_tmp, gpu_target):
    config = _trtllm_workspace(in_tmp, gpu_target, build={"tokens_per_block": 64})
    result = CliRunner().invoke(main, ["build", "-c", str(config), "--dry-run", "--trtllm-version", "1.1.0"])
    assert result.exit_code == 1 and "has no tokens_per_block" in result.output
    result = CliRunner().invoke(main, ["build", "-c", str(config), "--dry-run"])  # 1.2.1, the default
    assert result.exit_code == 0, result.output


# -- introspection: TensorRT-LLM's own YAML path decides (stand-in package, no TensorRT-LLM here) ---

def _stand_in_tensorrt_llm(monkeypatch, dispatch: dict[str, str], literal_decoding_type: bool = False):
    """A package named tensorrt_llm whose llmapi holds pydantic classes shaped like llm_args.py:
    DecodingBaseConfig.from_dict dispatching on `dispatch` (key -> class name), each class with its
    own decoding_type (a ClassVar as in 1.1/1.2), and llm_utils.update_llm_args_with_extra_dict."""
    class Strict(BaseModel):
        model_config = ConfigDict(extra="forbid")

    class DecodingBaseConfig(Strict):
        max_draft_len: int | None = None
        speculative_model_dir: str | None = None

    classes = {
        "EagleDecodingConfig": type("EagleDecodingConfig", (DecodingBaseConfig,), {
            "__annotations__": {"decoding_type": ClassVar[str], "eagle3_one_model": bool},
            "decoding_type": "Eagle", "eagle3_one_model": True}),
        "DraftTargetDecodingConfig": type("DraftTargetDecodingConfig", (DecodingBaseConfig,), {
            "__annotations__": {"decoding_type": ClassVar[str]}, "decoding_type": "Draft_Target"}),
        "NGramDecodingConfig": type("NGramDecodingConfig", (DecodingBaseConfig,), {
            "__annotations__": {"decoding_type": ClassVar[str]}, "decoding_type": "NGram"}),
        "MTPDecodingConfig": type("MTPDecodingConfig", (DecodingBaseConfig,), {
            "__annotations__": {"decoding_type": ClassVar[str], "num_nextn_predict_layers": int},
            "decoding_type": "MTP", "num_nextn_predict_layers": 1}),
    }

    def from_dict(data):
        config_class = classes.get(dispatch.get(data.get("decoding_type")))
        if config_class is None:
            raise ValueError(f"Invalid decoding type: {data.get('decoding_type')}")
        return config_class(**{k: v for k, v in data.items() if k != "decoding_type"})

    def update_llm_args_with_extra_dict(llm_args, extra):
        return {**llm_args, **extra, "speculative_config": from_dict(extra["speculative_config"])}

    package, llmapi, llm_utils = (types.ModuleType(n) for n in ("tensorrt_llm", "tensorrt_llm.llmapi",
                                                                 "tensorrt_llm.llmapi.llm_utils"))
    llm_utils.update_llm_args_with_extra_dict = update_llm_args_with_extra_dict
    package.llmapi, llmapi.llm_utils = llmapi, llm_utils
    for name, module in (("tensorrt_llm", package), ("tensorrt_llm.llmapi", llmapi),
                         ("tensorrt_llm.llmapi.llm_utils", llm_utils)):
        monkeypatch.setitem(sys.modules, name, module)
    monkeypatch.setattr(upstream, "tensorrt_llm_version", lambda: "stand-in")


RELEASE_1_1 = {"Eagle": "EagleDecodingConfig", "DraftTarget": "DraftTargetDecodingConfig",
               "NGram": "NGramDecodingConfig", "MTP": "MTPDecodingConfig"}


def test_introspection_accepts_what_the_release_dispatches(monkeypatch):
    _stand_in_tensorrt_llm(monkeypatch, RELEASE_1_1)
    report = upstream.introspect_decoding(contracts.load("1.1.0"))
    # the class's own decoding_type differs from the YAML key for draft-target, as in 1.1's llm_args.py
    assert report == {"eagle3": "Eagle -> EagleDecodingConfig (Eagle)",
                      "draft-target": "DraftTarget -> DraftTargetDecodingConfig (Draft_Target)",
                      "ngram": "NGram -> NGramDecodingConfig (NGram)",
                      "mtp": "MTP -> MTPDecodingConfig (MTP)"}


def test_introspection_refuses_a_string_the_release_rejects(monkeypatch):
    later = {k: v for k, v in RELEASE_1_1.items() if k != "DraftTarget"} | {"Draft_Target": "DraftTargetDecodingConfig"}
    _stand_in_tensorrt_llm(monkeypatch, later)
    with pytest.raises(IncompatibleArtifactError, match="rejects decoding_type 'DraftTarget'"):
        upstream.introspect_decoding(contracts.load("1.1.0"))


def test_introspection_refuses_a_string_mapped_to_another_class(monkeypatch):
    _stand_in_tensorrt_llm(monkeypatch, {**RELEASE_1_1, "NGram": "DraftTargetDecodingConfig"})
    with pytest.raises(IncompatibleArtifactError, match="maps decoding_type 'NGram' to DraftTargetDecodingConfig"):
        upstream.introspect_decoding(contracts.load("1.1.0"))


def test_client_reads_perf_metrics_sent_as_strings():
    """The stock llmapi model.py sends acceptance_rate & co with text_output's dtype (contract
    `triton.llmapi.perf_outputs_sent_as`); the client turns them back into numbers."""
    from trtspec.client.events import _number

    assert contracts.load("1.1.0").triton["llmapi"]["perf_outputs_sent_as"] == "BYTES"
    assert _number(b"0.75") == 0.75 and _number(b"12") == 12 and _number("3") == 3 and _number(7) == 7


def test_build_refuses_a_contract_for_another_installed_release(in_tmp, gpu_target, monkeypatch):
    monkeypatch.setattr(upstream, "tensorrt_llm_version", lambda: "1.1.0")
    config = _trtllm_workspace(in_tmp, gpu_target)
    result = CliRunner().invoke(main, ["build", "-c", str(config), "--dry-run"])
    assert result.exit_code == 1 and "has tensorrt_llm 1.1.0; build.trtllm_version is 1.2.1" in result.output
