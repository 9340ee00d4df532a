"""`trtspec convert --mode eagle3 --head` from a local hub cache (HF_HUB_OFFLINE=1), into cpu and
trtllm builds and `trtspec export-head`; every failure family refused in one line, nothing written."""

from __future__ import annotations

import json
import shutil

import pytest
import yaml
from click.testing import CliRunner

from tests.convert.conftest import write_spec

REVISION = "0123456789abcdef0123456789abcdef01234567"


def cli(*args):
    from trtspec.cli import main

    return CliRunner().invoke(main, list(args))


def one_error_line(result) -> str:
    assert result.exit_code != 0, result.output
    lines = [line for line in result.stderr.splitlines() if line.startswith("error:")]
    assert len(lines) == 1, result.stderr  # one line, no traceback
    return lines[0]


@pytest.fixture
def hub_home(tmp_path, monkeypatch, tool_heads):
    """HF_HOME with huggingface_hub's cache layout holding acme/tiny-eagle3 (the speculators head), offline."""
    repo = tmp_path / "hf" / "hub" / "models--acme--tiny-eagle3"
    shutil.copytree(tool_heads["speculators"], repo / "snapshots" / REVISION)
    (repo / "refs").mkdir()
    (repo / "refs" / "main").write_text(REVISION)
    monkeypatch.setenv("HF_HOME", str(tmp_path / "hf"))
    monkeypatch.delenv("HF_HUB_CACHE", raising=False)
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    return tmp_path / "hf"


def test_head_from_the_hub_cache_builds_for_cpu_and_trtllm_and_exports(in_tmp, hub_home, target8):
    spec = write_spec(in_tmp, target8, speculative={"mode": "eagle3", "max_draft_len": 4})
    result = cli("convert", "-c", str(spec), "--head", "acme/tiny-eagle3")
    assert result.exit_code == 0, result.output
    assert "imported EAGLE-3 head: speculators layout, reads the outputs of target layers [1, 3, 4]" in result.stdout
    head = in_tmp / "work" / "checkpoints" / "eagle3"
    manifest = json.loads((head / "manifest.json").read_text())
    assert manifest["source"] == "acme/tiny-eagle3" and manifest["head"]["layout"] == "speculators"
    assert manifest["head"]["layer_ids"] == [1, 3, 4] and manifest["head"]["layer_ids_written"] == [2, 4, 5]
    assert manifest["head"]["forward"] == "norm_before_residual" and manifest["target_sha256"]
    assert "up to date, skipped" in cli("convert", "-c", str(spec), "--head", "acme/tiny-eagle3").stdout

    built = cli("build", "-c", str(spec), "--json")
    assert built.exit_code == 0, built.output
    assert json.loads(built.stdout)["smoke"]["status"] == "ok"
    trtllm = cli("build", "-c", str(spec), "--backend", "trtllm", "--json")
    assert trtllm.exit_code == 0, trtllm.output
    engine = json.loads(trtllm.stdout)["engine_dir"]
    note = json.loads(trtllm.stdout)["engine"]["trtllm"]["eagle3_head"]["forward_note"]
    assert "norm_before_residual" in note and "TensorRT-LLM's Eagle3DecoderLayer computes hidden_norm(h)" in note
    options = yaml.safe_load((in_tmp / engine / "llm_api_options.yaml").read_text()
                             if not engine.startswith("/") else open(f"{engine}/llm_api_options.yaml").read())
    assert options["speculative_config"]["eagle3_layers_to_capture"] == [1, 3, 4]
    from safetensors import safe_open

    with safe_open(f"{in_tmp / engine if not engine.startswith('/') else engine}/draft/model.safetensors", "pt") as f:
        assert "midlayer.hidden_norm.weight" in f.keys()

    exported = cli("export-head", "-c", str(spec), "--format", "eagle", str(in_tmp / "for-vllm"))
    assert exported.exit_code == 0, exported.output
    assert "outputs of [1, 3, 4] = inputs of [2, 4, 5]" in exported.stdout
    assert "already exists" in one_error_line(cli("export-head", "-c", str(spec), "--format", "eagle",
                                                  str(in_tmp / "for-vllm")))


def test_a_hub_id_missing_from_the_offline_cache_is_one_line(in_tmp, hub_home, target8):
    spec = write_spec(in_tmp, target8)  # mode none: --head implies --mode eagle3
    line = one_error_line(cli("convert", "-c", str(spec), "--head", "acme/not-cached"))
    assert "not in the Hugging Face cache" in line and "HF_HUB_OFFLINE" in line
    assert not (in_tmp / "work" / "checkpoints" / "eagle3").exists()


def _edit(directory, config=None, tensors=None, drop=()):
    from safetensors.torch import load_file, save_file

    path = directory / "config.json"
    data = json.loads(path.read_text())
    for key in drop:
        data.pop(key, None)
    path.write_text(json.dumps({**data, **(config or {})}))
    if tensors:
        state = load_file(str(directory / "model.safetensors"))
        state.update(tensors(state))
        save_file(state, str(directory / "model.safetensors"))


def _kept(state):
    import torch

    return torch.arange(state["d2t"].shape[0]) + state["d2t"]


FAMILIES = {
    "hidden_size": (lambda d: _edit(d, config={"hidden_size": 32}), "hidden_size 32"),
    "vocab_size": (lambda d: _edit(d, config={"vocab_size": 1000}), "vocab_size 1000"),
    "d2t length": (lambda d: _edit(d, tensors=lambda s: {"d2t": s["d2t"][:100]}), "d2t has shape [100]"),
    "d2t meaning": (lambda d: _edit(d, tensors=lambda s: {"d2t": _kept(s)}), "d2t holds target ids, not offsets"),
    "draft vocab above target": (lambda d: _edit(d, config={"draft_vocab_size": 600}),
                                 "draft_vocab_size 600 is above the target's vocabulary 512"),
    "embed_tokens copy": (lambda d: _edit(d, tensors=lambda s: {"embed_tokens.weight": s["embed_tokens.weight"] * 1.01}),
                          "embed_tokens.weight differs from the target's"),
    "max_position_embeddings": (lambda d: _edit(d, config={"max_position_embeddings": 1024}),
                                "max_position_embeddings 1024 (rope scaling reaches 1024) is below build.max_seq_len"),
    "rope_theta": (lambda d: _edit(d, drop=("rope_theta",)), "rope_theta is not written"),
    "rope_scaling": (lambda d: _edit(d, config={"rope_scaling": {"rope_type": "bogus", "factor": 2.0}}),
                     "not a rope transformers can compute"),
    "layer ids": (lambda d: _edit(d, config={"eagle_config": {"eagle_aux_hidden_state_layer_ids": [1, 3, 9]}}),
                  "outside the target's 8 layers"),
    "not a head": (lambda d: _edit(d, drop=("draft_vocab_size", "eagle_config")),
                   "neither draft_vocab_size nor eagle_config"),
    "no weights": (lambda d: (d / "model.safetensors").unlink(), "no *.safetensors or *.bin weights"),
}


@pytest.mark.parametrize("family", FAMILIES)
def test_each_failure_family_is_refused_in_one_line_before_anything_is_written(family, in_tmp, tool_heads, target8):
    broken = shutil.copytree(tool_heads["specforge"], in_tmp / "head")  # carries embed_tokens, t2d and d2t
    mutate, expected = FAMILIES[family]
    mutate(broken)
    spec = write_spec(in_tmp, target8, speculative={"mode": "eagle3"})
    line = one_error_line(cli("convert", "-c", str(spec), "--head", str(broken)))
    assert expected in line and "; " in line, line  # the field, what is wrong; then the fix
    assert not (in_tmp / "work" / "checkpoints" / "eagle3").exists()
