"""Every mode on the user's prompts (bench --compare-modes) and layerskip's exit layer chosen by
tune, in process on a tiny layerskip engine built by `trtspec build`."""

from __future__ import annotations

import json

import pytest
import yaml
from click.testing import CliRunner

from trtspec.bench import modes_compare
from trtspec.bench.tune import candidates, choose_schedule, exit_layer_candidates, set_field_text, write_choice
from trtspec.cli import main
from trtspec.errors import SpecError, TrtSpecError
from trtspec.spec.loading import load_spec


@pytest.fixture(scope="module")
def layerskip_engine(tiny_llama, tmp_path_factory):
    """(engine dir, spec path): a cpu layerskip engine over the tiny seeded 4-layer Llama."""
    root = tmp_path_factory.mktemp("layerskip-engine")
    spec = root / "trtspec.yaml"
    spec.write_text(f"# my spec\nmodel:\n  source: {tiny_llama}\n  name: tiny\nspeculative:\n  mode: layerskip  # keep\n"
                    f"  max_draft_len: 3\n  layerskip:\n    exit_layer:   # tune's\nbuild:\n  output_dir: "
                    f"{root / 'engines'}\nworkdir: {root / 'work'}\n")
    result = CliRunner().invoke(main, ["build", "-c", str(spec)])
    assert result.exit_code == 0, result.output
    return root / "engines" / "tiny-layerskip-cpu", spec


def test_tune_writes_the_fastest_exit_layer_and_lists_every_candidate(layerskip_engine, tmp_path):
    engine, original = layerskip_engine
    spec = tmp_path / "trtspec.yaml"
    spec.write_text(original.read_text())
    out = tmp_path / "tune"
    result = CliRunner().invoke(main, ["tune", "-c", str(spec), "--engine", str(engine), "--exit-layers", "1,2",
                                       "--draft-lens", "2", "--num-prompts", "2", "--max-tokens", "8",
                                       "--out", str(out), "--json"])
    assert result.exit_code == 0, result.output
    summary = json.loads((out / "tune.json").read_text())
    assert [(r["exit_layer"], r["max_draft_len"]) for r in summary["rows"]] == [(1, 2), (2, 2)]
    fastest = max(summary["rows"], key=lambda r: r["output_throughput"])
    assert summary["exit_layer"] == fastest["exit_layer"] and summary["speedup"] == fastest["speedup"]
    assert all(r["spec_decode_acceptance_length"] >= 1.0 for r in summary["rows"])
    assert load_spec(spec).speculative.layerskip.exit_layer == summary["exit_layer"]
    assert f"exit_layer: {summary['exit_layer']}  # tune's" in spec.read_text()
    assert (tmp_path / "trtspec.yaml.bak").read_text() == original.read_text()
    bad = CliRunner().invoke(main, ["tune", "-c", str(spec), "--engine", str(engine), "--exit-layers", "4",
                                    "--dry-run"])
    assert bad.exit_code != 0 and "outside 1..3" in bad.output


def test_compare_modes_measures_each_mode_against_plain_and_says_what_is_missing(layerskip_engine, tmp_path):
    engine, spec = layerskip_engine
    out = tmp_path / "modes"
    result = CliRunner().invoke(main, ["bench", "-c", str(spec), "--engine", str(engine), "--compare-modes",
                                       "ngram,suffix,lookahead,layerskip,medusa,mtp", "--num-prompts", "2", "--max-tokens",
                                       "8", "--concurrency", "1", "--repeats", "2", "--out", str(out), "--json"])
    assert result.exit_code == 0, result.output
    report = json.loads((out / "modes.json").read_text())
    assert json.loads(result.output)["report"]["modes"] == report["modes"]
    rows = {row["mode"]: row for row in report["modes"]}
    assert list(rows) == ["none", "ngram", "suffix", "lookahead", "layerskip", "medusa", "mtp"]
    # each mode at its own cap: suffix at speculative.suffix.max_draft_len (24), the others at the engine's (3)
    assert {m: rows[m]["max_draft_len"] for m in ("ngram", "suffix", "lookahead", "layerskip")} == {
        "ngram": 3, "suffix": 24, "lookahead": 3, "layerskip": 3}
    assert report["metadata"]["max_draft_lens"]["suffix"] == 24
    assert "trtspec convert --mode medusa" in rows["medusa"]["skipped"]
    assert "no MTP layers" in rows["mtp"]["skipped"]
    # each drafter's own settings, as engine_parts would build them from the bundle (exit: a quarter of 4 layers)
    assert rows["layerskip"]["settings"] == {"exit_layer": 1} and rows["ngram"]["settings"] == {
        "ngram_min": 2, "ngram_max": 3}
    assert rows["lookahead"]["settings"] == {"window": 4, "ngram": 3, "verification_set": 4}
    for mode in ("ngram", "suffix", "lookahead", "layerskip"):
        row = rows[mode]
        assert row["completed"] == 4 and row["failed"] == 0 and row["acceptance_length"] >= 1.0
        # the ratio is each repeat's tokens/s over plain decoding's in the same repeat, medianed
        plain = rows["none"]["output_throughput_by_repeat"]
        assert row["speedup_by_repeat"] == pytest.approx([a / b for a, b in zip(row["output_throughput_by_repeat"],
                                                                                 plain, strict=True)])
        assert len(row["per_position_acceptance"]) <= row["max_draft_len"]
        assert all(0 <= p <= 1 for p in row["per_position_acceptance"])
    # greedy drafting is lossless: every mode gives each prompt as many tokens as plain decoding
    cells = {r["variant"]: r for r in report["results"]}
    assert {cells[m]["total_output_tokens"] for m in ("none", "ngram", "suffix", "lookahead", "layerskip")} == {
        cells["none"]["total_output_tokens"]}
    text = modes_compare.render_text(report)
    assert "layerskip" in text and "skipped: the target has no MTP layers" in text


def test_compare_modes_finds_the_draft_and_medusa_heads_in_the_spec_checkpoints(layerskip_engine, tiny_llama,
                                                                                 tmp_path):
    """The artifacts where convert writes them (<workdir>/checkpoints/draft, medusa/) are measured, and
    each row says what drafted: the draft's depth, the nodes of Medusa's tree."""
    from trtspec.convert.first_layers import write_first_layers
    from trtspec.runtime import Engine
    from trtspec.testing.tiny_medusa import make_tiny_medusa

    engine, original = layerskip_engine
    spec = yaml.safe_load(original.read_text())
    spec["workdir"] = str(tmp_path / "work")
    (tmp_path / "trtspec.yaml").write_text(yaml.safe_dump(spec))
    checkpoints = tmp_path / "work" / "checkpoints"
    (checkpoints / "draft").mkdir(parents=True)
    write_first_layers(tiny_llama, checkpoints / "draft", 2)  # layerskip's GPU-backend draft, as convert writes it
    make_tiny_medusa(tiny_llama, checkpoints / "medusa", trained=False, num_heads=2)
    with Engine.from_checkpoints(tiny_llama, mode="medusa", draft_dir=checkpoints / "medusa") as medusa:
        nodes, depth = medusa.tree.num_nodes, max(len(path) for path in medusa.tree.paths)
    out = tmp_path / "modes"
    result = CliRunner().invoke(main, ["bench", "-c", str(tmp_path / "trtspec.yaml"), "--engine", str(engine),
                                       "--compare-modes", "draft-target,medusa", "--num-prompts", "2",
                                       "--max-tokens", "8", "--concurrency", "1", "--out", str(out)])
    assert result.exit_code == 0, result.output
    report = json.loads((out / "modes.json").read_text())
    rows = {row["mode"]: row for row in report["modes"]}
    assert list(rows) == ["none", "draft-target", "medusa"] and not any("skipped" in row for row in rows.values())
    assert rows["draft-target"]["settings"] == {"draft_layers": 2}
    assert rows["medusa"]["settings"] == {"num_heads": 2, "tree_nodes": nodes} and nodes > 2  # a tree, not a chain
    assert len(rows["medusa"]["per_position_acceptance"]) == depth
    assert len(rows["draft-target"]["per_position_acceptance"]) <= 3
    cells = {r["variant"]: r for r in report["results"]}
    for mode in ("draft-target", "medusa"):
        assert rows[mode]["completed"] == 2 and rows[mode]["failed"] == 0 and rows[mode]["acceptance_length"] >= 1.0
        assert cells[mode]["total_output_tokens"] == cells["none"]["total_output_tokens"]


def test_mode_names_and_exit_layer_candidates():
    assert modes_compare.parse_modes("all") == ["eagle3", "draft-target", "ngram", "suffix", "lookahead",
                                                "layerskip", "medusa", "mtp"]
    assert modes_compare.parse_modes("layerskip, ngram") == ["ngram", "layerskip"]  # table order
    with pytest.raises(TrtSpecError, match="unknown mode jacobi"):
        modes_compare.parse_modes("ngram,jacobi")
    assert exit_layer_candidates(30) == [3, 7, 11, 15] and exit_layer_candidates(4) == [1, 2]
    assert exit_layer_candidates(2) == [1]
    shapes = candidates([2, 4], exit_layers=[3, 7])
    assert [s.label for s in shapes][:2] == ["exit_layer=3,max_draft_len=2", "exit_layer=3,max_draft_len=4"]


def test_schedule_keeps_the_exit_layer_chosen_alone():
    rows = [{"concurrency": c, "max_draft_len": k, "exit_layer": e, "eagle_choices": None, "output_throughput": t}
            for c, k, e, t in [(1, 2, 3, 30.0), (1, 2, 7, 25.0), (4, 2, 3, 50.0), (4, 4, 7, 80.0)]]
    choice, schedule = choose_schedule(rows, {1: {"output_throughput": 20.0}, 4: {"output_throughput": 60.0}})
    assert choice["exit_layer"] == 3 and schedule == [[1, 2], [4, 0]]  # exit 7's 80 is another drafter


def test_nested_spec_field_rewrite(in_tmp):
    text = "speculative:\n  mode: layerskip\n  layerskip:\n    # why\n    exit_layer: null  # kept\n  ngram_max: 3\n"
    assert set_field_text(text, "layerskip.exit_layer", "7") == text.replace("null", "7")
    added = set_field_text("speculative:\n  mode: layerskip\n", "layerskip.exit_layer", "5")
    assert yaml.safe_load(added)["speculative"] == {"mode": "layerskip", "layerskip": {"exit_layer": 5}}
    assert yaml.safe_load(set_field_text("model:\n  name: x\n", "layerskip.exit_layer", "5"))["speculative"] == {
        "layerskip": {"exit_layer": 5}}
    with pytest.raises(SpecError, match="flow style"):
        set_field_text("speculative:\n  layerskip: {exit_layer: 2}\n", "layerskip.exit_layer", "5")
    spec = in_tmp / "trtspec.yaml"
    spec.write_text("speculative:\n  mode: layerskip\n  max_draft_len: 4\n")
    write_choice(spec, 2, extra={"layerskip.exit_layer": "3"})
    loaded = load_spec(spec).speculative
    assert (loaded.max_draft_len, loaded.layerskip.exit_layer) == (2, 3)
