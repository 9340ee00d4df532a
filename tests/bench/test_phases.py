"""Acceptance per category and per context-length bucket from counters (trtspec.bench.phases and
table_rows.row_acceptance): which phases a prompt set is cut into, which rows may take a phase's
counters, the answers' usage against the counters, and the head check for OpenAI-API targets.
Against real servers: tests/bench/test_e2e.py (trtspec's OpenAI endpoint beside tritonserver, the
same prompts through Triton) and tests/serve/dynamo/test_dynamo_local.py (a Dynamo stack)."""

from __future__ import annotations

import json

import pytest

from trtspec.bench.metrics import RequestRecord, SpecCounts
from trtspec.bench.phases import plan
from trtspec.bench.server_counters import Phase, phases_add_up
from trtspec.bench.table_rows import by_category, phase_delta, row_acceptance
from trtspec.prompts import Prompt

DRAFTS = "trtspec:spec_decode_num_drafts"
DRAFTED = "trtspec:spec_decode_num_draft_tokens"
ACCEPTED = "trtspec:spec_decode_num_accepted_tokens"
PER_POS = "trtspec:spec_decode_num_accepted_tokens_per_pos"


def _counters(drafts: int, drafted: int, accepted: int, positions: list[int]) -> dict[str, float]:
    return {DRAFTS: drafts, DRAFTED: drafted, ACCEPTED: accepted,
            **{f'{PER_POS}{{position="{i}"}}': n for i, n in enumerate(positions)}}


def _answer(index: int, category: str, accepted: int, rejected: int, concurrency: int = 1) -> RequestRecord:
    """What an OpenAI answer gives bench: accepted and rejected draft tokens, no drafts, no positions."""
    return RequestRecord("speculative", concurrency, 0, index, category, [0.1], 10, 1.0, prompt_tokens=50,
                         spec=SpecCounts(num_draft_tokens=accepted + rejected, num_accepted_tokens=accepted))


def test_prompts_are_cut_by_category_then_bucket_in_the_order_they_come():
    prompts = [Prompt(0, "a", "copy"), Prompt(1, "b", "qa"), Prompt(2, "c", "copy"), Prompt(3, "d", "qa"),
               Prompt(4, "e", "copy")]
    phases = plan(prompts, {0: 20, 1: 10, 2: 150, 3: None, 4: 100}, 512)
    assert [(p.category, p.bucket, p.prompt_indices) for p in phases] == [
        ("copy", "<=128", (0, 4)), ("qa", "<=128", (1,)), ("copy", "129-256", (2,)), ("qa", None, (3,))]


def test_a_category_takes_its_phases_counters_and_a_row_holding_part_of_a_phase_takes_none():
    phases = [Phase("copy", "<=128", (0,), {("speculative", 1): _counters(10, 30, 16, [9, 5, 2])}),
              Phase("copy", "129-256", (1, 2), {("speculative", 1): _counters(5, 15, 3, [2, 1, 0])}),
              Phase("qa", "<=128", (3,), {("speculative", 1): _counters(4, 12, 0, [0, 0, 0])})]
    copy = [_answer(0, "copy", 16, 14), _answer(1, "copy", 2, 8), _answer(2, "copy", 1, 4)]
    row = row_acceptance(copy, phases)
    assert row["spec_decode_source"] == "phase counters"
    assert row["spec_decode_acceptance_length"] == pytest.approx(1 + 19 / 15)       # two phases summed
    assert row["spec_decode_acceptance_rate"] == pytest.approx(100 * 19 / 45)
    assert row["spec_decode_per_position_acceptance_rates"] == pytest.approx([11 / 15, 6 / 15, 2 / 15])
    assert "acceptance_disagreement" not in row                                        # usage 19 of 45, as counted
    assert phase_delta(copy[:2], phases) is None      # prompt 2 is missing: the second phase is not all here
    assert phase_delta([_answer(0, "copy", 16, 14, concurrency=2)], phases) is None   # no cell at concurrency 2
    wrong = row_acceptance([_answer(3, "qa", 1, 11)], phases)
    assert wrong["acceptance_disagreement"] == ("the answers' usage says 1 of 12 draft tokens accepted, the "
                                                "workers' counters 0 of 12")
    # answers that count their drafts (Triton's cpu model, in process) are taken as they are
    counted = RequestRecord("speculative", 1, 0, 3, "qa", [0.1], 10, 1.0,
                            spec=SpecCounts(num_drafts=2, num_draft_tokens=6, num_accepted_tokens=2))
    assert row_acceptance([counted], phases)["spec_decode_source"] == "responses"
    assert row_acceptance([counted])["spec_decode_acceptance_length"] == 2.0
    rows = by_category(copy + [_answer(3, "qa", 0, 12)], phases=phases)
    assert [(r["category"], r["spec_decode_source"]) for r in rows] == [("copy", "phase counters"),
                                                                          ("qa", "phase counters")]


def test_phases_add_up_only_when_nothing_ran_between_them():
    phases = [Phase("a", None, (0,), delta=_counters(3, 9, 4, [3, 1])),
              Phase("b", None, (1,), delta=_counters(2, 6, 1, [1, 0]))]
    assert phases_add_up(phases, _counters(5, 15, 5, [4, 1])) is True
    assert phases_add_up(phases, _counters(6, 18, 5, [4, 1])) is False   # a request between two phases
    assert phases_add_up(phases, None) is None


def test_an_openai_target_gets_the_heads_context_warning(tmp_path, tiny_llama):
    """issue 68 item 3 for OpenAI-API targets: the spec's EAGLE-3 head against the longest bucket."""
    from trtspec.artifacts import Layout
    from trtspec.bench.report import assemble_report
    from trtspec.bench.runner import served_head
    from trtspec.spec.schema import validate_spec

    spec = validate_spec({"model": {"source": str(tiny_llama), "name": "tiny"}, "speculative": {"mode": "eagle3"},
                          "build": {"backend": "cpu", "max_input_len": 512, "max_seq_len": 1024, "output_dir": str(tmp_path / "engines")},
                          "workdir": str(tmp_path / "work")})
    head = Layout.from_spec(spec).checkpoint("eagle3")
    head.mkdir(parents=True)
    (head / "config.json").write_text(json.dumps({"max_position_embeddings": 256}))
    described = served_head(spec)
    assert described == {"max_seq_len": 1024, "head_max_position_embeddings": 256}
    report = assemble_report([_answer(0, "copy", 1, 1)], {("speculative", 1, 0): 1.0}, {"model": "tiny", **described})
    assert "max_position_embeddings is 256, below max_seq_len 1024" in report["head_context"]["warning"]


def test_counted_prompt_lengths_are_set_against_the_servers_and_the_report_says_how_they_were_had():
    from trtspec.bench.phases import PROBED, PromptLengths
    from trtspec.bench.report import _phase_lines

    answers = [_answer(0, "copy", 1, 1), _answer(1, "copy", 1, 1), _answer(0, "copy", 1, 1)]  # prompt_tokens 50
    counted = PromptLengths({0: 50, 1: 49, 2: 12}, "counted here with the tokenizer of /e/target", probed=False)
    check = counted.checked(answers)
    # prompt 1 counted 49 where the server said 50; prompt 2 never answered: not checked
    assert check == {"source": "counted here with the tokenizer of /e/target", "probe": False, "prompts": 3,
                     "checked_against_server": 2, "num_differ_from_server": 1,
                     "differ_from_server": [{"prompt_index": 1, "counted": 49, "server": 50}]}
    report = {"phases": [{}], "phases_add_up": True, "prompt_lengths": check}
    lines = _phase_lines(report)
    assert "no probe request" in lines[0] and "probe of every prompt" not in lines[0]
    assert lines[1].startswith("warning: 1 of 2 prompts counted other than the server's prompt_tokens (prompt 1")
    probed = PromptLengths({0: 50, 1: 50}, PROBED, probed=True).checked(answers)
    assert probed["num_differ_from_server"] == 0
    lines = _phase_lines({**report, "prompt_lengths": probed})
    assert "probe of every prompt came first" in lines[0] and len(lines) == 1



def test_without_a_built_engine_there_is_no_tokenizer_to_count_with(tmp_path, tiny_llama):
    """A workdir that never built the engine (a remote server's spec): no counter, so bench probes."""
    from trtspec.client.prompting import token_counter
    from trtspec.spec.schema import validate_spec

    spec = validate_spec({"model": {"source": str(tiny_llama), "name": "tiny"}, "speculative": {"mode": "ngram"},
                          "build": {"backend": "cpu", "output_dir": str(tmp_path / "engines")},
                          "workdir": str(tmp_path / "work")})
    assert token_counter(spec) is None
