"""Model sources: HF directories are checked, corrupt inputs refused in one line, SmolLM2 is real."""

from __future__ import annotations

import json
import shutil

import pytest
from click.testing import CliRunner

from trtspec.cli import main
from trtspec.errors import ModelSourceError
from trtspec.models import check_checkpoint, resolve_model


def copy_model(src, tmp_path, name="m"):
    return shutil.copytree(src, tmp_path / name)


def test_hf_directory_resolves_with_hash(tiny_llama):
    info = resolve_model(str(tiny_llama))
    assert info.path == tiny_llama
    assert len(info.sha256) == 64
    assert info.summary()["num_hidden_layers"] == 4
    assert resolve_model(str(tiny_llama)).sha256 == info.sha256


def test_missing_config_is_refused(tiny_llama, tmp_path):
    model = copy_model(tiny_llama, tmp_path)
    (model / "config.json").unlink()
    with pytest.raises(ModelSourceError, match="no config.json"):
        check_checkpoint(model, name="m")


def test_truncated_safetensors_is_refused(tiny_llama, tmp_path):
    model = copy_model(tiny_llama, tmp_path)
    weights = model / "model.safetensors"
    data = weights.read_bytes()
    weights.write_bytes(data[: len(data) // 2])
    with pytest.raises(ModelSourceError, match="truncated safetensors"):
        check_checkpoint(model, name="m")


def test_garbage_safetensors_is_refused(tiny_llama, tmp_path):
    model = copy_model(tiny_llama, tmp_path)
    (model / "model.safetensors").write_bytes(b"\xff" * 64)
    with pytest.raises(ModelSourceError, match="corrupt safetensors"):
        check_checkpoint(model, name="m")


def test_not_a_causal_lm_is_refused(tiny_llama, tmp_path):
    model = copy_model(tiny_llama, tmp_path)
    config = json.loads((model / "config.json").read_text())
    config["architectures"] = ["BertForSequenceClassification"]
    (model / "config.json").write_text(json.dumps(config))
    with pytest.raises(ModelSourceError, match="not a causal LM"):
        check_checkpoint(model, name="m")


def test_remote_code_needs_consent(tiny_llama, tmp_path):
    model = copy_model(tiny_llama, tmp_path)
    config = json.loads((model / "config.json").read_text())
    config["auto_map"] = {"AutoModelForCausalLM": "modeling_x.X"}
    (model / "config.json").write_text(json.dumps(config))
    with pytest.raises(ModelSourceError, match="trust_remote_code"):
        check_checkpoint(model, name="m")
    assert check_checkpoint(model, name="m", trust_remote_code=True).name == "m"


def test_unknown_source_is_one_line_cli_error(in_tmp):
    result = CliRunner().invoke(main, ["models", "show", "no-such-model"])
    assert result.exit_code == 1
    assert result.output.count("\n") == 1 and "not a directory, a .gguf file or a known alias" in result.output


@pytest.mark.slow
def test_smollm2_fetch_gives_the_real_model(smollm2):
    from transformers import AutoConfig, AutoModelForCausalLM

    result = CliRunner().invoke(main, ["models", "fetch", "smollm2", "--json"])
    assert result.exit_code == 0, result.output
    summary = json.loads(result.output)
    assert summary["path"] == str(smollm2)
    config = AutoConfig.from_pretrained(smollm2)
    assert (config.num_hidden_layers, config.hidden_size, config.vocab_size) == (30, 576, 49152)
    model = AutoModelForCausalLM.from_pretrained(smollm2)
    assert model.config.architectures == ["LlamaForCausalLM"]


def test_source_problem_is_cheap_and_names_the_fix(tiny_llama, tmp_path):
    from trtspec.models import source_problem

    assert source_problem("smollm2") is None
    assert source_problem(str(tiny_llama)) is None
    assert source_problem(str(tmp_path)) == ("no config.json", "point at a Hugging Face checkpoint directory")
    assert source_problem(str(tmp_path / "x.gguf")) == ("GGUF file not found", "check the path")
    problem, fix = source_problem("no-such-model")
    assert problem.startswith("not a directory, a .gguf file or a known alias") and "directory" in fix
    with pytest.raises(ModelSourceError, match="not a directory, a .gguf file or a known alias"):
        resolve_model("no-such-model")
    assert source_problem("meta-llama/Llama-3.1-8B") is None  # a hub id: checked once fetched


def test_a_hub_id_resolves_from_the_local_hub_cache(tiny_llama, tmp_path, monkeypatch):
    """huggingface_hub's cache layout under HF_HOME, HF_HUB_OFFLINE=1: no network."""
    import shutil

    revision = "89abcdef" * 5
    repo = tmp_path / "hub" / "models--acme--tiny"
    shutil.copytree(tiny_llama, repo / "snapshots" / revision)
    (repo / "refs").mkdir()
    (repo / "refs" / "main").write_text(revision)
    monkeypatch.setenv("HF_HOME", str(tmp_path))
    monkeypatch.delenv("HF_HUB_CACHE", raising=False)
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    info = resolve_model("acme/tiny")
    assert info.path == repo / "snapshots" / revision and info.name == "tiny"
    assert info.sha256 == resolve_model(str(tiny_llama)).sha256
    with pytest.raises(ModelSourceError, match="not in the Hugging Face cache .* HF_HUB_OFFLINE is set"):
        resolve_model("acme/other")


DECODE = """
import sys
from transformers import AutoTokenizer
tokenizer = AutoTokenizer.from_pretrained(sys.argv[1])
print(repr(tokenizer.decode(tokenizer("Hello , world . It's 7 kg !")["input_ids"])))
"""


@pytest.mark.slow
def test_cached_tokenizer_is_settled_without_changing_text(smollm2, tmp_path):
    """A cache written before the fix warns on every decode; settling it silences that and
    decodes the same text (transformers already ignored the cleanup for this BPE tokenizer)."""
    import subprocess
    import sys

    from trtspec.models import settle_tokenizer_config

    old = tmp_path / "old-cache"
    old.mkdir()
    for name in ("tokenizer.json", "tokenizer_config.json", "chat_template.jinja"):
        shutil.copy(smollm2 / name, old / name)
    config = json.loads((old / "tokenizer_config.json").read_text())
    (old / "tokenizer_config.json").write_text(json.dumps({**config, "clean_up_tokenization_spaces": True}))

    def decode():
        done = subprocess.run([sys.executable, "-c", DECODE, str(old)], capture_output=True, text=True, check=True)
        return done.stdout, done.stderr

    text_before, stderr_before = decode()
    assert "clean_up_tokenization_spaces" in stderr_before  # the noise this fixes is real
    assert settle_tokenizer_config(old) is True and settle_tokenizer_config(old) is False
    text_after, stderr_after = decode()
    assert text_after == text_before == repr("Hello , world . It's 7 kg !") + "\n"
    assert "clean_up_tokenization_spaces" not in stderr_after and stderr_after.strip() == ""
    assert json.loads((smollm2 / "tokenizer_config.json").read_text())["clean_up_tokenization_spaces"] is False
