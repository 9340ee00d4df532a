"""Pure pieces and one-process training mechanics: draft vocabulary, learning-rate schedule,
precomputed teacher logits, bfloat16 autocast, device resolution."""

from __future__ import annotations

import json
import os

import pytest

from trtspec.convert.eagle3.train import TrainSettings, lr_at


def test_draft_vocab_keeps_most_frequent_tokens_and_d2t_maps_back():
    from trtspec.convert.eagle3.data import build_draft_vocab

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


def tiny_eagle3_store(tiny_llama, directory, *, teacher_logits: bool = True):
    """The tiny target converted to EAGLE-3 (128-token draft vocabulary) and a feature store of 4 rows."""
    import torch

    from trtspec.convert.eagle3 import data as eagle3_data
    from trtspec.convert.eagle3 import features
    from trtspec.convert.eagle3 import store as eagle3_store
    from trtspec.convert.eagle3 import train as eagle3_train
    from trtspec.convert.target import load_causal_lm

    config = json.loads((tiny_llama / "config.json").read_text())
    model, _ = load_causal_lm(tiny_llama, dtype="float32", trust_remote_code=False)
    rows = [[(37 * row + 101 * i) % 509 + 2 for i in range(20 + row)] for row in range(4)]  # ids spread: d2t != 0
    kept, d2t, _ = eagle3_data.build_draft_vocab(rows, config["vocab_size"], 128)
    torch.manual_seed(0)
    eagle3_train.convert_eagle3(model, config, draft_vocab_size=128, kept_ids=kept, d2t=d2t)
    arrays = features.feature_arrays(model, 64)
    if not teacher_logits:
        arrays.pop("logits")
    store = eagle3_store.FeatureStore.create(directory, rows=len(rows), arrays=arrays, key="test")
    features.fill_store(model, store, iter(enumerate(rows)), start=0, stop=len(rows), length=64, pad_id=0)
    store.mark_complete()
    store.close()
    return model, eagle3_store.FeatureStore.open(directory)


def three_step_losses(model, start, store, work, *, bf16=False, batch_size=2, micro_batch_size=None) -> list[float]:
    """Losses of three training steps from the head state `start` (same seed, same batches)."""
    import torch

    from trtspec.convert.eagle3 import train as eagle3_train
    from trtspec.convert.eagle3.device import Placement

    model.eagle_module.load_state_dict(start, strict=False)
    settings = eagle3_train.TrainSettings(max_steps=3, max_seconds=600, learning_rate=1e-3, batch_size=batch_size,
                                          checkpoint_every=100, seed=0, micro_batch_size=micro_batch_size)
    placement = Placement(torch.device("cpu"), "bfloat16" if bf16 else "float32")
    result = eagle3_train.train_eagle3(model, lambda: store, settings, placement, work)
    return [record["loss"] for record in result.history]


def test_precomputed_teacher_logits_train_exactly_like_modelopts_per_step_logits(tiny_llama, tmp_path):
    """The feature store keeps the teacher logits on the draft vocabulary; training on them must
    give the losses ModelOpt computes from the final hidden states itself (up to float16), and
    leave ModelOpt's own vocabulary mapping in place afterwards."""
    from trtspec.convert.eagle3 import train as eagle3_train

    model, store = tiny_eagle3_store(tiny_llama, tmp_path / "with")
    _, without = tiny_eagle3_store(tiny_llama, tmp_path / "without", teacher_logits=False)
    assert store.arrays["logits"].shape == (64, 128) and "logits" not in without.arrays
    start = {name: value.clone() for name, value in eagle3_train.trainable_state(model).items()}
    losses = {}
    for label, given in (("precomputed", store), ("per-step", without)):
        losses[label] = three_step_losses(model, start, given, tmp_path / label)
        assert "_map_logits_to_draft_vocab" not in model.__dict__  # ModelOpt's mapping is back
        assert "_eagle_loss" not in model.__dict__  # and its own loss
    assert losses["precomputed"] == pytest.approx(losses["per-step"], rel=1e-3)


def test_bfloat16_training_computes_in_bfloat16_keeps_float32_weights_and_tracks_float32(tiny_llama, tmp_path):
    """train_dtype bfloat16 autocasts the step (the head's matmuls run in bfloat16) while the
    weights and the optimizer stay float32, and the losses stay close to a float32 run."""
    import torch

    from trtspec.convert.eagle3 import train as eagle3_train

    model, store = tiny_eagle3_store(tiny_llama, tmp_path / "store")
    start = {name: value.clone() for name, value in eagle3_train.trainable_state(model).items()}
    seen: list[torch.dtype] = []
    hook = model.eagle_module.layers[0].mlp.down_proj.register_forward_hook(lambda m, i, out: seen.append(out.dtype))
    losses = {}
    for bf16 in (False, True):
        seen.clear()
        losses[bf16] = three_step_losses(model, start, store, tmp_path / str(bf16), bf16=bf16)
        assert set(seen) == {torch.bfloat16 if bf16 else torch.float32}
    hook.remove()
    assert {p.dtype for p in model.eagle_module.parameters()} == {torch.float32}
    assert losses[True] != losses[False]  # it really ran in another precision
    assert losses[True] == pytest.approx(losses[False], rel=0.02)


def test_train_dtype_auto_picks_bfloat16_only_with_native_cpu_support():
    import torch

    from trtspec.convert.eagle3.device import resolve_train_dtype

    assert resolve_train_dtype("float32") == "float32" and resolve_train_dtype("bfloat16") == "bfloat16"
    native = torch.cpu._is_avx512_bf16_supported() or torch.cpu._is_amx_tile_supported()
    assert resolve_train_dtype("auto") == ("bfloat16" if native else "float32")
    assert resolve_train_dtype("auto", torch.device("cpu")) == resolve_train_dtype("auto")


def test_gradient_accumulation_trains_like_one_forward_over_the_global_batch(tiny_llama, tmp_path):
    """Rows of different lengths (20..23 tokens) in one forward of 4, or in four one-row
    micro-batches: ModelOpt's per-forward token mean is rescaled to the global batch's, so the
    losses and the weights are the same up to float32 rounding (what keeps the global batch when
    the number of processes changes)."""
    from trtspec.convert.eagle3 import train as eagle3_train

    model, store = tiny_eagle3_store(tiny_llama, tmp_path / "store")
    start = {name: value.clone() for name, value in eagle3_train.trainable_state(model).items()}
    runs = {}
    for micro in (None, 1):
        losses = three_step_losses(model, start, store, tmp_path / str(micro), batch_size=4, micro_batch_size=micro)
        runs[micro] = (losses, eagle3_train.trainable_state(model))
    assert runs[1][0] == pytest.approx(runs[None][0], rel=1e-5)
    worst = max(float((runs[1][1][n] - runs[None][1][n]).abs().max()) for n in start if start[n].is_floating_point())
    moved = max(float((runs[None][1][n] - start[n]).abs().max()) for n in start if start[n].is_floating_point())
    assert moved > 1e-4 and worst < 1e-3 * moved


def test_eagle3_export_prints_no_transformers_deprecation(tiny_llama, tmp_path):
    """ModelOpt's export reads config.torch_dtype, which transformers 5 logs as deprecated; the
    line reached every `trtspec convert --mode eagle3` run. A fresh process: the log is once."""
    import subprocess
    import sys

    script = ("import sys; from pathlib import Path; from trtspec.testing.tiny import make_tiny_eagle3; "
              "from trtspec.convert.eagle3.export import export_eagle3; "
              "export_eagle3(make_tiny_eagle3(sys.argv[1]), Path(sys.argv[2]))")
    done = subprocess.run([sys.executable, "-c", script, str(tiny_llama), str(tmp_path / "head")],
                          capture_output=True, text=True, timeout=300, env={**os.environ, "OMP_NUM_THREADS": "1"})
    assert done.returncode == 0, done.stderr
    assert "torch_dtype" not in done.stderr + done.stdout, done.stderr
    assert (tmp_path / "head" / "model.safetensors").is_file()
