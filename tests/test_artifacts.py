"""Artifacts: atomic directories, manifests, skip-on-rerun, weight hashes."""

from __future__ import annotations

import pytest

from trtspec import artifacts
from trtspec.errors import TrtSpecError
from trtspec.spec.schema import Spec


def test_atomic_dir_replaces_only_on_success(tmp_path):
    final = tmp_path / "ckpt"
    with artifacts.atomic_dir(final) as staging:
        (staging / "a.txt").write_text("first")
    assert (final / "a.txt").read_text() == "first"

    with pytest.raises(RuntimeError):
        with artifacts.atomic_dir(final) as staging:
            (staging / "a.txt").write_text("half-written")
            raise RuntimeError("interrupted")
    assert (final / "a.txt").read_text() == "first"
    assert [p.name for p in tmp_path.iterdir()] == ["ckpt"]  # no staging left behind

    with artifacts.atomic_dir(final) as staging:
        (staging / "b.txt").write_text("second")
    assert sorted(p.name for p in final.iterdir()) == ["b.txt"]
    assert [p.name for p in tmp_path.iterdir()] == ["ckpt"]


def test_manifest_records_versions_and_inputs(tmp_path):
    artifacts.write_manifest(tmp_path, "target", inputs={"source": "x", "fp8": False}, weights_sha256="abc")
    manifest = artifacts.read_manifest(tmp_path)
    assert manifest["kind"] == "target" and manifest["versions"]["trtspec"]
    assert artifacts.is_up_to_date(tmp_path, {"source": "x", "fp8": False})
    assert not artifacts.is_up_to_date(tmp_path, {"source": "x", "fp8": True})
    assert not artifacts.is_up_to_date(tmp_path / "missing", {"source": "x"})


def test_weights_hash_tracks_content_not_location(tmp_path):
    one, two = tmp_path / "one", tmp_path / "two"
    for directory in (one, two):
        directory.mkdir()
        (directory / "model.safetensors").write_bytes(b"weights")
        (directory / "config.json").write_text("{}")
    assert artifacts.weights_sha256(one) == artifacts.weights_sha256(two)
    (two / "config.json").write_text('{"edited": true}')
    assert artifacts.weights_sha256(one) == artifacts.weights_sha256(two)
    (two / "model.safetensors").write_bytes(b"other")
    assert artifacts.weights_sha256(one) != artifacts.weights_sha256(two)
    with pytest.raises(TrtSpecError, match="no weight files"):
        artifacts.weights_sha256(_empty(tmp_path))


def _empty(tmp_path):
    empty = tmp_path / "empty"
    empty.mkdir()
    return empty


def test_layout_and_engine_names():
    layout = artifacts.Layout.from_spec(Spec())
    assert str(layout.checkpoint("eagle3")) == "work/checkpoints/eagle3"
    assert str(layout.engine_dir("x")) == "engines/x"
    assert artifacts.engine_name("smollm2", "ngram", "cpu", False) == "smollm2-ngram-cpu"
    assert artifacts.engine_name("llama", "eagle3", "trtllm", True) == "llama-eagle3-fp8-trtllm"


def test_cache_root_follows_env(monkeypatch, tmp_path):
    monkeypatch.setenv("TRTSPEC_CACHE", str(tmp_path))
    assert artifacts.model_cache_dir("smollm2") == tmp_path / "models" / "smollm2"
