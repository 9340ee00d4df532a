"""bench and tune through the CLI, in-process on a tiny engine built by `trtspec build`."""

from __future__ import annotations

import csv
import json

import pytest
import yaml
from click.testing import CliRunner

from trtspec.cli import main
from trtspec.spec.loading import load_spec

PNG_MAGIC = b"\x89PNG\r\n\x1a\n"


@pytest.fixture(scope="module")
def tiny_engine(tiny_llama, tmp_path_factory):
    """(engine dir, spec path): a cpu ngram engine over the tiny seeded Llama."""
    root = tmp_path_factory.mktemp("bench-engine")
    spec = root / "trtspec.yaml"
    spec.write_text(f"# my spec\nmodel:\n  source: {tiny_llama}\n  name: tiny\nspeculative:\n  mode: ngram  # keep\n"
                    f"  max_draft_len: 4\nbuild:\n  output_dir: {root / 'engines'}\nworkdir: {root / 'work'}\n")
    result = CliRunner().invoke(main, ["build", "-c", str(spec)])
    assert result.exit_code == 0, result.output
    return root / "engines" / "tiny-ngram-cpu", spec


def test_bench_in_process_writes_everything(tiny_engine, tmp_path):
    engine, spec = tiny_engine
    out = tmp_path / "report"
    result = CliRunner().invoke(main, ["bench", "-c", str(spec), "--engine", str(engine), "--baseline",
                                       "--num-prompts", "3", "--concurrency", "1,2", "--max-tokens", "12",
                                       "--out", str(out)])
    assert result.exit_code == 0, result.output
    assert "speculative / baseline" in result.output and "by prompt category" in result.output
    report = json.loads((out / "bench.json").read_text())
    # concurrency 2 sends 2 x 2 requests (prompt 0 twice) so both slots stay busy
    assert [(r["variant"], r["max_concurrency"], r["completed"]) for r in report["results"]] == [
        ("speculative", 1, 3), ("baseline", 1, 3), ("speculative", 2, 4), ("baseline", 2, 4)]
    assert all(0 < r["mean_requests_in_flight"] <= r["max_concurrency"] + 0.01 for r in report["results"])
    assert report["metadata"]["machine"]["cpu_count"] and report["metadata"]["repeats"] == 1
    assert report["metadata"]["dtype"] == "float32"  # the bundle's runtime.dtype, named in every report
    spec_result = report["results"][0]
    assert spec_result["spec_decode_num_drafts"] > 0 and spec_result["spec_decode_acceptance_length"] >= 1.0
    assert sum(spec_result["spec_decode_accepted_per_step_histogram"]) == spec_result["spec_decode_num_drafts"]
    assert [s["max_concurrency"] for s in report["speedup"]] == [1, 2]
    assert [(r["variant"], r["max_concurrency"]) for r in report["scaling"]] == [("speculative", 2), ("baseline", 2)]
    assert "baseline tokens/s over concurrency 1" in result.output
    # the server-counter section is a diff over this run only: the engine saw exactly these drafts
    drafts = sum(r["spec_decode_num_drafts"] for r in report["results"] if r["variant"] == "speculative")
    assert report["server_counters"]["trtspec:spec_decode_num_drafts"] == drafts
    # the prompts come back (4 cells over 3 prompts): from their second request on they are copied
    copied = [r["prefix_cache_hit_rate"] for r in report["results"]]
    assert copied[0] < copied[-1] and copied[-1] > 0.5 and "prompt tokens copied" in result.output
    # greedy speculation is lossless: every prompt gets as many tokens with speculation as without
    records = [json.loads(line) for line in (out / "requests.jsonl").read_text().splitlines()]
    by_key = {(r["variant"], r["concurrency"], r["prompt_index"]): r["output_tokens"] for r in records}
    assert all(by_key[("speculative", c, i)] == by_key[("baseline", c, i)] for c in (1, 2) for i in range(3))
    with open(out / "bench.csv") as handle:
        assert len(list(csv.DictReader(handle))) == 4
    for png in ("throughput.png", "acceptance.png"):
        assert (out / png).read_bytes()[:8] == PNG_MAGIC


def test_tune_records_the_fastest_draft_len_with_backup(tiny_engine, tmp_path):
    engine, original = tiny_engine
    spec = tmp_path / "trtspec.yaml"
    spec.write_text(original.read_text())
    out = tmp_path / "tune"
    result = CliRunner().invoke(main, ["tune", "-c", str(spec), "--engine", str(engine), "--draft-lens", "1,3",
                                       "--num-prompts", "2", "--max-tokens", "10", "--out", str(out)])
    assert result.exit_code == 0, result.output
    summary = json.loads((out / "tune.json").read_text())
    fastest = max(summary["rows"], key=lambda r: (r["output_throughput"], -r["max_draft_len"]))
    assert summary["choice"] == fastest["max_draft_len"]
    assert yaml.safe_load(spec.read_text())["speculative"]["max_draft_len"] == summary["choice"]
    assert (tmp_path / "trtspec.yaml.bak").read_text() == original.read_text()
    assert "# my spec" in spec.read_text() and "mode: ngram  # keep" in spec.read_text()


def test_tune_over_concurrencies_writes_a_draft_len_schedule(tiny_engine, tmp_path):
    """--concurrency 1,2: every draft length and the baseline at both; the schedule holds the
    fastest per concurrency (0 where the baseline won) and the built engine follows it."""
    engine, original = tiny_engine
    spec = tmp_path / "trtspec.yaml"
    spec.write_text(original.read_text())
    out = tmp_path / "tune"
    result = CliRunner().invoke(main, ["tune", "-c", str(spec), "--engine", str(engine), "--draft-lens", "1,3",
                                       "--concurrency", "1,2", "--num-prompts", "4", "--max-tokens", "8",
                                       "--out", str(out)])
    assert result.exit_code == 0, result.output
    summary = json.loads((out / "tune.json").read_text())
    assert {(r["concurrency"], r["max_draft_len"]) for r in summary["rows"]} == {(1, 1), (1, 3), (2, 1), (2, 3)}
    schedule = summary["draft_len_schedule"]
    assert [c for c, _ in schedule] == [1, 2]
    for concurrency, draft_len in schedule:
        rows = [r for r in summary["rows"] if r["concurrency"] == concurrency]
        best = max(rows, key=lambda r: (r["output_throughput"], -r["max_draft_len"]))
        plain_won = best["speedup"] < 1.0
        assert draft_len == (0 if plain_won else best["max_draft_len"])
    written = yaml.safe_load(spec.read_text())["speculative"]
    assert written["draft_len_schedule"] == schedule
    assert written["max_draft_len"] == max([k for _, k in schedule if k] or [written["max_draft_len"]])
    assert "draft_len_schedule" in result.output


def test_dry_runs_write_nothing_and_bad_input_is_one_line(tiny_engine, tmp_path):
    engine, spec = tiny_engine
    runner = CliRunner()
    result = runner.invoke(main, ["bench", "-c", str(spec), "--engine", str(engine), "--dry-run", "--json",
                                  "--out", str(tmp_path / "r")])
    assert result.exit_code == 0 and json.loads(result.output)["dry_run"] is True
    assert "metrics" not in json.loads(result.output)  # in process: no server to read counters from
    port = load_spec(spec).serve.metrics_port
    for extra, metrics in (([], f"http://10.0.0.5:{port}/metrics"),  # the spec's metrics port, on --url's host
                           (["--metrics-url", "http://m:9/metrics"], "http://m:9/metrics")):
        result = runner.invoke(main, ["bench", "-c", str(spec), "--url", "10.0.0.5:18821", *extra, "--dry-run",
                                      "--json", "--out", str(tmp_path / "r")])
        assert result.exit_code == 0 and json.loads(result.output)["metrics"] == metrics, result.output
    result = runner.invoke(main, ["tune", "-c", str(spec), "--engine", str(engine), "--dry-run"])
    assert result.exit_code == 0 and "nothing written" in result.output
    assert not (tmp_path / "r").exists() and not spec.with_name("trtspec.yaml.bak").exists()
    result = runner.invoke(main, ["bench", "-c", str(spec), "--engine", str(engine), "--prompts",
                                  str(tmp_path / "missing.jsonl")])
    assert result.exit_code == 1 and result.output.count("\n") == 1 and "no such prompt file" in result.output
    result = runner.invoke(main, ["bench", "-c", str(spec), "--concurrency", "1,x"])
    assert result.exit_code == 2 and "comma-separated integers" in result.output
    result = runner.invoke(main, ["bench", "-c", str(spec), "--url", "127.0.0.1:1", "--num-prompts", "1"])
    assert result.exit_code == 1 and result.output.count("\n") == 1 and "no ready model" in result.output
    result = runner.invoke(main, ["bench", "-c", str(spec), "--url", "127.0.0.1:1", "--engine", str(engine),
                                  "--baseline"])
    assert result.exit_code == 2 and "serving overhead" in result.output


def test_bench_json_is_strict_json_on_stdout(tiny_engine, tmp_path):
    engine, spec = tiny_engine
    result = CliRunner().invoke(main, ["bench", "-c", str(spec), "--engine", str(engine), "--num-prompts", "1",
                                       "--concurrency", "1", "--max-tokens", "4", "--out", str(tmp_path), "--json"])
    assert result.exit_code == 0, result.output
    data = json.loads(result.stdout, parse_constant=lambda name: pytest.fail(f"{name} in --json output"))
    assert data["report"]["results"][0]["completed"] == 1 and data["files"]["json"].endswith("bench.json")


def test_tune_measures_a_draft_models_dynamic_trees_and_writes_the_winner(tiny_llama, tiny_llama_draft, tmp_path):
    """draft-target engines grow dynamic trees too: --tree-shapes puts them beside the chains, and
    the spec gets speculative.tree when a tree wins, a null tree (and the chain) when a chain does."""
    from tests.builders.conftest import write_workspace

    spec = write_workspace(tmp_path, tiny_llama, draft=tiny_llama_draft, build={"output_dir": str(tmp_path / "engines")})
    spec.write_text(spec.read_text() + f"workdir: {tmp_path / 'work'}\n")
    built = CliRunner().invoke(main, ["build", "-c", str(spec), "--backend", "cpu", "--mode", "draft-target"])
    assert built.exit_code == 0, built.output
    spec.write_text(spec.read_text().replace("speculative:\n", "speculative:\n  mode: draft-target\n"))
    out = tmp_path / "tune"
    result = CliRunner().invoke(main, ["tune", "-c", str(spec), "--engine", str(tmp_path / "engines" / "tiny-draft-target-cpu"),
                                       "--draft-lens", "2", "--tree-shapes", "2,2,3", "--num-prompts", "2",
                                       "--max-tokens", "8", "--out", str(out), "--json"])
    assert result.exit_code == 0, result.output
    summary = json.loads((out / "tune.json").read_text())
    assert sorted(str(r["tree"]) for r in summary["rows"]) == ["None", "[2, 2, 3]"]
    assert all(r["spec_decode_acceptance_length"] >= 1.0 for r in summary["rows"])
    written = yaml.safe_load(spec.read_text())["speculative"]
    best = max(summary["rows"], key=lambda r: r["output_throughput"])
    if best["tree"]:
        assert written["tree"] == {"topk": 2, "depth": 2, "num_draft_tokens": 3} and written["max_draft_len"] == 2
    else:
        assert written.get("tree") is None and written["max_draft_len"] == 2
    assert "eagle_choices" not in written


def test_bench_reports_which_prompts_it_sent(tiny_engine, tmp_path):
    # templated by default (the engine's tokenizer has a chat template), as typed with --raw
    engine, spec = tiny_engine
    sent = {}
    for flag in ([], ["--raw"]):
        out = tmp_path / f"report{len(flag)}"
        result = CliRunner().invoke(main, ["bench", "-c", str(spec), "--engine", str(engine), "--num-prompts", "1",
                                           "--concurrency", "1", "--max-tokens", "4", "--out", str(out), *flag])
        assert result.exit_code == 0, result.output
        metadata = json.loads((out / "bench.json").read_text())["metadata"]
        sent[bool(flag)] = (metadata["prompts_sent"], metadata["acceptance_source"],
                            json.loads((out / "requests.jsonl").read_text().splitlines()[0])["prompt_tokens"])
    assert sent[False][0].startswith("chat template") and sent[True][0].startswith("raw")
    assert sent[False][1] == sent[True][1] == "in-process engine statistics"
    assert sent[True][2] < sent[False][2]  # the template's turn markers are prompt tokens too
