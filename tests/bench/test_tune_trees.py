"""tune with dynamic trees: chains and trees compete per concurrency; the spec records the shapes."""

from __future__ import annotations

import click
import pytest
import yaml

from trtspec.bench.tune import Candidate, candidates, choose_schedule, tune_rows, write_choice
from trtspec.cli.tune_cmd import _tree_shapes
from trtspec.spec.loading import load_spec


def _row(c, tps, k=0, tree=None):
    return {"concurrency": c, "max_draft_len": k or tree[1], "output_throughput": tps, "eagle_choices": None,
            "tree": tree}


def test_a_tree_that_wins_alone_gives_way_to_a_chain_then_to_nothing():
    rows = [_row(1, 30.0, k=2), _row(1, 36.0, tree=[4, 3, 8]),      # alone: the tree
            _row(4, 70.0, k=2), _row(4, 61.0, tree=[4, 3, 8]),      # 4 at once: the chain
            _row(8, 90.0, k=2), _row(8, 70.0, tree=[4, 3, 8])]      # full batch: plain decoding
    baselines = {1: {"output_throughput": 25.0}, 4: {"output_throughput": 60.0}, 8: {"output_throughput": 95.0}}
    choice, schedule = choose_schedule(rows, baselines)
    assert choice["tree"] == [4, 3, 8]
    assert schedule == [[1, 4, 3, 8], [4, 2], [8, 0]]


def test_dynamic_candidates_label_and_row():
    shapes = candidates([2], shapes=[[4, 3, 8]])
    assert [s.label for s in shapes] == ["max_draft_len=2", "dynamic-tree=4,3,8"]
    assert shapes[1] == Candidate(3, dynamic=(4, 3, 8))
    results = [{"variant": "dynamic-tree=4,3,8", "output_throughput": 30.0, "output_throughput_by_repeat": [30.0],
                "mean_tpot_ms": 33.0, "spec_decode_acceptance_length": 1.7}]
    rows, _ = tune_rows(results, shapes)
    assert rows[0]["tree"] == [4, 3, 8] and rows[0]["max_draft_len"] == 3


def test_the_schedule_with_tree_rows_and_a_lone_tree_are_written_into_the_spec(in_tmp):
    spec = in_tmp / "trtspec.yaml"
    spec.write_text("speculative:\n  mode: eagle3   # kept\n  max_draft_len: 4\n")
    write_choice(spec, 3, None, set_choices=True, schedule=[[1, 4, 3, 8], [4, 2], [8, 0]])
    loaded = load_spec(spec)
    assert loaded.speculative.draft_len_schedule == [[1, 4, 3, 8], [4, 2], [8, 0]] and "# kept" in spec.read_text()
    assert loaded.speculative.tree is None
    write_choice(spec, 3, None, set_choices=True, tree=[4, 3, 8])
    assert yaml.safe_load(spec.read_text())["speculative"]["tree"] == {"topk": 4, "depth": 3, "num_draft_tokens": 8}


def test_tree_shapes_option():
    assert _tree_shapes("4,3,8; 8,4,16") == [[4, 3, 8], [8, 4, 16]] and _tree_shapes("none") == []
    with pytest.raises(click.BadParameter, match="topk,depth,num_draft_tokens"):
        _tree_shapes("4,3")
