"""The in-container probe (trtspec.serve.probe) against stand-in TensorRT-LLM releases.

No TensorRT-LLM can be installed here, so each test writes a package named tensorrt_llm into
tmp_path whose llmapi.llm_args holds pydantic classes with exactly the fields of a contract
(contract_data/trtllm-<version>.json): TorchLlmArgs, KvCacheConfig, CudaGraphConfig, the
speculative config classes with their ClassVar decoding_type, and DecodingBaseConfig.from_dict
dispatching on the contract's decoding_type names, as the 1.2-line llm_args.py does; plus a
dist-info so the version comes from package metadata as in the container. A mutated stand-in (a
field or a dispatch name removed) is what an older or newer release looks like. The probe runs as
the container runs it: `python3 -m trtspec.serve.probe ENGINE_DIR` in a subprocess.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from trtspec.builders import contracts, trtllm
from trtspec.spec.schema import validate_spec

ROOT = Path(__file__).resolve().parents[2]

LLM_ARGS = '''\
import json
from pathlib import Path
from typing import Any, Optional

from pydantic import BaseModel, ConfigDict, create_model

DATA = json.loads(Path(__file__).with_name("fields.json").read_text())


class StrictBaseModel(BaseModel):
    model_config = ConfigDict(extra="forbid")


def _model(name, fields, base=StrictBaseModel):
    return create_model(name, __base__=base, **{f: (Optional[Any], None) for f in fields if f != "decoding_type"})


TorchLlmArgs = _model("TorchLlmArgs", DATA["llm_args"])
KvCacheConfig = _model("KvCacheConfig", DATA["kv_cache_config"])
CudaGraphConfig = _model("CudaGraphConfig", DATA["cuda_graph_config"])


class DecodingBaseConfig(StrictBaseModel):
    @classmethod
    def from_dict(cls, data):
        config_class = globals().get(DATA["dispatch"].get(data.get("decoding_type"), ""))
        if config_class is None:
            raise ValueError(f"Invalid decoding type: {data.get('decoding_type')}")
        data.pop("decoding_type")
        return config_class(**data)


for _name, _entry in DATA["classes"].items():
    globals()[_name] = _model(_name, _entry["fields"], DecodingBaseConfig)
    globals()[_name].decoding_type = _entry["decoding_type"]  # a ClassVar in the 1.x classes
'''


def stand_in(root: Path, version: str, mutate=None) -> Path:
    """A tensorrt_llm package under root shaped as the contract of `version` says; `mutate` edits
    the field data first (a release that lacks something)."""
    api = contracts.load(version).llm_api
    data = {"llm_args": list(api["llm_args"]), "kv_cache_config": list(api["kv_cache_config"]),
            "cuda_graph_config": list(api["cuda_graph_config"]),
            "classes": {entry["class"]: {"fields": list(entry["fields"]), "decoding_type": entry["class_decoding_type"]}
                        for entry in api["decoding"].values()},
            "dispatch": {entry["decoding_type"]: entry["class"] for entry in api["decoding"].values()}}
    if mutate:
        mutate(data)
    package = root / "tensorrt_llm"
    (package / "llmapi").mkdir(parents=True)
    (package / "__init__.py").write_text(f'__version__ = "{version}"\n')
    (package / "llmapi" / "__init__.py").write_text("")
    (package / "llmapi" / "llm_args.py").write_text(LLM_ARGS)
    (package / "llmapi" / "fields.json").write_text(json.dumps(data))
    info = root / f"tensorrt_llm-{version}.dist-info"
    info.mkdir()
    (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: tensorrt_llm\nVersion: {version}\n")
    return root


def engine(root: Path, mode: str = "ngram", version: str = "1.2.1", **speculative) -> Path:
    """engine.json as `trtspec build --backend trtllm` writes it: options from the real builder."""
    spec = validate_spec({"model": {"source": "smollm2"}, "build": {"backend": "trtllm", "trtllm_version": version},
                          "speculative": {"mode": mode, "max_draft_len": 4, **speculative}})
    contract = contracts.load(version)
    options = trtllm.checked_options(spec, contract, target="target", draft=None if mode == "ngram" else "draft")
    directory = root / f"tiny-{mode}-trtllm"
    directory.mkdir()
    (directory / "engine.json").write_text(json.dumps({
        "name": directory.name, "backend": "trtllm", "mode": mode,
        "trtllm": {"tensorrt_llm_version": version, "llm_api_options": options}}))
    return directory


def run_probe(package_root: Path, engine_dir: Path) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(package_root), str(ROOT)])}
    return subprocess.run([sys.executable, "-m", "trtspec.serve.probe", str(engine_dir)], env=env,
                          capture_output=True, text=True, timeout=120)


SCHEDULE = {"draft_len_schedule": [[1, 4], [4, 2], [8, 0]], "acceptance_window": 32,
            "acceptance_length_threshold": 1.4}


def test_the_release_the_contract_describes_passes(tmp_path):
    written = engine(tmp_path, "ngram", **SCHEDULE)
    options = json.loads((written / "engine.json").read_text())["trtllm"]["llm_api_options"]
    assert options["speculative_config"]["draft_len_schedule"] == {"1": 4, "4": 2, "8": 0}  # JSON: string keys
    result = run_probe(stand_in(tmp_path / "site", "1.2.1"), written)
    assert result.returncode == 0, result.stderr
    assert result.stdout.startswith("probe: tensorrt_llm 1.2.1 knows every key tiny-ngram-trtllm wrote")
    assert len(result.stdout.strip().splitlines()) == 1


def test_a_release_without_a_written_key_is_refused_in_one_line(tmp_path):
    def without_schedule(data):  # what 1.1.0 is: DecodingBaseConfig has no draft_len_schedule
        data["classes"]["NGramDecodingConfig"]["fields"].remove("draft_len_schedule")

    result = run_probe(stand_in(tmp_path / "site", "1.2.1", without_schedule), engine(tmp_path, "ngram", **SCHEDULE))
    assert result.returncode == 3
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1, result.stderr
    assert lines[0].startswith("probe: refusing to start: tensorrt_llm 1.2.1 does not know "
                               "speculative_config.draft_len_schedule, written for TensorRT-LLM 1.2.1")


def test_the_first_unknown_key_is_named_in_the_order_written(tmp_path):
    def older(data):
        data["kv_cache_config"].remove("tokens_per_block")
        data["llm_args"].remove("cuda_graph_config")

    result = run_probe(stand_in(tmp_path / "site", "1.2.1", older), engine(tmp_path, "ngram"))
    assert result.returncode == 3 and "does not know cuda_graph_config," in result.stderr


def test_a_decoding_type_the_release_does_not_dispatch_is_refused(tmp_path):
    def renamed(data):  # a release that took 'Eagle' away (only 'Eagle3' dispatches)
        data["dispatch"]["Eagle3"] = data["dispatch"].pop("Eagle")

    result = run_probe(stand_in(tmp_path / "site", "1.2.1", renamed), engine(tmp_path, "eagle3"))
    assert result.returncode == 3
    assert "does not know speculative_config.decoding_type 'Eagle' (Invalid decoding type: Eagle)" in result.stderr


def test_an_older_installed_release_reads_as_a_drift_or_a_refusal(tmp_path):
    # options written for 1.2.1 without a schedule, on the 1.1.0 stand-in: tokens_per_block is unknown
    result = run_probe(stand_in(tmp_path / "site", "1.1.0"), engine(tmp_path, "ngram"))
    assert result.returncode == 3 and "tensorrt_llm 1.1.0 does not know kv_cache_config.tokens_per_block" in result.stderr


def test_without_tensorrt_llm_the_probe_refuses(tmp_path):
    result = run_probe(tmp_path / "empty", engine(tmp_path, "ngram"))
    assert result.returncode == 3 and "tensorrt_llm is not installed here" in result.stderr


@pytest.mark.parametrize("mode", ["eagle3", "draft-target"])
def test_no_schedule_or_gate_where_the_release_does_not_serve_one(tmp_path, mode):
    spec = validate_spec({"model": {"source": "smollm2"}, "build": {"backend": "trtllm"},
                          "speculative": {"mode": mode, "max_draft_len": 4, "draft": "smollm2", **SCHEDULE}})
    speculative = trtllm.llm_api_options(spec, contracts.load("1.2.1"), target="t", draft="d")["speculative_config"]
    if mode == "eagle3":  # one-model EAGLE-3: no dynamic draft length, per-request acceptance reads 0 in 1.2.1
        assert not {"draft_len_schedule", "acceptance_window"} & set(speculative)
        assert speculative["decoding_type"] == "Eagle"
    else:
        assert speculative["draft_len_schedule"] == {1: 4, 4: 2, 8: 0}
        assert speculative["acceptance_window"] == 32 and speculative["acceptance_length_threshold"] == 1.4
    old = trtllm.llm_api_options(spec, contracts.load("1.1.0"), target="t", draft="d")["speculative_config"]
    assert "draft_len_schedule" not in old and "acceptance_window" not in old
