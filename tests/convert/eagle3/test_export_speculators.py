"""`export-head --format speculators` names a verifier speculators can resolve, never an alias, and the
speculators release whose config class reads the layout (speculators itself loads it: tests/peers)."""

from __future__ import annotations

from pathlib import Path

from trtspec.convert.eagle3.heads.export import SPECULATORS_VERSION, resolve_verifier


def test_a_named_verifier_wins_and_a_path_is_made_absolute(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "mine").mkdir()
    assert resolve_verifier("smollm2", tmp_path / "t", "mine") == str((tmp_path / "mine").resolve())
    assert resolve_verifier("smollm2", tmp_path / "t", "acme/target") == "acme/target"


def test_a_hub_id_is_kept_without_its_revision(tmp_path):
    assert resolve_verifier("HuggingFaceTB/SmolLM2-135M-Instruct", tmp_path) == "HuggingFaceTB/SmolLM2-135M-Instruct"
    assert resolve_verifier("acme/target@0123abcd", tmp_path) == "acme/target"


def test_a_local_checkpoint_is_its_absolute_directory(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "ckpt").mkdir()
    (tmp_path / "ckpt" / "config.json").write_text("{}")
    assert resolve_verifier("ckpt", tmp_path / "work" / "target") == str((tmp_path / "ckpt").resolve())


def test_an_alias_or_a_gguf_is_the_converted_target(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "model.gguf").write_bytes(b"GGUF")
    target = Path("work") / "checkpoints" / "target"
    for source in ("smollm2", "model.gguf"):
        resolved = resolve_verifier(source, target)
        assert resolved == str((tmp_path / target).resolve()) and Path(resolved).is_absolute()


def test_the_layout_is_speculators_0_9_0s():
    assert SPECULATORS_VERSION == "0.9.0"
