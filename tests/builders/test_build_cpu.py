"""Real cpu builds on tiny seeded models (and one SmolLM2 build): bundle, smoke generation,
pairing refusals, atomic writes, skip on re-run."""

from __future__ import annotations

import json

import pytest
from click.testing import CliRunner

from tests.builders.conftest import make_eagle3_head, write_workspace
from trtspec import artifacts
from trtspec.builders import cpu
from trtspec.cli import main


def _build(config, *args):
    return CliRunner().invoke(main, ["build", "-c", str(config), "--backend", "cpu", *args])


def _check_smoke(engine_dir):
    manifest = artifacts.read_manifest(engine_dir)
    problem = cpu.runtime_import_error()
    if problem is None:  # mandatory once trtspec.runtime imports
        assert manifest["smoke"]["status"] == "ok" and manifest["smoke"]["num_tokens"] >= 1
    else:
        assert manifest["smoke"]["status"] == "skipped" and "trtspec.runtime" in manifest["smoke"]["reason"]


@pytest.mark.parametrize("mode", ["ngram", "none", "draft-target", "eagle3"])
def test_cpu_build_writes_the_bundle_and_smoke_generates(mode, in_tmp, tiny_llama, tiny_llama_draft):
    config = write_workspace(in_tmp, tiny_llama, draft=tiny_llama_draft, eagle3=(mode == "eagle3"))
    result = _build(config, "--mode", mode, "--max-draft-len", "3")
    assert result.exit_code == 0, result.output
    engine_dir = in_tmp / "engines" / f"tiny-{mode}-cpu"
    engine = json.loads((engine_dir / "engine.json").read_text())
    assert engine["format"] == "trtspec-engine/1" and engine["backend"] == "cpu" and engine["mode"] == mode
    assert engine["build_config"]["max_draft_len"] == (0 if mode == "none" else 3)
    assert engine["target"]["sha256"] == artifacts.weights_sha256(engine_dir / "target")
    # hard links where the filesystem allows: the bundle costs no extra disk
    source_weights = next(tiny_llama.glob("*.safetensors"))
    assert (engine_dir / "target" / source_weights.name).stat().st_ino == source_weights.stat().st_ino
    if mode in ("draft-target", "eagle3"):
        assert engine["draft"]["kind"] == ("eagle3" if mode == "eagle3" else "draft-model")
        assert engine["draft"]["sha256"] == artifacts.weights_sha256(engine_dir / "draft")
        assert engine["draft"]["target_sha256"] == engine["target"]["sha256"]
    else:
        assert engine["draft"] is None
    _check_smoke(engine_dir)
    again = _build(config, "--mode", mode, "--max-draft-len", "3")
    assert again.exit_code == 0 and "up to date" in again.stdout


def test_a_trees_path_probability_floor_reaches_the_loaded_engine(in_tmp, tiny_llama, tiny_llama_draft):
    from trtspec.runtime.loading import load_engine

    config = write_workspace(in_tmp, tiny_llama, draft=tiny_llama_draft, speculative={
        "mode": "draft-target", "tree": {"topk": 2, "depth": 2, "num_draft_tokens": 3, "min_path_prob": 0.05}})
    result = _build(config)
    assert result.exit_code == 0, result.output
    engine_dir = in_tmp / "engines" / "tiny-draft-target-cpu"
    runtime = json.loads((engine_dir / "engine.json").read_text())["runtime"]
    assert runtime["tree"] == [2, 2, 3] and runtime["tree_min_path_prob"] == 0.05
    with load_engine(engine_dir) as engine:
        assert engine.config.tree == (2, 2, 3) and engine.config.tree_min_path_prob == 0.05


def test_the_memory_for_kept_prompts_and_the_prefill_budget_reach_the_loaded_engine(in_tmp, tiny_llama):
    from trtspec.runtime.loading import load_engine

    config = write_workspace(in_tmp, tiny_llama, build={"kv_cache_reuse_mib": 3, "max_prefill_tokens": 48})
    result = _build(config)
    assert result.exit_code == 0, result.output
    engine_dir = in_tmp / "engines" / "tiny-ngram-cpu"
    runtime = json.loads((engine_dir / "engine.json").read_text())["runtime"]
    assert runtime["kv_cache_reuse_mib"] == 3 and runtime["max_prefill_tokens"] == 48
    with load_engine(engine_dir) as engine:
        assert engine.config.kv_cache_reuse_mib == 3 and engine.scheduler.reuse.kept.max_bytes == 3 << 20
        assert engine.config.max_prefill_tokens == 48


@pytest.mark.parametrize("head_dtype", ["float32", "bfloat16"])
def test_the_heads_dtype_reaches_the_loaded_engine(head_dtype, in_tmp, tiny_llama):
    """speculative.eagle3.head_dtype: engine.json's runtime, then the kernel of every head linear."""
    from trtspec.runtime.forward.linear_choice import ROWDOT_BF16
    from trtspec.runtime.kernels import rowdot
    from trtspec.runtime.loading import load_engine

    if head_dtype == "bfloat16" and (why := rowdot.bfloat16_unavailable()) is not None:
        pytest.skip(f"the bfloat16 row kernel cannot run here: {why}")
    config = write_workspace(in_tmp, tiny_llama, eagle3=True, speculative={"mode": "eagle3",
                                                                           "eagle3": {"head_dtype": head_dtype}})
    result = _build(config)
    assert result.exit_code == 0, result.output
    engine_dir = in_tmp / "engines" / "tiny-eagle3-cpu"
    assert json.loads((engine_dir / "engine.json").read_text())["runtime"]["head_dtype"] == head_dtype
    with load_engine(engine_dir) as engine:
        kernels = {m.kernel for m in engine.drafter.head.modules() if type(m).__name__ == "PackedLinear"}
        assert (ROWDOT_BF16 in kernels) == (head_dtype == "bfloat16") and kernels


def test_a_head_made_for_another_target_is_refused(in_tmp, tiny_llama, tiny_llama_draft):
    config = write_workspace(in_tmp, tiny_llama)
    # a head whose manifest names the draft model as its target
    make_eagle3_head(in_tmp / "work" / "checkpoints" / "eagle3", tiny_llama,
                     target_sha256=artifacts.weights_sha256(tiny_llama_draft))
    result = _build(config, "--mode", "eagle3")
    assert result.exit_code == 1
    assert "was made for target" in result.output and "re-run `trtspec convert`" in result.output
    assert not (in_tmp / "engines").exists()


def test_a_converted_draft_for_another_target_is_refused(in_tmp, tiny_llama, tiny_llama_draft):
    config = write_workspace(in_tmp, tiny_llama, draft=tiny_llama_draft)
    draft_dir = in_tmp / "work" / "checkpoints" / "draft"
    cpu.link_tree(tiny_llama_draft, draft_dir)
    artifacts.write_manifest(draft_dir, "draft", source=str(tiny_llama_draft), target_sha256="0" * 64,
                             weights_sha256=artifacts.weights_sha256(draft_dir), inputs={})
    result = _build(config, "--mode", "draft-target")
    assert result.exit_code == 1 and "was made for target 000000000000" in result.output


def test_a_draft_with_another_vocabulary_is_refused(in_tmp, tiny_llama, tmp_path_factory):
    from trtspec.testing.tiny import make_tiny_llama

    other = make_tiny_llama(tmp_path_factory.mktemp("vocab256"), seed=2, vocab_size=256, num_hidden_layers=1)
    config = write_workspace(in_tmp, tiny_llama, draft=other)
    result = _build(config, "--mode", "draft-target")
    assert result.exit_code == 1 and "draft vocab_size 256 differs from the target's 512" in result.output


def test_a_missing_head_names_the_convert_step(in_tmp, tiny_llama):
    config = write_workspace(in_tmp, tiny_llama)
    result = _build(config, "--mode", "eagle3")
    assert result.exit_code == 1 and "trtspec convert --mode eagle3" in result.output


@pytest.mark.slow
def test_smollm2_cpu_build(in_tmp, smollm2):
    config = in_tmp / "trtspec.yaml"
    config.write_text("model: {source: smollm2}\nspeculative: {mode: ngram}\n")
    result = _build(config)
    assert result.exit_code == 0, result.output
    engine_dir = in_tmp / "engines" / "smollm2-ngram-cpu"
    engine = json.loads((engine_dir / "engine.json").read_text())
    assert engine["target"]["source"] == "smollm2" and engine["runtime"]["ngram_max"] == 3
    _check_smoke(engine_dir)


def test_cpu_fp8_build_serves_the_modelopt_checkpoint_with_its_draft(in_tmp, tiny_llama, tiny_llama_draft, fp8_target):
    config = write_workspace(in_tmp, tiny_llama, draft=tiny_llama_draft, fp8_target=fp8_target)
    result = _build(config, "--mode", "draft-target", "--fp8")
    assert result.exit_code == 0, result.output
    engine_dir = in_tmp / "engines" / "tiny-draft-target-fp8-cpu"
    engine = json.loads((engine_dir / "engine.json").read_text())
    assert (engine_dir / "target" / "hf_quant_config.json").exists()
    assert engine["target"]["sha256"] == artifacts.weights_sha256(fp8_target)
    # the draft was paired with the unquantized target; the engine serves the FP8 one
    assert engine["draft"]["made_for_sha256"] == artifacts.weights_sha256(tiny_llama)
    assert engine["draft"]["target_sha256"] == engine["target"]["sha256"]
    _check_smoke(engine_dir)


@pytest.mark.parametrize("prepack", [None, False, True], ids=["default", "false", "true"])
def test_build_prepack_reaches_the_loaded_engine(prepack, in_tmp, tiny_llama, tiny_llama_draft):
    """build.prepack is written into engine.json's runtime block and the engine loads by it:
    plain nn.Linear everywhere with `false`, no plain nn.Linear left by default (target and draft)."""
    import torch

    from trtspec.runtime import load_engine
    from trtspec.runtime.forward.prepack import available

    config = write_workspace(in_tmp, tiny_llama, draft=tiny_llama_draft,
                             **({"build": {"prepack": prepack}} if prepack is not None else {}))
    result = _build(config, "--mode", "draft-target")
    assert result.exit_code == 0, result.output
    engine_dir = in_tmp / "engines" / "tiny-draft-target-cpu"
    expected = prepack is not False
    assert json.loads((engine_dir / "engine.json").read_text())["runtime"]["prepack"] is expected
    engine = load_engine(engine_dir)
    for model in (engine.target, engine.drafter.model):
        plain = sum(type(m) is torch.nn.Linear for m in model.modules())
        packed = sum(type(m).__name__ == "PackedLinear" for m in model.modules())
        if expected and available():
            assert plain == 0 and packed == 7 * model.config.num_hidden_layers + 1  # + lm_head
        else:
            assert packed == 0 and plain == 7 * model.config.num_hidden_layers + 1
