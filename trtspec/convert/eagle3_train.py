"""EAGLE-3 head: ModelOpt conversion sized from the target, and a budgeted training loop.

`convert_eagle3(model, ...)` applies `modelopt.torch.speculative.convert` with EAGLE3_DEFAULT_CFG's
architecture resized to the target (heads, KV heads, head_dim, MLP width, rope theta, norm eps):
the stock config is shaped for Llama-3-8B and is 7x larger than SmolLM2 needs.

`train_eagle3(...)` trains on precomputed features (ModelOpt's offline mode: the frozen target ran
once in `eagle3_data.compute_features`), so each step costs only the head. Per step:
  # 1. take a batch of rows      # 2. ModelOpt forward (3 train-time-test steps, distillation loss)
  # 3. backward, clip, AdamW     # 4. lr: warmup then cosine over max(step/max_steps, time/budget)
  # 5. every `checkpoint_every` steps: save a resumable state and a weights snapshot
It stops at `max_steps` or the wall-clock budget, whichever comes first; a killed run (or one
given a larger budget, see eagle3.train_state_key) resumes from its last state when called again.
"""

from __future__ import annotations

import math
import os
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from trtspec.errors import ModelSourceError


def eagle3_architecture(target_config: dict[str, Any], *, draft_vocab_size: int | None) -> dict[str, Any]:
    """EAGLE3_DEFAULT_CFG's decoder-layer config resized from the target's config.json."""
    from modelopt.torch.speculative.config import EAGLE3_DEFAULT_CFG

    arch = dict(EAGLE3_DEFAULT_CFG["config"]["eagle_architecture_config"])
    heads = target_config["num_attention_heads"]
    theta = target_config.get("rope_theta") or (target_config.get("rope_parameters") or {}).get("rope_theta", 10000.0)
    arch.update({
        "num_attention_heads": heads,
        "num_key_value_heads": target_config.get("num_key_value_heads", heads),
        "head_dim": target_config.get("head_dim") or target_config["hidden_size"] // heads,
        "intermediate_size": target_config["intermediate_size"],
        "rms_norm_eps": target_config.get("rms_norm_eps", 1e-5),
        "rope_theta": theta, "rope_scaling": {"rope_type": "default", "rope_theta": theta},
        "torch_dtype": "float32",
    })
    if draft_vocab_size and draft_vocab_size < target_config["vocab_size"]:
        arch["draft_vocab_size"] = draft_vocab_size
    arch["eagle_aux_hidden_state_layer_ids"] = aux_layer_ids(target_config["num_hidden_layers"])
    return arch


def aux_layer_ids(num_layers: int) -> list[int]:
    """Three distinct target layers whose hidden states feed the head (low, middle, high).

    ModelOpt's default ({1, n/2 - 1, n - 4}) collapses to fewer than three on shallow models, and
    vLLM sizes the head's fc for exactly three, so fall back to {0, n/2, n - 1} there.
    """
    from modelopt.torch.speculative.plugins.hf_eagle import default_eagle_aux_layer_ids

    if num_layers < 3:
        raise ModelSourceError(f"the target has {num_layers} layers; EAGLE-3 needs at least 3",
                               fix="use speculative.mode draft-target or ngram for this model")
    ids = default_eagle_aux_layer_ids(num_layers)
    return ids if len(ids) == 3 else sorted({0, num_layers // 2, num_layers - 1})


def convert_eagle3(model, target_config: dict[str, Any], *, draft_vocab_size: int | None = None,
                   kept_ids=None, d2t=None):
    """Convert `model` in place into a ModelOpt EAGLE-3 model; return it.

    The head's final norm and decoder layer start from the target's (`init_from_last_layer`); with
    a reduced vocabulary the head's lm_head starts as the target's lm_head rows of the kept tokens
    and `d2t` is filled, so the head begins where the target's own output layer is.
    """
    import modelopt.torch.speculative as mtsp
    import torch

    config = {
        "eagle_architecture_config": eagle3_architecture(target_config, draft_vocab_size=draft_vocab_size),
        # torch.compile costs ~70 s per shape on this CPU and the head is small; eager is faster overall.
        "eagle_use_torch_compile": False,
        # Keep the training rope in the exported config (ModelOpt would inject YaRN x32 otherwise),
        # so every reader applies the rope the head was trained with.
        "eagle_export_rope_scaling": {},
    }
    mtsp.convert(model, [("eagle", config)])
    head = model.eagle_module
    base = model.get_submodule(model.base_model_path)
    with torch.no_grad():
        head.norm.weight.copy_(base.norm.weight)
        init_from_last_layer(head, base.layers[-1], target_config["hidden_size"])
        if hasattr(head, "d2t") and d2t is not None:
            head.d2t.copy_(d2t)
        if hasattr(head, "d2t") and kept_ids is not None:
            head.lm_head.weight.copy_(model._base_model_lm_head.weight[kept_ids])
    return model


def init_from_last_layer(head, last_layer, hidden_size: int) -> None:
    """Start the head's decoder layer as a copy of the target's last layer (a prior, not a fit).

    The first layer's q/k/v read cat(embeddings, hidden): the hidden half gets the target's
    weights and the embedding half starts at zero; `fc` starts by passing the deepest auxiliary
    layer through. Measured on SmolLM2 (same data and step count): held-out mean acceptance
    length 1.35 against 1.30 from ModelOpt's random initialisation (docs/CONVERT.md).
    """
    import torch

    layer = head.layers[0]
    for name in ("q_proj", "k_proj", "v_proj"):
        weight = getattr(layer.self_attn, name).weight
        source = getattr(last_layer.self_attn, name).weight
        if weight.shape != (source.shape[0], 2 * hidden_size):
            return  # not the EAGLE-3 layout this prior assumes: keep ModelOpt's initialisation
        weight.zero_()
        weight[:, hidden_size:] = source
    layer.self_attn.o_proj.weight.copy_(last_layer.self_attn.o_proj.weight)
    for name in ("gate_proj", "up_proj", "down_proj"):
        getattr(layer.mlp, name).weight.copy_(getattr(last_layer.mlp, name).weight)
    layer.input_layernorm.weight.copy_(last_layer.input_layernorm.weight)
    layer.post_attention_layernorm.weight.copy_(last_layer.post_attention_layernorm.weight)
    head.fc.weight.zero_()
    head.fc.weight[:, -hidden_size:] = torch.eye(hidden_size)  # fc input: the aux layers, deepest last


@dataclass
class TrainSettings:
    max_steps: int
    max_seconds: float
    learning_rate: float
    batch_size: int
    checkpoint_every: int
    seed: int
    warmup_fraction: float = 0.05
    final_lr_fraction: float = 0.1
    bf16: bool = False  # autocast the step to bfloat16; the weights and optimizer stay float32


@dataclass
class TrainResult:
    steps: int
    seconds: float
    stopped_by: str  # "max_steps" | "time_budget"
    resumed_from: int
    history: list[dict[str, Any]] = field(default_factory=list)

    def to_dict(self) -> dict[str, Any]:
        return {"steps": self.steps, "seconds": round(self.seconds, 1), "stopped_by": self.stopped_by,
                "resumed_from": self.resumed_from, "history": self.history}


def resolve_train_dtype(choice: str) -> str:
    """"bfloat16" or "float32" for `speculative.eagle3.train_dtype`.

    auto picks bfloat16 only where the CPU multiplies bfloat16 natively (AVX512-BF16 or AMX):
    there a SmolLM2 training step is 1.58x faster at the same held-out acceptance
    (docs/CONVERT.md, session 4); elsewhere bfloat16 is emulated and slower than float32.
    """
    if choice != "auto":
        return choice
    import torch

    native = any(getattr(torch.cpu, probe, lambda: False)()
                 for probe in ("_is_avx512_bf16_supported", "_is_amx_tile_supported"))
    return "bfloat16" if native else "float32"


def lr_at(progress: float, settings: TrainSettings) -> float:
    """Linear warmup, then cosine decay to final_lr_fraction of the peak; progress in [0, 1]."""
    peak = settings.learning_rate
    if progress < settings.warmup_fraction:
        return peak * max(progress / settings.warmup_fraction, 0.02)
    span = (progress - settings.warmup_fraction) / max(1e-9, 1 - settings.warmup_fraction)
    floor = settings.final_lr_fraction
    return peak * (floor + (1 - floor) * 0.5 * (1 + math.cos(math.pi * min(1.0, span))))


def trainable_state(model) -> dict[str, Any]:
    """The head's weights and buffers (d2t), detached on the CPU."""
    return {name: tensor.detach().clone() for name, tensor in model.eagle_module.state_dict().items()
            if not name.startswith("rotary_emb")}


def _save_atomic(obj: Any, path: Path) -> None:
    import torch

    partial = path.with_name(path.name + ".partial")
    torch.save(obj, partial)
    os.replace(partial, path)


def _already_mapped(logits):
    return logits


def train_eagle3(model, features: Callable[[], dict], input_ids, attention_mask, settings: TrainSettings,
                 work_dir: Path, *, on_step: Callable[[int, dict[str, Any]], None] | None = None) -> TrainResult:
    """Train `model.eagle_module` on precomputed features; resumable from `work_dir/state.pt`.

    `features` is called only when there is training left to do, so re-exporting a finished run
    does not re-run the target over the data.
    """
    import torch

    work_dir.mkdir(parents=True, exist_ok=True)
    state_path, snapshots = work_dir / "state.pt", work_dir / "snapshots"
    snapshots.mkdir(exist_ok=True)
    params = [p for p in model.eagle_module.parameters() if p.requires_grad]
    optimizer = torch.optim.AdamW(params, lr=settings.learning_rate, weight_decay=0.0, betas=(0.9, 0.95))
    step, elapsed, history = 0, 0.0, []
    if state_path.exists():
        state = torch.load(state_path, map_location="cpu", weights_only=False)
        model.eagle_module.load_state_dict(state["head"], strict=False)
        optimizer.load_state_dict(state["optimizer"])
        step, elapsed, history = state["step"], state["elapsed"], state["history"]
    resumed_from = step
    if step < settings.max_steps and elapsed < settings.max_seconds:
        features = features()
    generator = torch.Generator().manual_seed(settings.seed + step)
    rows = input_ids.shape[0]
    order = torch.randperm(rows, generator=generator)
    cursor = 0
    model.train()
    model.eagle_offline = True  # train on the features; the frozen target is not re-run per step
    if isinstance(features, dict) and "logits" in features:
        # the teacher logits were restricted to the draft vocabulary once, in compute_features
        model._map_logits_to_draft_vocab = _already_mapped
    started = time.monotonic() - elapsed
    try:
        while step < settings.max_steps and elapsed < settings.max_seconds:
            # 1. take a batch of rows (reshuffle at each epoch end)
            if cursor + settings.batch_size > rows:
                order, cursor = torch.randperm(rows, generator=generator), 0
            index = order[cursor:cursor + settings.batch_size]
            cursor += settings.batch_size
            base_outputs = {"base_model_hidden_states": features["hidden"][index],
                            "aux_hidden_states": features["aux"][index].float(),
                            "base_model_input_embeds": features["embeds"][index].float()}
            if "logits" in features:
                base_outputs["base_model_logits"] = features["logits"][index].float()
            # 4. learning rate from whichever budget is further along
            progress = max(step / settings.max_steps, elapsed / settings.max_seconds)
            for group in optimizer.param_groups:
                group["lr"] = lr_at(progress, settings)
            # 2. forward: ModelOpt's EAGLE-3 loss over every position, 3 train-time-test steps
            with torch.autocast("cpu", dtype=torch.bfloat16, enabled=settings.bf16):  # convert trains on the CPU
                output = model(input_ids=input_ids[index], attention_mask=attention_mask[index],
                               base_model_outputs=base_outputs)
            # 3. backward and update
            optimizer.zero_grad(set_to_none=True)
            output.loss.backward()
            torch.nn.utils.clip_grad_norm_(params, 1.0)
            optimizer.step()
            step += 1
            elapsed = time.monotonic() - started
            record = {"step": step, "seconds": round(elapsed, 1), "loss": round(float(output.loss.detach()), 4),
                      "lr": optimizer.param_groups[0]["lr"],
                      "train_acc": [round(float(a), 3) for a in output.train_acc[0]]}
            history.append(record)
            if on_step:
                on_step(step, record)
            # 5. periodic resumable state + a weights snapshot (for acceptance-vs-time curves)
            finished = step >= settings.max_steps or elapsed >= settings.max_seconds
            if step % settings.checkpoint_every == 0 or finished:
                _save_atomic({"head": trainable_state(model), "optimizer": optimizer.state_dict(), "step": step,
                              "elapsed": elapsed, "history": history}, state_path)
                _save_atomic({"head": trainable_state(model), "step": step, "seconds": elapsed},
                             snapshots / f"step-{step:06d}.pt")
    finally:
        model.__dict__.pop("_map_logits_to_draft_vocab", None)
        model.eagle_offline = False
        model.eval()
    stopped_by = "max_steps" if step >= settings.max_steps else "time_budget"
    return TrainResult(steps=step, seconds=elapsed, stopped_by=stopped_by, resumed_from=resumed_from,
                       history=history)
