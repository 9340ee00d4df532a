"""Golden files for every backend x mode: the `--dry-run` output (plan, engine.json and every
rendered file), and the files a real build writes must equal what the dry run printed.

Regenerate after an intended change: TRTSPEC_UPDATE_GOLDEN=1 python -m pytest tests/builders -q
"""

from __future__ import annotations

import json

import pytest
import yaml
from click.testing import CliRunner

from tests.builders.conftest import assert_golden, normalize, write_workspace
from trtspec.cli import main

# (backend, mode, fp8, fp8_kv_cache, trtllm_version or None for the default, 1.2.1)
MATRIX = [
    ("cpu", "eagle3", False, False, None), ("cpu", "draft-target", False, False, None),
    ("cpu", "ngram", False, False, None), ("cpu", "none", False, False, None), ("cpu", "ngram", True, False, None),
    ("trtllm", "eagle3", True, True, None), ("trtllm", "draft-target", False, False, None),
    ("trtllm", "ngram", True, False, None), ("trtllm", "none", False, False, None),
    ("trtllm-engine", "draft-target", True, True, None), ("trtllm-engine", "none", False, False, None),
    ("trtllm", "eagle3", True, True, "1.1.0"), ("trtllm", "draft-target", False, False, "1.1.0"),
    ("trtllm", "ngram", False, False, "1.1.0"), ("trtllm-engine", "draft-target", True, False, "1.1.0"),
    # layerskip on the GPU backends: draft-target with convert's first-2-layers copy of the target
    ("trtllm", "layerskip", False, False, None), ("trtllm-engine", "layerskip", False, False, None),
]


def _case_id(case) -> str:
    backend, mode, fp8, kv, version = case
    return (f"{backend}-{mode}" + ("-fp8" if fp8 else "") + ("-fp8kv" if kv else "")
            + (f"-trtllm{version}" if version else ""))


@pytest.fixture
def workspace(in_tmp, tiny_llama, tiny_llama_draft, fp8_target, gpu_target, gpu_fp8_target):
    def make(backend: str, mode: str, fp8: bool, fp8_kv: bool, **build):
        # GPU backends build the 8-layer target (TensorRT-LLM's default EAGLE-3 capture needs >= 6)
        target, quantized = (tiny_llama, fp8_target) if backend == "cpu" else (gpu_target, gpu_fp8_target)
        if mode == "layerskip":  # convert writes the first-layers draft for the spec's GPU backend
            build = {**build, "backend": backend}
        config = write_workspace(in_tmp, target, draft=tiny_llama_draft, eagle3=(mode == "eagle3"),
                                 fp8_target=quantized if fp8 else None,
                                 quantization={"fp8_kv_cache": fp8_kv}, **({"build": build} if build else {}),
                                 **({"speculative": {"layerskip": {"exit_layer": 2}}} if mode == "layerskip" else {}))
        if mode == "layerskip":
            converted = CliRunner().invoke(main, ["convert", "-c", str(config), "--mode", mode], catch_exceptions=False)
            assert converted.exit_code == 0, converted.output
        replacements = {str(in_tmp.resolve()): "<WORK>", str(in_tmp): "<WORK>", str(target): "<TARGET>",
                        str(tiny_llama_draft): "<DRAFT>"}
        return config, replacements
    return make


@pytest.mark.parametrize("case", MATRIX, ids=[_case_id(c) for c in MATRIX])
def test_dry_run_golden_and_written_files_match(case, workspace, in_tmp):
    backend, mode, fp8, fp8_kv, version = case
    config, replacements = workspace(backend, mode, fp8, fp8_kv)
    args = ["build", "-c", str(config), "--backend", backend, "--mode", mode, "--fp8" if fp8 else "--no-fp8"]
    args += ["--trtllm-version", version] if version else []
    runner = CliRunner()
    dry = runner.invoke(main, args + ["--dry-run"], catch_exceptions=False)
    assert dry.exit_code == 0, dry.output
    assert not (in_tmp / "engines").exists(), "--dry-run wrote something"
    assert_golden(f"{_case_id(case)}.txt", normalize(dry.stdout, replacements))
    if backend == "cpu":
        return  # real cpu builds (with the smoke generation) are in test_build_cpu.py
    planned = json.loads(runner.invoke(main, args + ["--dry-run", "--json"], catch_exceptions=False).stdout)
    built = runner.invoke(main, args, catch_exceptions=False)
    assert built.exit_code == 0, built.output
    engine_dir = in_tmp / "engines" / planned["name"]
    assert json.loads((engine_dir / "engine.json").read_text()) == planned["engine"]
    for name, content in planned["files"].items():
        assert (engine_dir / name).read_text() == content
    assert (engine_dir / ("hf/target" if backend == "trtllm-engine" else "target") / "config.json").exists()


@pytest.mark.parametrize("version", ["1.1.0", "1.2.1"])
def test_trtllm_options_use_only_contract_fields(workspace, in_tmp, version):
    from trtspec.builders import contracts

    contract = contracts.load(version)
    config, _ = workspace("trtllm", "eagle3", True, True)
    result = CliRunner().invoke(main, ["build", "-c", str(config), "--backend", "trtllm", "--mode", "eagle3",
                                       "--fp8", "--trtllm-version", version, "--json"], catch_exceptions=False)
    engine = json.loads(result.stdout)["engine"]
    engine_dir = in_tmp / "engines" / engine["name"]
    text = (engine_dir / "llm_api_options.yaml").read_text()
    assert f"TensorRT-LLM {version}, as in {contract.image}" in text
    options = yaml.safe_load(text)
    api = contract.llm_api
    assert set(options) <= set(api["llm_args"])
    assert set(options["kv_cache_config"]) <= set(api["kv_cache_config"])
    assert options["kv_cache_config"]["dtype"] == "fp8"
    assert ("tokens_per_block" in options["kv_cache_config"]) == (version == "1.2.1")
    spec_cfg = options["speculative_config"]
    assert spec_cfg["decoding_type"] == "Eagle" and spec_cfg["decoding_type"] in api["dispatch"]["names"]
    # a string the contract records as rejected by the release (1.2.1: "Eagle3") is never also accepted
    assert not set(api["dispatch"].get("not_accepted", {})) & set(api["dispatch"]["names"])
    assert spec_cfg["max_draft_len"] == 4
    assert spec_cfg["speculative_model_dir"] == str((engine_dir / "draft").resolve())
    assert set(spec_cfg) <= set(api["decoding"]["eagle3"]["fields"])
    assert (engine_dir / "target" / "hf_quant_config.json").exists()
    assert engine["draft"]["kind"] == "eagle3" and engine["build_config"]["speculative_decoding_mode"] == "eagle3"
    assert engine["trtllm"]["tensorrt_llm_version"] == version and engine["trtllm"]["container"] == contract.image
