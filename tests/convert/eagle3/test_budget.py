"""The draft vocabulary sized to the answers' coverage, and the time budget of the whole eagle3 stage."""

from __future__ import annotations

import time

import pytest

from trtspec.convert.eagle3 import budget
from trtspec.convert.eagle3.budget import Rates, plan_budget, samples_that_fit


def counts_of(pairs: dict[int, int], vocab_size: int):
    import torch

    counts = torch.zeros(vocab_size, dtype=torch.int64)
    for token, count in pairs.items():
        counts[token] = count
    return counts


# --- draft vocabulary from coverage -----------------------------------------------------------

def test_the_fewest_most_frequent_tokens_that_reach_the_default_coverage():
    from trtspec.convert.eagle3.data import coverage_vocab_size

    # 1000 answer tokens: one token said 900 times, then 100 tokens said once each. 99 % is 990
    # tokens: the frequent one and 90 of the rare ones, so 91 (98 % would give 81, 99.5 % 96).
    counts = counts_of({7: 900, **{100 + i: 1 for i in range(100)}}, 4096)
    assert coverage_vocab_size(counts, 4096, multiple=1, floor=1) == 91
    assert coverage_vocab_size(counts, 4096, coverage=0.98, multiple=1, floor=1) == 81
    assert coverage_vocab_size(counts, 4096, coverage=0.995, multiple=1, floor=1) == 96
    # exactly at the share: 900 of 1000 is 90 %, reached by the first token alone
    assert coverage_vocab_size(counts, 4096, coverage=0.9, multiple=1, floor=1) == 1


def test_the_size_is_rounded_up_floored_and_capped():
    from trtspec.convert.eagle3.data import coverage_vocab_size

    # 5000 tokens said once each: 99 % needs 4950 of them -> 5120, the next multiple of 256
    counts = counts_of({i: 1 for i in range(5000)}, 16384)
    assert coverage_vocab_size(counts, 16384) == 5120
    # a few frequent tokens: the floor (4096) keeps room for what small data did not show
    assert coverage_vocab_size(counts_of({1: 5, 2: 5}, 16384), 16384) == 4096
    # never more than the target's vocabulary, and no data gives the floor
    assert coverage_vocab_size(counts, 5000) == 5000
    assert coverage_vocab_size(counts_of({}, 16384), 16384) == 4096


def test_the_draft_vocabulary_counts_answers_not_prompts_and_keeps_an_explicit_size(tmp_path):
    from trtspec.convert.eagle3 import prepare
    from trtspec.convert.eagle3 import store as eagle3_store
    from trtspec.convert.eagle3.data import Row
    from trtspec.convert.eagle3.distributed import Dist

    files = prepare.WorkFiles(tmp_path)
    # prompts of 3 tokens from ids 10000-10999 (a chat template, a system prompt) and answers of
    # 5000 distinct ids below 5000: only the answers decide the size and the coverage
    rows = [(i, Row([10000 + i, 10000 + i, 10999] + list(range(i * 500, (i + 1) * 500)), 3)) for i in range(10)]
    eagle3_store.write_rows(files.rows, rows)
    vocab = prepare.draft_vocabulary(files, 16384, None, rows=10, dist=Dist())
    assert (vocab.size, vocab.answer_tokens, vocab.chosen_by) == (5120, 5000, "coverage")
    assert vocab.coverage == 1.0 and not any(int(t) >= 10000 for t in vocab.kept)
    assert "5,120 of 16,384 tokens, 100.00% of the 5,000 answer tokens" in vocab.line(16384)
    # the first 5 rows only (a run that trains on fewer rows than the file holds): 2500 answer tokens
    assert prepare.draft_vocabulary(files, 16384, None, rows=5, dist=Dist()).answer_tokens == 2500
    # an explicit size is kept, and a size of the whole vocabulary means no reduced vocabulary
    explicit = prepare.draft_vocabulary(files, 16384, 512, rows=10, dist=Dist())
    assert (explicit.size, explicit.chosen_by) == (512, "spec") and explicit.coverage == pytest.approx(512 / 5000)
    assert prepare.draft_vocabulary(files, 16384, 16384, rows=10, dist=Dist()).size is None
    # a rows file from before answer starts were kept counts whole rows
    eagle3_store.write_rows(files.rows, [(i, row.ids) for i, row in rows])
    assert prepare.draft_vocabulary(files, 16384, None, rows=10, dist=Dist()).answer_tokens == 5030


# --- the budget plan ----------------------------------------------------------------------------

RATES = Rates(answer_s=3.0, feature_s=0.5, finish_s=60.0)


def test_the_plan_shrinks_the_samples_to_half_the_budget_and_training_gets_the_rest():
    # 10 minutes, 30 s spent, 16 answers made: the data step may take 300 - 30 = 270 s; 400
    # samples would take 384 x 3 + 400 x 0.5 = 1352 s, so 16 + (270 - 8) // 3.5 = 90 fit
    plan = plan_budget(600, 30, requested=400, on_disk=16, rates=RATES, min_samples=16)
    assert plan.samples == 90 and plan.shrunk
    assert plan.answers_s == 74 * 3.0 and plan.features_s == 90 * 0.5
    assert plan.spent_s + plan.answers_s + plan.features_s <= 0.5 * 600
    assert 30 + 75 * 3.0 + 91 * 0.5 > 0.5 * 600  # one more would not fit
    assert plan.training_s == 600 - 30 - 222 - 45 - 60
    line = plan.line()
    assert "\n" not in line and "90 samples (of 400" in line and "training gets the rest, ~4.0 min" in line


def test_the_plan_keeps_every_sample_that_fits_and_the_rows_on_disk_cost_only_features():
    plan = plan_budget(600, 30, requested=50, on_disk=16, rates=RATES, min_samples=16)
    assert (plan.samples, plan.shrunk, plan.answers_s) == (50, False, 34 * 3.0)
    # all 400 rows made by an earlier run: only their features count (200 s < 270 s)
    plan = plan_budget(600, 30, requested=400, on_disk=400, rates=RATES, min_samples=16)
    assert (plan.samples, plan.answers_s, plan.features_s) == (400, 0.0, 200.0)
    # 1000 rows on disk whose features alone would overrun: the first 540 of them
    assert samples_that_fit(270, 1000, RATES) == 540


def test_a_budget_the_probe_already_spent_keeps_the_minimum_and_training_its_floor():
    plan = plan_budget(60, 45, requested=400, on_disk=16, rates=RATES, min_samples=16)
    assert plan.samples == 16
    assert plan.training_s == budget.MIN_TRAINING_SHARE * 60
    assert plan_budget(60, 45, requested=8, on_disk=16, rates=RATES, min_samples=16).samples == 8


def test_the_probe_is_whole_per_process_and_never_more_than_is_missing():
    assert budget.probe_size(400, 0, 1) == budget.PROBE_SAMPLES
    assert budget.probe_size(400, 0, 3) == 18  # 6 per process
    assert budget.probe_size(400, 395, 1) == 5
    assert budget.probe_size(400, 400, 1) == 0


def test_a_tight_budget_makes_fewer_rows_and_a_larger_one_adds_to_them(tiny_llama, tmp_path, one_torch_thread):
    """make_rows for real on the tiny target: a budget the probe alone overruns stops at the probe's
    rows; a re-run with time to spare keeps them and appends the rest; fewer samples read a prefix."""
    from trtspec.convert.eagle3 import prepare
    from trtspec.convert.eagle3 import store as eagle3_store
    from trtspec.convert.eagle3.distributed import Dist
    from trtspec.convert.eagle3.sources import DataSource
    from trtspec.convert.target import load_causal_lm
    from trtspec.spec.schema import Eagle3Training

    model, tokenizer = load_causal_lm(tiny_llama, dtype="float32", trust_remote_code=False)
    source = DataSource.from_settings(None, None).scan()
    files, key = prepare.WorkFiles(tmp_path), {"target_sha256": "t", "data_sha256": source.sha256}
    notes = []

    def rows(samples: int, budget_s: float):
        settings = Eagle3Training(num_samples=samples, answer_tokens=8, seq_len=64, batch_size=4,
                                  generate_batch_size=8)
        return prepare.make_rows(settings, model, tokenizer, source, files, key, dist=Dist(), report=notes.append,
                                 budget_s=budget_s, started=time.monotonic(), held_out_tokens=2)

    stats, plan = rows(40, budget_s=0.001)
    assert (stats.count, plan.samples, plan.on_disk) == (budget.PROBE_SAMPLES, budget.PROBE_SAMPLES, 16)
    assert any(getattr(n, "text", "").startswith("budget 0.0 min") for n in notes)
    first = list(eagle3_store.read_rows(files.rows))
    stats, plan = rows(40, budget_s=1e6)
    assert (stats.count, plan.samples, plan.on_disk, plan.shrunk) == (40, 40, 32, False)  # 16 + a second probe
    again = list(eagle3_store.read_rows(files.rows))
    assert again[:16] == first and [i for i, _ in again] == list(range(40))
    stats, plan = rows(10, budget_s=1e6)
    assert (stats.count, plan.on_disk, plan.answers_s) == (10, 40, 0.0)
    assert len(list(eagle3_store.read_rows(files.rows))) == 40  # nothing thrown away


@pytest.mark.slow
def test_convert_says_its_plan_and_vocabulary_and_reports_both(tiny_llama, tmp_path, eval_prompts_file, monkeypatch):
    """The default (no draft_vocab_size) end to end on the tiny target, with the floor and the
    multiple lowered to fit its 512-token vocabulary: a coverage-sized head exports and the cpu
    engine drafts with it; the plan and the vocabulary are said in one line each and reported."""
    from tests.convert.conftest import manifest, one_thread, run_cli, write_spec
    from trtspec.convert.eagle3 import data as eagle3_data

    monkeypatch.setattr(eagle3_data, "DRAFT_VOCAB_FLOOR", 32)
    monkeypatch.setattr(eagle3_data, "DRAFT_VOCAB_MULTIPLE", 32)
    spec = write_spec(tmp_path, tiny_llama, speculative={
        "mode": "eagle3", "eagle3": {"num_samples": 20, "answer_tokens": 12, "max_steps": 3, "batch_size": 4,
                                      "seq_len": 64, "checkpoint_every": 2}})
    with one_thread():
        result = run_cli("-c", str(spec), "--eval-prompts", str(eval_prompts_file), "--eval-tokens", "8")
    assert result.exit_code == 0, result.output
    lines = result.output.splitlines()
    plan_lines = [line for line in lines if line.startswith("budget 15.0 min for the whole eagle3 stage")]
    vocab_lines = [line for line in lines if line.startswith("draft vocabulary: ")]
    assert len(plan_lines) == 1 and "for 20 samples" in plan_lines[0] and "16 made" in plan_lines[0]
    assert len(vocab_lines) == 1 and "of 512 tokens" in vocab_lines[0] and "99%" in vocab_lines[0]
    report = manifest(tmp_path / "work" / "checkpoints" / "eagle3")["report"]
    data = report["data"]
    assert data["draft_vocab_chosen_by"] == "coverage" and data["draft_vocab_coverage"] >= 0.99
    assert data["draft_vocab_size"] % 32 == 0 and 32 <= data["draft_vocab_size"] < 512
    assert f"{data['draft_vocab_size']:,} of 512 tokens" in vocab_lines[0]
    plan = report["budget"]["plan"]
    assert (plan["requested"], plan["samples"], plan["on_disk"], plan["budget_s"]) == (20, 20, 16, 900.0)
    timings = report["timings"]
    assert {"data_s", "features_s", "training_s", "finish_s", "total_s"} <= set(timings)
    assert timings["total_s"] >= timings["data_s"] + timings["training_s"]
    assert report["acceptance"]["method"].startswith("trtspec.runtime")  # the engine loaded the head
    took = [line.strip() for line in lines if " of 15.0 min: data " in line]
    assert len(took) == 1 and "(20 of 20 samples)" in took[0] and f"{data['draft_vocab_size']} tokens" in took[0]


def test_a_second_finish_estimate_only_ever_shortens_the_finish():
    """The finish is re-timed after the answers: the faster estimate wins (load only slows a
    forward) and training's estimate takes the difference; a slower second timing changes nothing."""
    from trtspec.convert.eagle3.budget import BudgetPlan, with_finish

    plan = BudgetPlan(budget_s=480.0, spent_s=10.0, requested=160, samples=29, on_disk=16, answers_s=90.0,
                      features_s=30.0, finish_s=490.0, training_s=48.0)
    faster = with_finish(plan, 40.0)
    assert faster.finish_s == 40.0 and faster.training_s == 48.0 + 450.0
    assert with_finish(plan, 600.0) == plan
