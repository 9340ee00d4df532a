"""Acceptance by context length: the buckets, the head's trained context against them, and bench's
report of both on the tiny seeded engine, for an n-gram engine (built by `trtspec build`, through
the CLI) and an EAGLE-3 head exported by ModelOpt."""

from __future__ import annotations

import json

import pytest

from trtspec.bench.context_buckets import by_context_length, edges, head_context
from trtspec.bench.metrics import RequestRecord, SpecCounts

# prompts of about 20, 150 and 600 tokens on the tiny byte-level tokenizer
SENTENCE = "the quick brown fox jumps over the lazy dog. "
PROMPTS = [SENTENCE * 3, SENTENCE * 20, SENTENCE * 80]


def _record(variant, prompt_tokens, drafts=0, accepted=0, tokens=10, e2e=1.0):
    spec = SpecCounts(num_drafts=drafts, num_draft_tokens=4 * drafts, num_accepted_tokens=accepted) if drafts else None
    return RequestRecord(variant, 1, 0, 0, "default", [0.1], tokens, e2e, prompt_tokens=prompt_tokens, spec=spec)


def test_buckets_double_up_to_max_seq_len():
    assert edges(2048) == [128, 256, 512, 1024, 2048]
    assert edges(3000) == [128, 256, 512, 1024, 2048, 3000]
    assert edges(None, longest=700) == [128, 256, 512, 1024]


def test_requests_fall_in_their_bucket_with_their_acceptance():
    records = [_record("speculative", 100, drafts=10, accepted=20), _record("baseline", 100, e2e=2.0),
               _record("speculative", 900, drafts=10, accepted=5), _record("baseline", 900, e2e=1.0),
               _record("speculative", None, drafts=3, accepted=3)]
    section = by_context_length(records, 1024)
    short, long = section["rows"]
    assert (short["bucket"], long["bucket"]) == ("<=128", "513-1024") and section["unmeasured"] == 1
    assert short["spec_decode_acceptance_length"] == 3.0 and long["spec_decode_acceptance_length"] == 1.5
    assert short["speedup"] == 2.0 and long["speedup"] == 1.0 and short["mean_prompt_tokens"] == 100


def test_a_head_trained_shorter_than_the_context_is_warned_about():
    warned = head_context({"max_position_embeddings": 2048}, longest_prompt=900, max_seq_len=8192)
    assert "max_position_embeddings is 2048, below max_seq_len 8192" in warned["warning"]
    assert "warning" not in head_context({"max_position_embeddings": 8192}, 900, 8192)
    assert head_context(None, 900, 8192) is None and head_context({}, 900, 8192) is None


@pytest.mark.slow
def test_bench_shows_acceptance_by_context_length_for_ngram(tiny_llama, tmp_path):
    from click.testing import CliRunner

    from trtspec.cli import main

    spec = tmp_path / "trtspec.yaml"
    spec.write_text(f"model:\n  source: {tiny_llama}\n  name: tiny\nspeculative:\n  mode: ngram\n  max_draft_len: 4\n"
                    f"build:\n  output_dir: {tmp_path / 'engines'}\n  max_input_len: 900\n  max_seq_len: 1024\nworkdir: {tmp_path / 'work'}\n")
    built = CliRunner().invoke(main, ["build", "-c", str(spec)])
    assert built.exit_code == 0, built.output
    prompts = tmp_path / "prompts.jsonl"
    prompts.write_text("".join(json.dumps({"prompt": p, "category": "edit"}) + "\n" for p in PROMPTS))
    out = tmp_path / "report"
    result = CliRunner().invoke(main, ["bench", "-c", str(spec), "--engine", str(tmp_path / "engines" / "tiny-ngram-cpu"),
                                       "--baseline", "--prompts", str(prompts), "--concurrency", "1",
                                       "--max-tokens", "16", "--out", str(out), "--raw"])
    assert result.exit_code == 0, result.output
    assert "by context length" in result.output and "warning" not in result.output   # no head to warn about
    section = json.loads((out / "bench.json").read_text())["by_context_length"]
    assert section["max_seq_len"] == 1024 and section["edges"][-1] == 1024
    assert len(section["rows"]) == 3 and all(r["speculative_requests"] == r["baseline_requests"] == 1
                                             for r in section["rows"])
    assert all(r["spec_decode_acceptance_length"] >= 1.0 for r in section["rows"])   # n-gram drafts in every bucket


@pytest.mark.slow
def test_bench_shows_acceptance_by_context_length_for_an_eagle3_head(tiny_llama, tmp_path):
    from modelopt.torch.export import export_speculative_decoding

    from trtspec.bench.load import run_variants
    from trtspec.bench.report import assemble_report, render_table
    from trtspec.bench.runner import context_of
    from trtspec.bench.targets import EngineTarget
    from trtspec.prompts import Prompt
    from trtspec.runtime import Engine
    from trtspec.testing.tiny import make_tiny_eagle3

    head = tmp_path / "eagle3"
    export_speculative_decoding(make_tiny_eagle3(tiny_llama).eval(), export_dir=head)
    config = json.loads((head / "config.json").read_text())
    config["max_position_embeddings"] = 256      # trained shorter than the prompts it will see
    (head / "config.json").write_text(json.dumps(config))
    with Engine.from_checkpoints(tiny_llama, mode="eagle3", draft_dir=head, max_draft_len=3,
                                 draft_len_schedule=[[1, 3]]) as engine:
        target = EngineTarget(engine, chat=False)
        run = run_variants({"speculative": (target, True), "baseline": (target, False)},
                           [Prompt(i, p, "edit") for i, p in enumerate(PROMPTS)], [1], max_tokens=8, warmup=False)
    metadata = {"model": "tiny", "mode": "eagle3", "target": "in-process", **context_of(1024, head)}
    assert metadata["head_max_position_embeddings"] == 256
    report = assemble_report(run.records, run.durations, metadata)
    rows = report["by_context_length"]["rows"]
    assert [r["bucket"] for r in rows] == ["<=128", "129-256", "513-1024"]
    assert all(r["spec_decode_acceptance_length"] >= 1.0 for r in rows)
    assert "below max_seq_len 1024" in report["head_context"]["warning"]
    from rich.console import Console

    console = Console(record=True, width=200)
    console.print(render_table(report))
    text = console.export_text()
    assert "by context length" in text and "warning: the EAGLE-3 head's max_position_embeddings is 256" in text


def test_the_packaged_traffic_prompts_hold_edits_and_tool_calls():
    from trtspec.prompts import load_prompts, packaged_prompt_file

    prompts = load_prompts(packaged_prompt_file("traffic"))
    assert {p.category for p in prompts} == {"edit", "tool"} and len(prompts) >= 12
    # the edits carry the text they edit: copy-heavy, and long enough to fill more than one bucket
    assert max(len(p.text) for p in prompts if p.category == "edit") > 2000
