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
from trtspec.builders import upstream
from trtspec.cli import main

# (backend, mode, fp8, fp8_kv_cache)
MATRIX = [
    ("cpu", "eagle3", False, False), ("cpu", "draft-target", False, False), ("cpu", "ngram", False, False),
    ("cpu", "none", False, False), ("cpu", "ngram", True, False),
    ("trtllm", "eagle3", True, True), ("trtllm", "draft-target", False, False), ("trtllm", "ngram", True, False),
    ("trtllm", "none", False, False),
    ("trtllm-engine", "draft-target", True, True), ("trtllm-engine", "none", False, False),
]


def _case_id(case) -> str:
    backend, mode, fp8, kv = case
    return f"{backend}-{mode}" + ("-fp8" if fp8 else "") + ("-fp8kv" if kv else "")


@pytest.fixture
def workspace(in_tmp, tiny_llama, tiny_llama_draft, fp8_target):
    def make(backend: str, mode: str, fp8: bool, fp8_kv: bool):
        config = write_workspace(in_tmp, tiny_llama, draft=tiny_llama_draft, eagle3=(mode == "eagle3"),
                                 fp8_target=fp8_target if fp8 else None,
                                 quantization={"fp8_kv_cache": fp8_kv})
        replacements = {str(in_tmp.resolve()): "<WORK>", str(in_tmp): "<WORK>", str(tiny_llama): "<TARGET>",
                        str(tiny_llama_draft): "<DRAFT>"}
        return config, replacements
    return make


@pytest.mark.parametrize("case", MATRIX, ids=[_case_id(c) for c in MATRIX])
def test_dry_run_golden_and_written_files_match(case, workspace, in_tmp):
    backend, mode, fp8, fp8_kv = case
    config, replacements = workspace(*case)
    args = ["build", "-c", str(config), "--backend", backend, "--mode", mode, "--fp8" if fp8 else "--no-fp8"]
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


def test_trtllm_options_use_only_pinned_fields(workspace, in_tmp):
    config, _ = workspace("trtllm", "eagle3", True, True)
    result = CliRunner().invoke(main, ["build", "-c", str(config), "--backend", "trtllm", "--mode", "eagle3",
                                       "--fp8", "--json"], catch_exceptions=False)
    engine = json.loads(result.stdout)["engine"]
    options = yaml.safe_load((in_tmp / "engines" / engine["name"] / "llm_api_options.yaml").read_text())
    assert set(options) <= upstream.LLM_ARGS_FIELDS
    assert set(options["kv_cache_config"]) <= upstream.KV_CACHE_CONFIG_FIELDS
    assert options["kv_cache_config"]["dtype"] == "fp8"
    spec_cfg = options["speculative_config"]
    assert spec_cfg["decoding_type"] == "Eagle3" and spec_cfg["max_draft_len"] == 4
    assert spec_cfg["speculative_model_dir"] == str((in_tmp / "engines" / engine["name"] / "draft").resolve())
    assert set(spec_cfg) <= upstream.DECODING_CONFIG_FIELDS["Eagle3"]
    assert (in_tmp / "engines" / engine["name"] / "target" / "hf_quant_config.json").exists()
    assert engine["draft"]["kind"] == "eagle3" and engine["build_config"]["speculative_decoding_mode"] == "eagle3"
