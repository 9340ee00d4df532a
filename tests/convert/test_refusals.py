"""Bad inputs get one-line errors naming the problem (and no checkpoint is written)."""

from __future__ import annotations

import json
import shutil

import pytest

from tests.convert.conftest import write_spec
from trtspec.errors import IncompatibleArtifactError, ModelSourceError


def _cli_error(spec, *args):
    from click.testing import CliRunner

    from trtspec.cli import main

    result = CliRunner().invoke(main, ["convert", "-c", str(spec), *args])
    assert result.exit_code != 0
    lines = [line for line in result.stderr.splitlines() if line.startswith("error:")]
    assert len(lines) == 1, result.stderr  # one line, no traceback
    return lines[0]


def test_missing_checkpoint(in_tmp):
    spec = write_spec(in_tmp, in_tmp / "nowhere")
    assert "nowhere: not a directory" in _cli_error(spec)
    assert not (in_tmp / "work").exists()


def test_corrupt_checkpoint(in_tmp, tiny_llama):
    broken = shutil.copytree(tiny_llama, in_tmp / "broken")
    weights = broken / "model.safetensors"
    weights.write_bytes(weights.read_bytes()[:1000])
    assert "corrupt safetensors file" in _cli_error(write_spec(in_tmp, broken))


def test_not_a_causal_lm(in_tmp, tiny_llama):
    encoder = shutil.copytree(tiny_llama, in_tmp / "encoder")
    config = json.loads((encoder / "config.json").read_text())
    config["architectures"] = ["LlamaModel"]
    (encoder / "config.json").write_text(json.dumps(config))
    assert "is not a causal LM" in _cli_error(write_spec(in_tmp, encoder))


def test_empty_prompt_file(in_tmp, tiny_llama):
    empty = in_tmp / "empty.jsonl"
    empty.write_text("\n")
    spec = write_spec(in_tmp, tiny_llama, quantization={"calibration_prompts": str(empty)})
    assert "the prompt file is empty" in _cli_error(spec, "--fp8")


def test_draft_larger_than_target(tiny_llama, tiny_llama_draft):
    from trtspec.convert.draft import check_pair

    with pytest.raises(IncompatibleArtifactError, match="not fewer than the target"):
        check_pair(tiny_llama_draft, tiny_llama)


def test_vocab_size_mismatch_uses_config_not_tokenizer(tmp_path, tiny_llama, tiny_llama_draft):
    """Same tokenizer, but config.json vocab_size padded differently (TensorRT-LLM PR #3615)."""
    from trtspec.convert.draft import check_pair

    draft = shutil.copytree(tiny_llama_draft, tmp_path / "padded")
    config = json.loads((draft / "config.json").read_text())
    config["vocab_size"] = 576
    (draft / "config.json").write_text(json.dumps(config))
    with pytest.raises(IncompatibleArtifactError, match="vocab_size mismatch in config.json: target 512, draft 576"):
        check_pair(tiny_llama, draft)


def test_token_id_mismatch(tmp_path, tiny_llama, tiny_llama_draft):
    """Same vocab_size in config.json, but a tokenizer trained differently."""
    from trtspec.convert.draft import check_pair
    from trtspec.testing.tiny import make_tokenizer

    draft = shutil.copytree(tiny_llama_draft, tmp_path / "other-tokenizer")
    make_tokenizer(300).save_pretrained(draft)  # config.json still says 512
    with pytest.raises(IncompatibleArtifactError, match="token ids differ on probe text"):
        check_pair(tiny_llama, draft)


def test_special_token_mismatch(tmp_path, tiny_llama, tiny_llama_draft):
    from trtspec.convert.draft import check_pair

    draft = shutil.copytree(tiny_llama_draft, tmp_path / "other-eos")
    config_path = draft / "tokenizer_config.json"
    config = json.loads(config_path.read_text())
    config["eos_token"] = "<|endoftext|>"
    config_path.write_text(json.dumps(config))
    with pytest.raises(IncompatibleArtifactError, match="special token eos_token differs"):
        check_pair(tiny_llama, draft)


def test_cli_refuses_mismatched_draft(in_tmp, tiny_llama, tiny_llama_draft):
    draft = shutil.copytree(tiny_llama_draft, in_tmp / "padded")
    config = json.loads((draft / "config.json").read_text())
    config["vocab_size"] = 576
    (draft / "config.json").write_text(json.dumps(config))
    spec = write_spec(in_tmp, tiny_llama)
    assert "vocab_size mismatch" in _cli_error(spec, "--mode", "draft-target", "--draft", str(draft))
    assert not (in_tmp / "work" / "checkpoints" / "draft").exists()


def test_eagle3_needs_three_layers():
    from trtspec.convert.eagle3.train import aux_layer_ids

    assert aux_layer_ids(30) == [1, 14, 26]  # ModelOpt's default for SmolLM2's 30 layers
    assert aux_layer_ids(4) == [0, 2, 3]
    with pytest.raises(ModelSourceError, match="EAGLE-3 needs at least 3"):
        aux_layer_ids(2)
