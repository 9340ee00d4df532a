"""tune: the choice follows tokens/s (not acceptance length); the spec rewrite keeps comments and a backup."""

from __future__ import annotations

import math

import pytest
import yaml

from trtspec.bench.tune import (
    Candidate,
    choose,
    choose_schedule,
    set_draft_len_text,
    set_field_text,
    tune_rows,
    write_choice,
    write_draft_len,
)
from trtspec.errors import SpecError, TrtSpecError
from trtspec.spec.loading import load_spec
from trtspec.spec.template import render_template


def test_choice_is_by_tokens_per_second_not_acceptance_length():
    rows = [
        {"max_draft_len": 2, "output_throughput": 30.0, "spec_decode_acceptance_length": 2.1},
        {"max_draft_len": 4, "output_throughput": 34.5, "spec_decode_acceptance_length": 2.8},
        # longest draft: highest acceptance length, but each verify pass costs more -> slower
        {"max_draft_len": 8, "output_throughput": 31.0, "spec_decode_acceptance_length": 3.4},
        {"max_draft_len": 6, "output_throughput": math.nan},   # a failed measurement never wins
    ]
    assert choose(rows)["max_draft_len"] == 4


def test_exact_tie_goes_to_the_shorter_draft_and_nothing_measured_is_an_error():
    rows = [{"max_draft_len": 3, "output_throughput": 10.0}, {"max_draft_len": 1, "output_throughput": 10.0}]
    assert choose(rows)["max_draft_len"] == 1
    with pytest.raises(TrtSpecError, match="no draft shape"):
        choose([{"max_draft_len": 2, "output_throughput": math.nan}])


def test_tune_rows_speedup_over_baseline():
    results = [{"variant": "max_draft_len=2", "output_throughput": 30.0, "output_throughput_by_repeat": [30.0],
                "mean_tpot_ms": 33.0, "spec_decode_acceptance_length": 2.0},
               {"variant": "baseline", "output_throughput": 20.0, "output_throughput_by_repeat": [20.0],
                "mean_tpot_ms": 50.0}]
    rows, baselines = tune_rows(results, [Candidate(2), Candidate(3)])   # 3 was not measured: no row
    assert baselines[1]["output_throughput"] == 20.0
    assert len(rows) == 1 and rows[0]["max_draft_len"] == 2 and rows[0]["speedup"] == pytest.approx(1.5)
    assert rows[0]["eagle_choices"] is None and rows[0]["concurrency"] == 1


def test_schedule_takes_the_fastest_per_concurrency_and_zero_where_plain_wins():
    def row(c, k, tps):
        return {"concurrency": c, "max_draft_len": k, "output_throughput": tps, "eagle_choices": None}

    rows = [row(1, 2, 30.0), row(1, 4, 34.0), row(4, 2, 70.0), row(4, 4, 66.0), row(8, 2, 90.0), row(8, 4, 85.0)]
    baselines = {1: {"output_throughput": 25.0}, 4: {"output_throughput": 60.0}, 8: {"output_throughput": 95.0}}
    choice, schedule = choose_schedule(rows, baselines)
    assert choice["max_draft_len"] == 4 and schedule == [[1, 4], [4, 2], [8, 0]]


def test_schedule_is_written_and_validated(in_tmp):
    spec = in_tmp / "trtspec.yaml"
    spec.write_text("speculative:\n  mode: ngram\n  max_draft_len: 4\n")
    write_choice(spec, 4, schedule=[[1, 4], [4, 2], [8, 0]])
    assert load_spec(spec).speculative.draft_len_schedule == [[1, 4], [4, 2], [8, 0]]
    with pytest.raises(SpecError, match="draft_len_schedule"):
        write_choice(spec, 4, schedule=[[0, 4]])  # batch size 0 is refused before writing
    assert load_spec(spec).speculative.draft_len_schedule == [[1, 4], [4, 2], [8, 0]]


def test_tree_candidates_count_nodes_and_label_uniquely():
    tree = Candidate.tree([[1], [0], [0, 0], [0]])               # duplicates and order do not matter
    assert tree.max_draft_len == 3 and tree.eagle_choices == ((0,), (1,), (0, 0))
    assert tree.label == "tree=[[0],[1],[0,0]]" and Candidate(3).label == "max_draft_len=3"


def test_tree_choice_is_written_as_eagle_choices_and_a_chain_clears_it(in_tmp):
    spec = in_tmp / "trtspec.yaml"
    spec.write_text("speculative:\n  mode: ngram  # demo\n  max_draft_len: 4\n  eagle_choices: null\n")
    write_choice(spec, 3, [[0], [1], [0, 0]], set_choices=True)
    resolved = load_spec(spec)
    assert resolved.speculative.eagle_choices == [[0], [1], [0, 0]] and resolved.speculative.max_draft_len == 3
    assert "mode: ngram  # demo" in spec.read_text()
    write_choice(spec, 2, None, set_choices=True)
    assert load_spec(spec).speculative.eagle_choices is None
    with pytest.raises(SpecError, match="several lines"):
        set_field_text("speculative:\n  eagle_choices:\n    - [0]\n", "eagle_choices", "null")


def test_rewrite_of_the_init_template_keeps_every_other_line(in_tmp):
    spec = in_tmp / "trtspec.yaml"
    original = render_template()
    spec.write_text(original)
    backup = write_draft_len(spec, 6)
    new = spec.read_text()
    assert backup.name == "trtspec.yaml.bak" and backup.read_text() == original
    assert load_spec(spec).speculative.max_draft_len == 6
    old_lines, new_lines = original.splitlines(), new.splitlines()
    changed = [(a, b) for a, b in zip(old_lines, new_lines, strict=True) if a != b]
    assert changed == [("  max_draft_len: 4", "  max_draft_len: 6")]
    assert "# Most draft tokens proposed per step" in new


def test_rewrite_keeps_trailing_comment_inserts_when_missing_and_appends_section():
    text = "model:\n  source: smollm2  # the demo model\nspeculative:\n    mode: ngram\n" \
           "    max_draft_len: 4   # chosen by hand\n    eagle3:\n        max_steps: 5\n"
    assert set_draft_len_text(text, 3) == text.replace("max_draft_len: 4   # chosen", "max_draft_len: 3   # chosen")
    # a nested key of the same name (deeper indent) is not the one we want
    nested = "speculative:\n  mode: ngram\n  eagle3:\n    max_draft_len: 9\nbuild:\n  backend: cpu\n"
    rewritten = set_draft_len_text(nested, 2)
    assert rewritten.splitlines()[1] == "  max_draft_len: 2" and "    max_draft_len: 9" in rewritten
    appended = set_draft_len_text("model:\n  source: smollm2", 5)
    assert yaml.safe_load(appended) == {"model": {"source": "smollm2"}, "speculative": {"max_draft_len": 5}}
    with pytest.raises(SpecError, match="flow style"):
        set_draft_len_text("speculative: {mode: ngram}\n", 2)


def test_invalid_choice_is_refused_before_writing(in_tmp):
    spec = in_tmp / "trtspec.yaml"
    spec.write_text("speculative:\n  max_draft_len: 4\n")
    with pytest.raises(SpecError):
        write_draft_len(spec, 0)        # outside 1..64: nothing written, no backup
    assert spec.read_text() == "speculative:\n  max_draft_len: 4\n"
    assert not (in_tmp / "trtspec.yaml.bak").exists()
