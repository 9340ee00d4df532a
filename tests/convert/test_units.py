"""Pure pieces: prompt sets, draft vocabulary, learning-rate schedule."""

from __future__ import annotations

import json

from trtspec.convert.eagle3_train import TrainSettings, lr_at
from trtspec.convert.prompts import load_prompts, prompt_file


def test_packaged_prompt_sets_are_disjoint_from_the_held_out_dev_set(dev_prompts):
    train = load_prompts(prompt_file(None, "train"))
    calibration = load_prompts(prompt_file(None, "calibration"))
    held_out = {p["prompt"] for p in dev_prompts}
    assert len(train) >= 300 and len(calibration) >= 32
    assert not held_out & set(train) and not held_out & set(calibration) and not set(train) & set(calibration)


def test_malformed_prompt_line_names_the_line(tmp_path):
    import pytest

    from trtspec.errors import TrtSpecError

    path = tmp_path / "p.jsonl"
    path.write_text(json.dumps({"prompt": "ok"}) + "\n{not json\n")
    with pytest.raises(TrtSpecError, match=r"p.jsonl:2: not valid JSON"):
        load_prompts(path)


def test_draft_vocab_keeps_most_frequent_tokens_and_d2t_maps_back():
    from trtspec.convert.eagle3_data import build_draft_vocab

    sequences = [[5, 5, 5, 9, 9, 2], [9, 7, 5]]
    kept, d2t, coverage = build_draft_vocab(sequences, vocab_size=16, draft_vocab_size=3)
    assert kept.tolist() == [2, 5, 9]  # 5 and 9 by count, then the 2-vs-7 tie by lowest id
    draft_ids = list(range(3))
    assert [i + int(d2t[i]) for i in draft_ids] == kept.tolist()  # target = draft + d2t[draft]
    assert 0.7 < coverage <= 1.0


def test_lr_warms_up_then_decays_to_the_floor():
    settings = TrainSettings(max_steps=100, max_seconds=60, learning_rate=1e-3, batch_size=1,
                             checkpoint_every=10, seed=0)
    assert lr_at(0.0, settings) < lr_at(0.05, settings) == 1e-3
    assert lr_at(0.5, settings) < 1e-3
    assert abs(lr_at(1.0, settings) - 1e-4) < 1e-12
