"""Hub ids everywhere a model goes (model.source, speculative.draft, speculative.eagle3.head), from a
local huggingface_hub cache with HF_HUB_OFFLINE=1; `trtspec init --model ...` writes the spec."""

from __future__ import annotations

import json
import shutil

import yaml

from tests.convert.heads.test_heads_cli import cli, one_error_line


def _cache(root, repo_id, source):
    revision = (repo_id.replace("/", "").encode().hex() * 40)[:40]
    repo = root / "hub" / f"models--{repo_id.replace('/', '--')}"
    shutil.copytree(source, repo / "snapshots" / revision)
    (repo / "refs").mkdir()
    (repo / "refs" / "main").write_text(revision)


def _offline(monkeypatch, root):
    monkeypatch.setenv("HF_HOME", str(root))
    monkeypatch.delenv("HF_HUB_CACHE", raising=False)
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")


def test_init_model_and_head_from_the_hub_then_convert(in_tmp, monkeypatch, target8, tool_heads):
    _cache(in_tmp / "hf", "acme/tiny8", target8)
    _cache(in_tmp / "hf", "acme/tiny8-eagle3", tool_heads["eagle"])
    _offline(monkeypatch, in_tmp / "hf")
    written = cli("init", "--model", "acme/tiny8", "--head", "acme/tiny8-eagle3", "--backend", "trtllm")
    assert written.exit_code == 0, written.output
    text = (in_tmp / "trtspec.yaml").read_text()
    assert text.startswith("# trtspec.yaml") and "trtspec init --model acme/tiny8 --head acme/tiny8-eagle3" in text
    spec = yaml.safe_load(text)
    assert spec["model"]["source"] == "acme/tiny8" and spec["speculative"]["mode"] == "eagle3"
    assert spec["speculative"]["eagle3"]["head"] == "acme/tiny8-eagle3" and spec["build"]["backend"] == "trtllm"
    assert cli("spec", "check").exit_code == 0
    converted = cli("convert", "--json")
    assert converted.exit_code == 0, converted.output
    kinds = {c["kind"]: c for c in json.loads(converted.stdout)["checkpoints"]}
    assert kinds["eagle3"]["status"] == "written" and kinds["eagle3"]["report"]["head"]["layout"] == "eagle"
    target = json.loads((in_tmp / "work" / "checkpoints" / "target" / "manifest.json").read_text())
    assert target["source"] == "acme/tiny8" and "snapshots" in target["resolved_path"]


def test_init_refuses_what_a_spec_would_in_one_line(in_tmp):
    line = one_error_line(cli("init", "--model", "./missing-model"))
    assert "model.source: not a directory" in line
    line = one_error_line(cli("init", "--model", "smollm2", "--head", "acme/h", "--backend", "trtllm-engine"))
    assert "EAGLE-3 needs the LLM-API backend" in line
    assert not (in_tmp / "trtspec.yaml").exists()


def test_a_draft_from_the_hub_keeps_the_vocabulary_check(in_tmp, monkeypatch, target8, tmp_path_factory):
    from tests.convert.conftest import write_spec
    from trtspec.testing.tiny import make_tiny_llama

    small = make_tiny_llama(tmp_path_factory.mktemp("small"), seed=2, num_hidden_layers=1)
    other = make_tiny_llama(tmp_path_factory.mktemp("other"), seed=2, num_hidden_layers=1, vocab_size=384)
    _cache(in_tmp / "hf", "acme/small", small)
    _cache(in_tmp / "hf", "acme/other-vocab", other)
    _offline(monkeypatch, in_tmp / "hf")
    spec = write_spec(in_tmp, target8, speculative={"mode": "draft-target", "draft": "acme/small"})
    result = cli("convert", "-c", str(spec), "--json")
    assert result.exit_code == 0, result.output
    draft = json.loads((in_tmp / "work" / "checkpoints" / "draft" / "manifest.json").read_text())
    assert draft["source"] == "acme/small"
    line = one_error_line(cli("convert", "-c", str(spec), "--draft", "acme/other-vocab"))
    assert "vocab_size" in line


def test_plan_reads_only_the_config_of_a_hub_model(in_tmp, monkeypatch):
    """A 70B target planned from its hub id with only config.json in the cache (no weights fetched)."""
    from pathlib import Path

    configs = Path(__file__).resolve().parents[2] / "builders" / "configs"
    only_config = in_tmp / "only-config"
    only_config.mkdir()
    shutil.copy(configs / "llama-3.1-70b.json", only_config / "config.json")
    _cache(in_tmp / "hf", "meta-llama/Llama-3.1-70B-Instruct", only_config)
    _offline(monkeypatch, in_tmp / "hf")
    (in_tmp / "trtspec.yaml").write_text("model: {source: meta-llama/Llama-3.1-70B-Instruct}\n"
                                         "speculative: {mode: none}\nbuild: {backend: trtllm, gpu: h100}\n")
    result = cli("plan", "--tp-size", "2", "--json")
    assert result.exit_code == 0, result.output
    assert json.loads(result.stdout)["fits"] is True
