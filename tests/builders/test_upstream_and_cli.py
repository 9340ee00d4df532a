"""Contract checks, trtllm-build flag rules, and the plan/build CLI on 70B-shaped configs."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
from click.testing import CliRunner

from trtspec.builders import contracts, trtllm_engine, upstream
from trtspec.cli import main
from trtspec.errors import IncompatibleArtifactError
from trtspec.spec.schema import validate_spec

CONFIGS = Path(__file__).parent / "configs"
DEFAULT = contracts.load(contracts.default_version())


def test_llm_api_fields_come_from_the_contract_without_tensorrt_llm():
    fields = upstream.llm_api_fields(DEFAULT)
    if upstream.tensorrt_llm_version() is None:
        assert fields["source"].startswith("contract 1.2.1: NVIDIA/TensorRT-LLM/tensorrt_llm/llmapi/llm_args.py@v1.2.1")
    assert set(fields["decoding"]) == {"Eagle", "DraftTarget", "NGram", "MTP"}


@pytest.mark.parametrize("options, message", [
    ({"max_batch_size": 8, "max_draft_tokens": 4}, "max_draft_tokens not a field"),
    ({"kv_cache_config": {"free_gpu_mem_fraction": 0.9}}, "kv_cache_config: free_gpu_mem_fraction"),
    ({"kv_cache_config": {"tokens_per_block": 32}, "release": "1.1.0"}, "kv_cache_config: tokens_per_block"),
    ({"speculative_config": {"decoding_type": "Eagle", "num_draft_tokens": 4}}, "speculative_config: num_draft"),
    ({"speculative_config": {"decoding_type": "Eagle", "speculative_model": "d"}}, "speculative_config: speculative_model "),
    ({"speculative_config": {"decoding_type": "Eagle3", "max_draft_len": 4}}, "decoding_type 'Eagle3'"),
    ({"speculative_config": {"decoding_type": "Draft_Target", "max_draft_len": 4}}, "decoding_type 'Draft_Target'"),
    ({"speculative_config": {"decoding_type": "Medusa", "max_draft_len": 4}}, "decoding_type 'Medusa'"),
])
def test_unknown_llm_api_fields_are_refused(options, message):
    options = dict(options)
    contract = contracts.load(options.pop("release")) if "release" in options else DEFAULT
    with pytest.raises(IncompatibleArtifactError, match=message):
        upstream.check_llm_api_options(options, contract)


@pytest.mark.parametrize("command, message", [
    (["trtllm-build", "--paged_kv_cache", "enable"], "flag --paged_kv_cache is not in the contract"),
    (["trtllm-build", "--kv_cache_type", "PAGED"], "must be one of"),
    (["trtllm-build", "--speculative_decoding_mode", "eagle3"], "must be one of"),
    (["trtllm-build", "--max_draft_len", "4", "--gather_context_logits"], "cannot be combined"),
    (["trtllm-build", "--speculative_decoding_mode", "eagle", "--max_batch_size", "1024"], "max_batch_size <= 512"),
    (["trtllm-build", "--speculative_decoding_mode", "eagle", "--max_batch_size", "8", "--max_draft_len", "300"],
     "max_draft_len <= 256"),
    (["trtllm-build", "--gemm_plugin", "auto", "--use_fp8_context_fmha", "enable"], "needs an FP8 checkpoint"),
    (["python3", "quantize.py", "--qformat", "fp16"], "must be one of"),
])
def test_engine_flag_rules(command, message):
    with pytest.raises(IncompatibleArtifactError, match=message):
        trtllm_engine.check_engine_command(command, DEFAULT)


def _spec(**build):
    return validate_spec({"model": {"source": "x"}, "speculative": {"mode": "draft-target", "draft": "y"},
                          "quantization": {"fp8": True, "fp8_kv_cache": False},
                          "build": {"backend": "trtllm-engine", **build}})


def test_engine_commands_follow_the_rules():
    commands = trtllm_engine.engine_commands(_spec(), DEFAULT)
    target_build = next(c for c in commands if c[0] == "trtllm-build" and "checkpoints/target" in c)
    draft_build = next(c for c in commands if c[0] == "trtllm-build" and "checkpoints/draft" in c)
    joined = " ".join(target_build)
    assert "--speculative_decoding_mode draft_tokens_external --max_draft_len 4" in joined
    assert "--kv_cache_type paged" in joined and "--use_paged_context_fmha enable" in joined
    assert "--gemm_plugin fp8" in joined
    assert "--use_fp8_context_fmha disable" in joined  # no FP8 KV cache, so no FP8 context FMHA
    assert "--gather_generation_logits" not in joined and "--gather_context_logits" not in joined
    assert "--speculative_decoding_mode" not in draft_build
    with_logits = trtllm_engine.engine_commands(_spec(), DEFAULT, use_draft_logits=True)
    assert all("--gather_generation_logits" in c for c in with_logits if c[0] == "trtllm-build")


@pytest.mark.parametrize("mode", ["eagle3", "ngram"])
def test_engine_backend_refuses_eagle3_and_ngram_defensively(mode):
    with pytest.raises(IncompatibleArtifactError, match="LLM-API backend"):
        trtllm_engine.refuse_unsupported(mode)


def _model_dir(root: Path, name: str, tiny_llama: Path) -> Path:
    """A directory with a hand-written public config.json; the weights file is the tiny model's
    (the planner reads only the config, so the weights need only be a valid safetensors file)."""
    directory = root / name
    directory.mkdir()
    shutil.copy(CONFIGS / f"{name}.json", directory / "config.json")
    shutil.copy(next(tiny_llama.glob("*.safetensors")), directory / "model.safetensors")
    return directory


def test_plan_cli_reports_and_exits_3_when_it_does_not_fit(in_tmp, tiny_llama):
    target = _model_dir(in_tmp, "llama-3.1-70b", tiny_llama)
    (in_tmp / "trtspec.yaml").write_text(f"model: {{source: {target}}}\nspeculative: {{mode: none}}\n"
                                         "build: {backend: trtllm, gpu: h100}\n")
    runner = CliRunner()
    result = runner.invoke(main, ["plan"])
    assert result.exit_code == 3
    assert "131.42 GiB" in result.stdout and "build.tp_size: 2" in result.stdout  # 141.1 GB of BF16 weights
    fits = runner.invoke(main, ["plan", "--tp-size", "2", "--json"])
    assert fits.exit_code == 0 and json.loads(fits.stdout)["fits"] is True


def test_build_refuses_an_oversized_plan_with_numbers_and_a_suggestion(in_tmp, tiny_llama):
    target = _model_dir(in_tmp, "llama-3.1-70b", tiny_llama)
    draft = _model_dir(in_tmp, "llama-3.2-1b", tiny_llama)
    (in_tmp / "trtspec.yaml").write_text(
        f"model: {{source: {target}}}\nspeculative: {{mode: draft-target, draft: {draft}}}\n"
        "build: {backend: trtllm, gpu: h200, max_batch_size: 256, max_seq_len: 8192, max_input_len: 4096}\n")
    runner = CliRunner()
    # BF16 70B weights leave almost nothing on one H200: the fix is more GPUs
    result = runner.invoke(main, ["build"])
    assert result.exit_code == 1
    assert "the plan does not fit on 1 x NVIDIA H200" in result.output
    assert "KV cache for 256 full-length sequences of 8192 tokens needs" in result.output
    assert "set build.tp_size: 8" in result.output
    # on two H100s a few full-length sequences fit: the fix is a smaller batch
    result = runner.invoke(main, ["build", "--backend", "trtllm-engine"], env={"TRTSPEC_DEBUG": None})
    assert result.exit_code == 1 and "set build.tp_size" in result.output
    (in_tmp / "trtspec.yaml").write_text(
        f"model: {{source: {target}}}\nspeculative: {{mode: draft-target, draft: {draft}}}\n"
        "build: {backend: trtllm, gpu: h100, tp_size: 2, max_batch_size: 256, max_seq_len: 8192, "
        "max_input_len: 4096}\n")
    result = runner.invoke(main, ["build"])
    assert result.exit_code == 1 and "the plan does not fit on 2 x NVIDIA H100" in result.output
    assert "(the largest that fits)" in result.output
    suggested = int(result.output.split("set build.max_batch_size: ")[1].split()[0])
    assert 1 <= suggested < 256
    assert not (in_tmp / "engines").exists()


def test_help_has_examples():
    runner = CliRunner()
    assert "Examples:" in runner.invoke(main, ["build", "--help"]).output
    assert "Examples:" in runner.invoke(main, ["plan", "--help"]).output


def test_introspection_reads_field_names_and_aliases_from_pydantic_classes():
    from pydantic import AliasChoices, BaseModel, Field

    class DecodingConfig(BaseModel):  # the shape of TensorRT-LLM's DecodingBaseConfig
        max_draft_len: int | None = None
        speculative_model: str | None = Field(default=None, validation_alias=AliasChoices(
            "speculative_model", "speculative_model_dir"))

    assert upstream._names(DecodingConfig) == {"max_draft_len", "speculative_model", "speculative_model_dir"}


@pytest.mark.parametrize("mode", ["eagle3", "ngram"])
def test_build_cli_refuses_eagle3_and_ngram_engines_with_the_reason(mode, in_tmp):
    result = CliRunner().invoke(main, ["build", "--backend", "trtllm-engine", "--mode", mode])
    assert result.exit_code == 2 and "use build.backend: trtllm" in result.output
    assert not (in_tmp / "engines").exists()


def test_plan_works_before_convert_with_a_default_eagle3_head(in_tmp, tiny_llama):
    target = _model_dir(in_tmp, "llama-3.1-8b", tiny_llama)
    (in_tmp / "trtspec.yaml").write_text(f"model: {{source: {target}}}\nspeculative: {{mode: eagle3}}\n"
                                         "quantization: {fp8: true}\nbuild: {backend: trtllm, gpu: h100}\n")
    result = CliRunner().invoke(main, ["plan", "--json"])
    assert result.exit_code == 0, result.output
    plan = json.loads(result.stdout)
    assert [c["role"] for c in plan["components"]] == ["target", "EAGLE-3 head"]
    assert plan["fits"] and plan["full_length_sequences"] >= plan["settings"]["max_batch_size"]


def test_plan_reads_config_json_only(in_tmp, monkeypatch):
    """A 70B deployment planned from its config.json: no weights there, and none hashed or opened."""
    from trtspec import artifacts

    target = in_tmp / "llama-70b"
    target.mkdir()
    shutil.copy(CONFIGS / "llama-3.1-70b.json", target / "config.json")
    draft = in_tmp / "llama-1b"
    draft.mkdir()
    shutil.copy(CONFIGS / "llama-3.2-1b.json", draft / "config.json")
    monkeypatch.setattr(artifacts, "weights_sha256", lambda *a, **k: pytest.fail("plan hashed weights"))
    (in_tmp / "trtspec.yaml").write_text(f"model: {{source: {target}}}\n"
                                         f"speculative: {{mode: draft-target, draft: {draft}}}\n"
                                         "quantization: {fp8: true}\nbuild: {backend: trtllm, gpu: h200}\n")
    result = CliRunner().invoke(main, ["plan", "--json"])
    assert result.exit_code == 0, result.output
    plan = json.loads(result.stdout)
    assert [c["role"] for c in plan["components"]] == ["target", "draft"] and plan["fits"]
    (target / "config.json").unlink()
    gone = CliRunner().invoke(main, ["plan"])
    assert gone.exit_code != 0 and "no config.json" in gone.output


def test_build_takes_the_same_gpu_overrides_as_plan(in_tmp, tiny_llama):
    (in_tmp / "trtspec.yaml").write_text(f"model: {{source: {tiny_llama}, name: tiny}}\nspeculative: {{mode: none}}\n"
                                         "build: {backend: trtllm}\n")
    result = CliRunner().invoke(main, ["build", "--dry-run", "--json", "--gpu", "h200", "--tp-size", "2",
                                       "--pp-size", "1"])
    assert result.exit_code == 0, result.output
    planned = json.loads(result.stdout)
    assert planned["plan"]["gpu_name"] == "NVIDIA H200" and planned["plan"]["settings"]["tp_size"] == 2
    assert planned["engine"]["trtllm"]["llm_api_options"]["tensor_parallel_size"] == 2
