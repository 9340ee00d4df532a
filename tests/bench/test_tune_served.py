"""`trtspec tune --served`: one deployment per draft length and off, measured through the server.

The decision (`decide`) is pure and is checked on hand-made rows for each backend and release:
the cpu engine and TensorRT-LLM 1.2.1's draft-target and n-gram drafters get a schedule (1.2.1 with
its acceptance gate), one-model EAGLE-3 and 1.1.0 the fixed best length, and what tune writes for
1.2.1 builds into LLM-API options that pass the contract check. The orchestration runs for real on
the cpu backend: three deployments of the tiny engine on a real tritonserver, the spec rewritten,
the final engine built with the schedule.
"""

from __future__ import annotations

import json
import math

import pytest
import yaml

from trtspec.bench import tune_served
from trtspec.bench.tune import BASELINE_LABEL
from trtspec.builders import contracts, trtllm, upstream
from trtspec.spec.schema import validate_spec


def _row(concurrency: int, draft_len: int, tokens_per_s: float, base: float, length: float = 2.5) -> dict:
    return {"concurrency": concurrency, "max_draft_len": draft_len, "eagle_choices": None, "tree": None,
            "output_throughput": tokens_per_s, "spec_decode_acceptance_length": length, "speedup": tokens_per_s / base}


# concurrency 1: 4 wins; 4: 2 wins; 16: plain decoding (100) beats every draft length
BASE = {1: 40.0, 4: 80.0, 16: 100.0}
ROWS = [_row(1, 2, 60, 40), _row(1, 4, 70, 40, 3.5), _row(4, 2, 95, 80), _row(4, 4, 90, 80, 3.5),
        _row(16, 2, 90, 100), _row(16, 4, 80, 100, 3.5)]
BASELINES = {c: {"output_throughput": v} for c, v in BASE.items()}


def _spec(backend="trtllm", mode="ngram", version=None, **speculative):
    build = {"backend": backend, **({"trtllm_version": version} if version else {})}
    return validate_spec({"model": {"source": "smollm2"}, "build": build,
                          "speculative": {"mode": mode, **({"draft": "smollm2"} if mode != "ngram" else {}),
                                          **speculative}})


def test_trtllm_1_2_1_ngram_gets_the_schedule_and_the_break_even_gate():
    decision = tune_served.decide(_spec(), ROWS, BASELINES)
    assert decision.max_draft_len == 4 and decision.schedule == [[1, 4], [4, 2], [16, 0]]
    # AL 3.5 at 1.75x plain: a step costs 2 plain steps, so speculation pays while AL > 2.0
    assert decision.gate == (tune_served.GATE_WINDOW, 2.0) and not decision.notes


def test_what_tune_writes_builds_into_options_that_pass_the_contract(tmp_path):
    from trtspec.bench.tune import write_choice

    path = tmp_path / "trtspec.yaml"
    path.write_text("model:\n  source: smollm2\nbuild:\n  backend: trtllm\nspeculative:\n  mode: ngram\n")
    decision = tune_served.decide(validate_spec(yaml.safe_load(path.read_text())), ROWS, BASELINES)
    write_choice(path, decision.max_draft_len, schedule=decision.schedule, extra=decision.fields())
    spec = validate_spec(yaml.safe_load(path.read_text()))
    contract = contracts.for_spec(spec)
    assert contract.version == "1.2.1"  # the default release
    options = trtllm.checked_options(spec, contract, target="target", draft=None)
    upstream.check_llm_api_options(options, contract)
    speculative = options["speculative_config"]
    assert speculative["decoding_type"] == "NGram" and speculative["max_draft_len"] == 4
    assert speculative["draft_len_schedule"] == {1: 4, 4: 2, 16: 0}
    assert speculative["acceptance_window"] == 32 and speculative["acceptance_length_threshold"] == 2.0
    written = yaml.safe_load(trtllm.render_yaml(options, contract))["speculative_config"]
    assert written["draft_len_schedule"] == {1: 4, 4: 2, 16: 0}  # int keys in the YAML the release reads


def test_one_model_eagle3_gets_the_fixed_best_length_and_no_gate():
    decision = tune_served.decide(_spec(mode="eagle3"), ROWS, BASELINES)
    assert decision.max_draft_len == 4 and decision.schedule is None and decision.gate is None
    assert "no dynamic draft length" in decision.notes[0] and "faster from concurrency 16" in decision.notes[0]
    assert "reports per-request acceptance as 0" in decision.notes[1]


def test_trtllm_1_1_0_has_neither_schedule_nor_gate():
    decision = tune_served.decide(_spec(version="1.1.0"), ROWS, BASELINES)
    assert decision.max_draft_len == 4 and decision.schedule is None and decision.gate is None
    assert "TensorRT-LLM 1.1.0 has no draft_len_schedule" in decision.notes[0]


def test_tensorrt_engines_get_the_fixed_length_their_build_takes():
    decision = tune_served.decide(_spec(backend="trtllm-engine", mode="draft-target"), ROWS, BASELINES)
    assert decision.max_draft_len == 4 and decision.schedule is None and decision.gate is None
    assert "trtllm-build --max_draft_len" in decision.notes[0]


def test_a_schedule_whose_lowest_concurrency_is_above_one_starts_at_one():
    rows = [r for r in ROWS if r["concurrency"] > 1]
    decision = tune_served.decide(_spec(mode="draft-target"), rows, BASELINES)
    assert decision.schedule == [[1, 2], [4, 2], [16, 0]] and decision.max_draft_len == 2


def test_plain_decoding_winning_at_the_lowest_load_is_said_in_one_line():
    rows = [_row(1, 2, 30, 40), _row(1, 4, 20, 40)]
    with pytest.raises(Exception, match="plain decoding beat every draft length at concurrency 1"):
        tune_served.decide(_spec(), rows, {1: {"output_throughput": 40.0}})


def test_no_gate_without_a_measured_acceptance_length():
    rows = [dict(r, spec_decode_acceptance_length=math.nan) for r in ROWS]
    decision = tune_served.decide(_spec(), rows, BASELINES)
    assert decision.gate is None and "no acceptance length" in decision.notes[0]


def test_candidates_fix_the_length_at_every_load_and_off_is_mode_none():
    spec = _spec(backend="cpu", draft_len_schedule=[[1, 3], [8, 0]], max_draft_len=3)
    four = tune_served.candidate_spec(spec, 4)
    assert four.speculative.max_draft_len == 4 and four.speculative.draft_len_schedule == [[1, 4]]
    assert tune_served.candidate_spec(spec, 0).speculative.mode == "none"
    gpu = tune_served.candidate_spec(_spec(draft_len_schedule=[[1, 3]], max_draft_len=3), 2)
    assert gpu.speculative.draft_len_schedule is None and gpu.speculative.max_draft_len == 2
    assert tune_served.label(0) == BASELINE_LABEL


@pytest.mark.e2e
@pytest.mark.slow
def test_served_tune_on_the_cpu_backend_deploys_each_length_and_writes_the_schedule(tmp_path, tiny_llama):
    from click.testing import CliRunner

    from tests.serve.conftest import free_ports
    from trtspec.cli import main

    http, grpc, metrics = free_ports(3)
    spec_path = tmp_path / "trtspec.yaml"
    spec_path.write_text(yaml.safe_dump({
        "model": {"source": str(tiny_llama), "name": "tiny"}, "speculative": {"mode": "ngram"},
        "build": {"backend": "cpu", "max_batch_size": 4, "max_input_len": 128, "max_seq_len": 256,
                  "output_dir": str(tmp_path / "engines")},
        "serve": {"http_port": http, "grpc_port": grpc, "metrics_port": metrics,
                  "repository": str(tmp_path / "model_repository"), "startup_timeout_s": 120},
        "workdir": str(tmp_path / "work")}))
    result = CliRunner().invoke(main, ["tune", "-c", str(spec_path), "--served", "--draft-lens", "1,3",
                                       "--concurrency", "1,2", "--num-prompts", "2", "--max-tokens", "8",
                                       "--out", str(tmp_path / "report"), "--json"], catch_exceptions=False)
    assert result.exit_code == 0, result.output
    report = json.loads((tmp_path / "report" / "tune.json").read_text())
    print("served tune:", json.dumps({k: report[k] for k in ("choice", "draft_len_schedule")}),
          [(r["concurrency"], r["max_draft_len"], round(r["output_throughput"], 1), round(r["speedup"], 2))
           for r in report["rows"]])
    assert report["deployments"] == [0, 1, 3]
    assert report["prompts_sent"].startswith("chat template of ")  # the tiny tokenizer has one
    assert {(r["concurrency"], r["max_draft_len"]) for r in report["rows"]} == {(1, 1), (1, 3), (2, 1), (2, 3)}
    assert all(r["output_throughput"] > 0 for r in report["rows"])
    spec = validate_spec(yaml.safe_load(spec_path.read_text()))
    assert spec.speculative.max_draft_len == report["choice"]
    assert spec.speculative.draft_len_schedule == report["draft_len_schedule"]
    assert [row[0] for row in spec.speculative.draft_len_schedule] == [1, 2]
    assert (tmp_path / "trtspec.yaml.bak").exists()
    engine = json.loads((tmp_path / "engines" / "tiny-ngram-cpu" / "engine.json").read_text())
    assert engine["runtime"]["draft_len_schedule"] == report["draft_len_schedule"]
    assert not (tmp_path / "work" / "server" / "server.json").exists() or \
        json.loads((tmp_path / "work" / "server" / "server.json").read_text()).get("state") != "ready"


def test_tune_on_a_gpu_backend_plans_one_deployment_per_length_and_off(tmp_path):
    from click.testing import CliRunner

    from trtspec.cli import main

    path = tmp_path / "trtspec.yaml"
    path.write_text(f"model:\n  source: smollm2\nbuild:\n  backend: trtllm\nspeculative:\n  mode: ngram\n"
                    f"workdir: {tmp_path / 'work'}\n")
    result = CliRunner().invoke(main, ["tune", "-c", str(path), "--draft-lens", "2,4", "--concurrency", "1,8",
                                       "--dry-run", "--json"])
    assert result.exit_code == 0, result.output
    plan = json.loads(result.output)
    assert plan["served"] and plan["deployments"] == [0, 2, 4] and plan["concurrency"] == [1, 8]
    refused = CliRunner().invoke(main, ["tune", "-c", str(path), "--served", "--trees", "[[[0],[1]]]",
                                        "--mode", "eagle3", "--dry-run"])
    assert refused.exit_code != 0 and "chains of each --draft-lens" in refused.output
