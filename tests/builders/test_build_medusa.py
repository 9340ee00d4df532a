"""`trtspec build --mode medusa`: the cpu bundle carries the heads and the tree and greedy-equals
plain; trtllm-engine writes upstream's examples/medusa conversion and a medusa engine (flags
checked against each release's contract) and fills Triton's medusa_choices in brace syntax; the
LLM-API backend refuses in one line."""

from __future__ import annotations

import json

import pytest
from click.testing import CliRunner

from trtspec import artifacts
from trtspec.cli import main

CHOICES = [[0], [1], [0, 0], [0, 1], [1, 0]]


@pytest.fixture(scope="module")
def random_heads(tiny_llama, tmp_path_factory):
    from trtspec.testing.tiny_medusa import make_tiny_medusa

    return make_tiny_medusa(tiny_llama, tmp_path_factory.mktemp("heads"), trained=False, num_heads=2)


def _converted(root, target, heads, backend: str, version: str = "1.2.1", **medusa):
    """trtspec.yaml for mode medusa and checkpoints/medusa imported by the real convert."""
    import yaml

    spec = {"model": {"source": str(target), "name": "tiny"},
            "speculative": {"mode": "medusa", "medusa": {"heads": str(heads), **medusa}},
            "build": {"backend": backend, "trtllm_version": version}}
    (root / "trtspec.yaml").write_text(yaml.safe_dump(spec))
    result = CliRunner().invoke(main, ["convert", "-c", str(root / "trtspec.yaml")])
    assert result.exit_code == 0, result.output
    return str(root / "trtspec.yaml")


def test_cpu_bundle_drafts_the_tree_and_greedy_equals_plain(in_tmp, tiny_llama, random_heads):
    from trtspec.runtime import load_engine

    config = _converted(in_tmp, tiny_llama, random_heads, "cpu", choices=CHOICES)
    result = CliRunner().invoke(main, ["build", "-c", config])
    assert result.exit_code == 0, result.output
    engine_dir = in_tmp / "engines" / "tiny-medusa-cpu"
    engine = json.loads((engine_dir / "engine.json").read_text())
    assert engine["draft"]["kind"] == "medusa" and (engine_dir / "draft" / "medusa_lm_head.safetensors").is_file()
    assert engine["runtime"]["medusa_choices"] == CHOICES and engine["build_config"]["max_draft_len"] == 5
    assert artifacts.read_manifest(engine_dir)["smoke"]["status"] == "ok"
    with load_engine(engine_dir) as loaded:
        assert loaded.drafter.kind == "medusa" and loaded.tree.paths == CHOICES
        prompt = [5, 6, 7, 8, 5, 6, 7, 8, 5, 6]
        assert loaded.generate(prompt, max_new_tokens=20).token_ids == \
            loaded.generate(prompt, max_new_tokens=20, speculative=False).token_ids


@pytest.mark.parametrize("version", ["1.1.0", "1.2.1"])
def test_trtllm_engine_converts_with_the_heads_and_fills_medusa_choices(in_tmp, tiny_llama, random_heads, version):
    from trtspec.builders import build
    from trtspec.repository import trtllm_engine as te
    from trtspec.spec.loading import load_spec

    spec = load_spec(_converted(in_tmp, tiny_llama, random_heads, "trtllm-engine", version, choices=CHOICES))
    result = build(spec, dry_run=True)
    convert, target_build = result.commands  # no quantize.py, no draft engine
    # examples/medusa/convert_checkpoint.py as upstream's README and CI run it, sized from the heads
    assert convert.startswith("python3 /app/examples/medusa/convert_checkpoint.py --model_dir hf/target "
                              "--medusa_model_dir hf/draft --output_dir checkpoints/target --dtype bfloat16 "
                              "--num_medusa_heads 2 --num_medusa_layers 1 --max_medusa_token_len 5")
    assert target_build.startswith("trtllm-build --checkpoint_dir checkpoints/target")
    assert "--speculative_decoding_mode medusa --max_draft_len 5" in target_build
    section = result.engine["trtllm_engine"]
    assert section["decoding_mode"] == "medusa" and section["medusa_choices"] == CHOICES
    fills = te.fills(te.plan(result.engine, spec, "/engines/x", in_tmp), version)
    assert fills["tensorrt_llm"]["medusa_choices"] == "{0}, {1}, {0, 0}, {0, 1}, {1, 0}"
    assert fills["tensorrt_llm"]["decoding_mode"] == "medusa"
    te.check(fills, version)  # every placeholder filled, each config parses as Triton's ModelConfig


def test_medusa_commands_are_checked_against_the_contract(tiny_llama):
    from trtspec.builders import contracts
    from trtspec.builders.trtllm_engine import MEDUSA_SCRIPT, check_engine_command
    from trtspec.errors import IncompatibleArtifactError

    with pytest.raises(IncompatibleArtifactError, match="--medusa_choices is not in the contract"):
        check_engine_command(["python3", MEDUSA_SCRIPT, "--model_dir", "x", "--medusa_choices", "[[0]]"],
                             contracts.load("1.2.1"))


def test_other_modes_leave_medusa_choices_unset(tiny_llama, in_tmp):
    from trtspec.builders import build
    from trtspec.repository import trtllm_engine as te
    from trtspec.spec.schema import validate_spec

    spec = validate_spec({"model": {"source": str(tiny_llama)}, "build": {"backend": "trtllm-engine"},
                          "speculative": {"mode": "none"}})
    fills = te.fills(te.plan(build(spec, dry_run=True).engine, spec, "/engines/x", in_tmp), "1.2.1")
    assert fills["tensorrt_llm"]["medusa_choices"] == ""


@pytest.mark.parametrize("version", ["1.1.0", "1.2.1"])
def test_fp8_medusa_engines_quantize_with_the_heads(in_tmp, tiny_llama, random_heads, version):
    """FP8: quantize.py's own Medusa flags (examples/quantization/README.md), float16 as upstream runs it
    (combine_medusa_weight loads the heads in float16), then the same medusa engine."""
    from trtspec.builders import build
    from trtspec.spec.loading import load_spec

    spec = load_spec(_converted(in_tmp, tiny_llama, random_heads, "trtllm-engine", version, choices=CHOICES))
    spec.quantization.fp8 = True
    quantize, target_build = build(spec, dry_run=True).commands
    assert quantize.startswith("python3 /app/examples/quantization/quantize.py --model_dir hf/target "
                               "--output_dir checkpoints/target --dtype float16 --qformat fp8")
    assert quantize.endswith("--medusa_model_dir hf/draft --num_medusa_heads 2 --num_medusa_layers 1 "
                             "--max_draft_len 5 --medusa_hidden_act silu")
    assert "--gemm_plugin fp8" in target_build and "--speculative_decoding_mode medusa --max_draft_len 5" in target_build


def test_the_llm_api_refuses_medusa_in_one_line(tiny_llama):
    from trtspec.errors import SpecError
    from trtspec.spec.schema import validate_spec

    with pytest.raises(SpecError) as caught:
        validate_spec({"model": {"source": str(tiny_llama)}, "speculative": {"mode": "medusa"},
                       "build": {"backend": "trtllm"}})
    lines = str(caught.value).strip().splitlines()
    assert len(lines) == 1 and "TensorRT backend only" in lines[0]
