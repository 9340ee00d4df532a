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
    # the one-time costs are paid by a warm-up first and reported apart, before the figures (issue 71)
    lines = out.stderr.splitlines()
    warm = [i for i, line in enumerate(lines) if line.startswith("[warm-up] ")]
    timed = [i for i, line in enumerate(lines) if line.startswith("[ngram] ")]
    assert len(warm) == 1 and len(timed) == 1 and warm[0] < timed[0], out.stderr
    assert "not in the figures below" in lines[warm[0]]
    cold = CliRunner().invoke(main, ["generate", "--engine", str(tiny_bundle), "1 2 3 4 5", "--max-tokens", "8",
                                     "--temperature", "0.7", "--seed", "3", "--no-warmup"])
    assert cold.exit_code == 0 and "warm-up" not in cold.stderr and "[ngram] " in cold.stderr
    assert cold.stdout == out.stdout  # the warm-up leaves the seeded answer as it was


def test_generate_compare_measures_both_alike_in_one_process(tiny_bundle):
    out = CliRunner().invoke(main, ["generate", "--engine", str(tiny_bundle), "1 2 3 4 5 1 2 3 4 5",
                                    "--max-tokens", "24", "--compare", "--json"])
    assert out.exit_code == 0, out.output
    data = json.loads(out.stdout)
    spec, plain = data["speculative"], data["plain"]
    assert spec["speculative"] is True and plain["speculative"] is False
    assert spec["token_ids"] == plain["token_ids"] and spec["text"] == plain["text"]  # greedy: lossless
    assert spec["warmup_seconds"] > 0 and plain["warmup_seconds"] > 0
    assert data["speedup"] == pytest.approx(spec["tokens_per_s"] / plain["tokens_per_s"])
    assert spec["stats"]["num_drafts"] > 0 and plain["stats"]["num_drafts"] == 0
    # the same keys as one run's --json
    single = json.loads(CliRunner().invoke(main, ["generate", "--engine", str(tiny_bundle), "1 2 3 4 5 1 2 3 4 5",
                                                  "--max-tokens", "24", "--json"]).stdout)
    assert set(single) == set(spec) and single["token_ids"] == spec["token_ids"]
    text = CliRunner().invoke(main, ["generate", "--engine", str(tiny_bundle), "1 2 3 4 5 1 2 3 4 5",
                                     "--max-tokens", "24", "--compare"])
    assert text.exit_code == 0, text.output
    assert [line.split("]")[0] for line in text.stderr.splitlines() if line.startswith("[")] == [
        "[warm-up", "[warm-up, no-spec", "[ngram", "[ngram, no-spec"]
    assert "speculative / plain: " in text.stderr and text.stdout.count(spec["text"].strip()) == 1


def test_generate_compare_repeats_gives_the_median_of_alternating_rounds(tiny_bundle):
    out = CliRunner().invoke(main, ["generate", "--engine", str(tiny_bundle), "1 2 3 4 5 1 2 3 4 5",
                                    "--max-tokens", "16", "--compare", "--repeats", "3", "--json"])
    assert out.exit_code == 0, out.output
    data = json.loads(out.stdout)
    assert len(data["rounds"]) == 3 and data["speedup"] == pytest.approx(sorted(data["rounds"])[1])
    assert data["speculative"]["token_ids"] == data["plain"]["token_ids"]
    text = CliRunner().invoke(main, ["generate", "--engine", str(tiny_bundle), "1 2 3 4 5 1 2 3 4 5",
                                     "--max-tokens", "16", "--compare", "--repeats", "3"])
    assert text.exit_code == 0 and "median of 3 rounds: " in text.stderr, text.output
    assert text.stdout.count(data["speculative"]["text"].strip()) == 1  # the answer streamed once
    alone = CliRunner().invoke(main, ["generate", "--engine", str(tiny_bundle), "hi", "--repeats", "3"])
    errors = [line for line in alone.stderr.splitlines() if line.startswith("error:")]
    assert alone.exit_code != 0 and len(errors) == 1 and "--repeats" in errors[0], alone.stderr


def test_generate_compare_and_no_spec_refused_in_one_line(tiny_bundle):
    out = CliRunner().invoke(main, ["generate", "--engine", str(tiny_bundle), "hi", "--compare", "--no-spec"])
    assert out.exit_code != 0
    errors = [line for line in out.stderr.splitlines() if line.startswith("error:")]
    assert len(errors) == 1 and "--compare" in errors[0], out.stderr


def test_generate_rejects_bad_arguments_in_one_line(tiny_bundle):
    out = CliRunner().invoke(main, ["generate", "--engine", str(tiny_bundle), "hi", "--top-p", "0"])
    assert out.exit_code == 2
    errors = [line for line in out.stderr.splitlines() if line.startswith("error:")]
    assert len(errors) == 1 and "--top-p: must be in (0, 1]" in errors[0]
    assert "Loading weights" not in out.stderr


def test_generate_without_engine_says_how_to_build(in_tmp):
    out = CliRunner().invoke(main, ["generate", "--engine", "nowhere", "hi"])
    assert out.exit_code != 0 and "trtspec build" in out.stderr
