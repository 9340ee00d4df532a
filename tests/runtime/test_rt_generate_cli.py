"""`trtspec generate` on a tiny engine bundle, through click's CliRunner."""

from __future__ import annotations

import json
import shutil

import pytest
from click.testing import CliRunner

from trtspec.cli import main


@pytest.fixture(scope="module")
def tiny_bundle(tiny_llama, tmp_path_factory):
    root = tmp_path_factory.mktemp("engine")
    shutil.copytree(tiny_llama, root / "target")
    (root / "engine.json").write_text(json.dumps({
        "format": "trtspec-engine/1", "trtspec_version": "0.1.0", "name": "tiny-ngram-cpu", "backend": "cpu",
        "mode": "ngram", "build_config": {"max_input_len": 256, "max_seq_len": 512, "max_draft_len": 4},
        "target": {"path": "target", "sha256": "x", "source": "tiny"}, "draft": None,
        "runtime": {"ngram_min": 1, "ngram_max": 3}}))
    return root


def test_generate_json(tiny_bundle):
    out = CliRunner().invoke(main, ["generate", "--engine", str(tiny_bundle), "the quick brown fox",
                                    "--max-tokens", "12", "--json"])
    assert out.exit_code == 0, out.output
    data = json.loads(out.stdout)
    assert data["num_output_tokens"] <= 12 and data["finish_reason"] in ("length", "stop")
    assert data["mode"] == "ngram" and "mean_acceptance_length" in data["stats"]
    plain = CliRunner().invoke(main, ["generate", "--engine", str(tiny_bundle), "the quick brown fox",
                                      "--max-tokens", "12", "--json", "--no-spec"])
    assert json.loads(plain.stdout)["token_ids"] == data["token_ids"]


def test_generate_streams_text_and_reports_stats(tiny_bundle):
    out = CliRunner().invoke(main, ["generate", "--engine", str(tiny_bundle), "1 2 3 4 5", "--max-tokens", "8",
                                    "--temperature", "0.7", "--seed", "3"])
    assert out.exit_code == 0, out.output
    assert "tok/s" in out.stderr and "acceptance" in out.stderr


def test_generate_rejects_bad_arguments_in_one_line(tiny_bundle):
    out = CliRunner().invoke(main, ["generate", "--engine", str(tiny_bundle), "hi", "--top-p", "0"])
    assert out.exit_code == 2
    errors = [line for line in out.stderr.splitlines() if line.startswith("error:")]
    assert len(errors) == 1 and "--top-p: must be in (0, 1]" in errors[0]
    assert "Loading weights" not in out.stderr


def test_generate_without_engine_says_how_to_build(in_tmp):
    out = CliRunner().invoke(main, ["generate", "--engine", "nowhere", "hi"])
    assert out.exit_code != 0 and "trtspec build" in out.stderr
