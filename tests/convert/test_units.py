"""Pure pieces: draft vocabulary, learning-rate schedule."""

from __future__ import annotations

import json

import pytest

from trtspec.convert.eagle3_train import TrainSettings, lr_at


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


def test_precomputed_teacher_logits_train_exactly_like_modelopts_per_step_logits(tiny_llama, tmp_path):
    """compute_features keeps the teacher logits on the draft vocabulary; training on them must
    give the losses ModelOpt computes from the final hidden states itself (up to float16), and
    leave ModelOpt's own vocabulary mapping in place afterwards."""
    from trtspec.convert import eagle3_train

    model, input_ids, attention, features = _tiny_eagle3_with_features(tiny_llama)
    assert features["logits"].shape == (4, input_ids.shape[1], 128)
    start = {name: value.clone() for name, value in eagle3_train.trainable_state(model).items()}
    losses = {}
    for label, given in (("precomputed", features), ("per-step", {k: v for k, v in features.items() if k != "logits"})):
        losses[label] = _three_step_losses(model, start, given, input_ids, attention, tmp_path / label)
        assert "_map_logits_to_draft_vocab" not in model.__dict__  # ModelOpt's mapping is back
    assert losses["precomputed"] == pytest.approx(losses["per-step"], rel=1e-3)


def _tiny_eagle3_with_features(tiny_llama):
    """The tiny target converted to EAGLE-3 (128-token draft vocabulary) and its training features."""
    import torch

    from trtspec.convert import eagle3_data, eagle3_train
    from trtspec.convert.target import load_causal_lm

    config = json.loads((tiny_llama / "config.json").read_text())
    model, _ = load_causal_lm(tiny_llama, dtype="float32", trust_remote_code=False)
    sequences = [[(37 * row + 101 * i) % 509 + 2 for i in range(20 + row)] for row in range(4)]  # ids spread: d2t != 0
    kept, d2t, _ = eagle3_data.build_draft_vocab(sequences, config["vocab_size"], 128)
    torch.manual_seed(0)
    eagle3_train.convert_eagle3(model, config, draft_vocab_size=128, kept_ids=kept, d2t=d2t)
    input_ids, attention = eagle3_data.pack_rows(sequences, 64, 0)
    return model, input_ids, attention, eagle3_data.compute_features(model, input_ids, attention)


def _three_step_losses(model, start, features, input_ids, attention, work, *, bf16=False) -> list[float]:
    """Losses of three training steps from the head state `start` (same seed, same batches)."""
    from trtspec.convert import eagle3_train

    model.eagle_module.load_state_dict(start, strict=False)
    settings = eagle3_train.TrainSettings(max_steps=3, max_seconds=600, learning_rate=1e-3, batch_size=2,
                                          checkpoint_every=100, seed=0, bf16=bf16)
    result = eagle3_train.train_eagle3(model, lambda: features, input_ids, attention, settings, work)
    return [record["loss"] for record in result.history]


def test_bfloat16_training_computes_in_bfloat16_keeps_float32_weights_and_tracks_float32(tiny_llama, tmp_path):
    """train_dtype bfloat16 autocasts the step (the head's matmuls run in bfloat16) while the
    weights and the optimizer stay float32, and the losses stay close to a float32 run."""
    import torch

    from trtspec.convert import eagle3_train

    model, input_ids, attention, features = _tiny_eagle3_with_features(tiny_llama)
    start = {name: value.clone() for name, value in eagle3_train.trainable_state(model).items()}
    seen: list[torch.dtype] = []
    hook = model.eagle_module.layers[0].mlp.down_proj.register_forward_hook(lambda m, i, out: seen.append(out.dtype))
    losses = {}
    for bf16 in (False, True):
        seen.clear()
        losses[bf16] = _three_step_losses(model, start, features, input_ids, attention, tmp_path / str(bf16), bf16=bf16)
        assert set(seen) == {torch.bfloat16 if bf16 else torch.float32}
    hook.remove()
    assert {p.dtype for p in model.eagle_module.parameters()} == {torch.float32}
    assert losses[True] != losses[False]  # it really ran in another precision
    assert losses[True] == pytest.approx(losses[False], rel=0.02)


def test_train_dtype_auto_picks_bfloat16_only_with_native_cpu_support():
    import torch

    from trtspec.convert.eagle3_train import resolve_train_dtype

    assert resolve_train_dtype("float32") == "float32" and resolve_train_dtype("bfloat16") == "bfloat16"
    native = torch.cpu._is_avx512_bf16_supported() or torch.cpu._is_amx_tile_supported()
    assert resolve_train_dtype("auto") == ("bfloat16" if native else "float32")
