"""The two layer-id conventions and what counts as a hub id (pure functions)."""

from __future__ import annotations

from trtspec import hub
from trtspec.convert.eagle3.heads import conventions as conv


def test_the_two_defaults_name_the_same_layers():
    for layers in (8, 30, 32, 80):
        output, inputs = conv.default_ids(layers, conv.OUTPUT), conv.default_ids(layers, conv.INPUT)
        assert inputs == [2, layers // 2, layers - 3]          # EAGLE code, speculators, vLLM
        assert output == [1, layers // 2 - 1, layers - 4]      # ModelOpt, SpecForge, TensorRT-LLM
        assert conv.to_output(inputs, conv.INPUT) == output
        assert conv.from_output(output, conv.INPUT) == inputs and conv.from_output(output, conv.OUTPUT) == output
    # lmsys' Qwen3-235B head converted to speculators kept [1, 46, 90]: read as inputs, one layer early
    assert conv.to_output([1, 46, 90], conv.INPUT) == [0, 45, 89]


def test_hub_ids_and_paths(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    assert hub.is_hub_id("yuhuili/EAGLE3-LLaMA3.1-Instruct-8B") and hub.is_hub_id("org/name@v1.0")
    assert not hub.is_hub_id("./org/name") and not hub.is_hub_id("/abs/path") and not hub.is_hub_id("~/x/y")
    assert not hub.is_hub_id("smollm2") and not hub.is_hub_id("a/b/c")
    (tmp_path / "org" / "name").mkdir(parents=True)
    assert not hub.is_hub_id("org/name")                       # it exists on disk: a path
    monkeypatch.setenv("HF_HOME", str(tmp_path / "home"))
    monkeypatch.delenv("HF_HUB_CACHE", raising=False)
    assert hub.cache_dir() == tmp_path / "home" / "hub"
    monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path / "cache"))
    assert hub.cache_dir() == tmp_path / "cache"
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    assert hub.offline()
