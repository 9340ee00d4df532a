"""EAGLE-3 head: ModelOpt conversion sized from the target, and a budgeted data-parallel training loop.

`convert_eagle3(model, ...)` applies `modelopt.torch.speculative.convert` with EAGLE3_DEFAULT_CFG's
architecture resized to the target (heads, KV heads, head_dim, MLP width, rope theta, norm eps):
the stock config is shaped for Llama-3-8B and is 7x larger than SmolLM2 needs.

`train_eagle3(...)` trains on precomputed features (ModelOpt's offline mode: the frozen target ran
once, eagle3_features), so each step costs only the head. Every process runs the same loop on its
share of each global batch (eagle3_batches); with several processes the model is wrapped in
torch DDP, which all-reduces the head's gradients. Per step:
  # 1. the step's rows: global batch -> this process's share -> micro-batches
  # 2. lr: warmup then cosine over max(step / max_steps, seconds / budget)
  # 3. forward + backward per micro-batch (ModelOpt's loss, 3 train-time-test steps), gradients
  #    accumulated; DDP all-reduces them on the last micro-batch
  # 4. clip, AdamW
  # 5. one all-reduce of [loss, accuracy..., rank 0's clock]: every process logs the same figures
  #    and takes the same stop decision at the same step
  # 6. rank 0: every `checkpoint_every` steps a resumable state and a weights snapshot
It stops at `max_steps` or its wall-clock share (what eagle3.budget leaves it), whichever comes
first; a killed run (or one given a larger budget, see eagle3.train_state_key) resumes from its
last state when called again,
with any number of processes: nothing in the state depends on the world size.
"""

from __future__ import annotations

import contextlib
import math
import os
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from trtspec.convert.eagle3 import modelopt_compat
from trtspec.convert.eagle3.batches import BatchReader, GlobalMeanLoss, global_batch, loss_counts, micro_batches, share
from trtspec.convert.eagle3.device import Placement
from trtspec.convert.eagle3.distributed import Dist
from trtspec.convert.eagle3.store import FeatureStore
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
    if num_layers < 3:
        raise ModelSourceError(f"the target has {num_layers} layers; EAGLE-3 needs at least 3",
                               fix="use speculative.mode draft-target or ngram for this model")
    ids = modelopt_compat.default_aux_layer_ids(num_layers)
    return ids if len(ids) == 3 else sorted({0, num_layers // 2, num_layers - 1})


def convert_eagle3(model, target_config: dict[str, Any], *, draft_vocab_size: int | None = None,
                   kept_ids=None, d2t=None, architecture: dict[str, Any] | None = None):
    """Convert `model` in place into a ModelOpt EAGLE-3 model; return it.

    The head's final norm and decoder layer start from the target's (`init_from_last_layer`); with
    a reduced vocabulary the head's lm_head starts as the target's lm_head rows of the kept tokens
    and `d2t` is filled, so the head begins where the target's own output layer is. `architecture`
    overrides fields of the sized config (a warm start's head has its own: eagle3.warm_start).
    """
    import modelopt.torch.speculative as mtsp
    import torch

    config = {
        "eagle_architecture_config": {**eagle3_architecture(target_config, draft_vocab_size=draft_vocab_size),
                                      **(architecture or {})},
        # torch.compile costs ~70 s per shape on this CPU and the head is small; eager is faster overall.
        "eagle_use_torch_compile": False,
        # Keep the training rope in the exported config (ModelOpt would inject YaRN x32 otherwise),
        # so every reader applies the rope the head was trained with.
        "eagle_export_rope_scaling": {},
    }
    mtsp.convert(model, [("eagle", modelopt_compat.eagle_config(config, target_config))])
    parts = modelopt_compat.head_parts(model)  # where this ModelOpt keeps each piece (0.37 or 0.47)
    with torch.no_grad():
        parts.head.norm.weight.copy_(parts.target_norm.weight)
        init_from_last_layer(parts, parts.target_layers[-1], target_config["hidden_size"])
        if hasattr(parts.head, "d2t") and d2t is not None:
            parts.head.d2t.copy_(d2t)
        if hasattr(parts.head, "d2t") and kept_ids is not None:
            parts.head_lm_head.weight.copy_(parts.target_lm_head.weight[kept_ids])
    return model


def init_from_last_layer(parts, last_layer, hidden_size: int) -> None:
    """Start the head's decoder layer as a copy of the target's last layer (a prior, not a fit).

    The first layer's q/k/v read cat(embeddings, hidden): the hidden half gets the target's
    weights and the embedding half starts at zero; `fc` starts by passing the deepest auxiliary
    layer through. Measured on SmolLM2 (same data and step count): held-out mean acceptance
    length 1.35 against 1.30 from ModelOpt's random initialisation (docs/CONVERT.md).
    """
    import torch

    layer = parts.layer
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
    parts.embeds_norm.weight.copy_(last_layer.input_layernorm.weight)
    layer.post_attention_layernorm.weight.copy_(last_layer.post_attention_layernorm.weight)
    parts.head.fc.weight.zero_()
    parts.head.fc.weight[:, -hidden_size:] = torch.eye(hidden_size)  # fc input: the aux layers, deepest last




@dataclass
class TrainSettings:
    max_steps: int
    max_seconds: float
    learning_rate: float
    batch_size: int          # rows per optimizer step over all processes (the global batch)
    checkpoint_every: int
    seed: int
    micro_batch_size: int | None = None  # rows per forward in one process; None: its whole share
    warmup_fraction: float = 0.05
    final_lr_fraction: float = 0.1


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


def lr_at(progress: float, settings: TrainSettings) -> float:
    """Linear warmup, then cosine decay to final_lr_fraction of the peak; progress in [0, 1]."""
    peak = settings.learning_rate
    if progress < settings.warmup_fraction:
        return peak * max(progress / settings.warmup_fraction, 0.02)
    span = (progress - settings.warmup_fraction) / max(1e-9, 1 - settings.warmup_fraction)
    floor = settings.final_lr_fraction
    return peak * (floor + (1 - floor) * 0.5 * (1 + math.cos(math.pi * min(1.0, span))))


def trainable_state(model) -> dict[str, Any]:
    """The head's weights and buffers (d2t), detached copies on the head's device."""
    return {name: tensor.detach().clone() for name, tensor in model.eagle_module.state_dict().items()
            if not name.startswith("rotary_emb")}


def _save_atomic(obj: Any, path: Path) -> None:
    import torch

    partial = path.with_name(path.name + ".partial")
    torch.save(obj, partial)
    os.replace(partial, path)


def _already_mapped(logits):
    return logits


def _data_parallel(model, dist: Dist, placement: Placement):
    """DDP over the head only: the frozen target is identical on every rank and never synced."""
    if not dist.distributed:
        return model
    from torch.nn.parallel import DistributedDataParallel

    frozen = [name for name, _ in (*model.named_parameters(), *model.named_buffers())
              if not name.startswith("eagle_module.")]
    DistributedDataParallel._set_params_and_buffers_to_ignore_for_model(model, frozen)
    device_ids = [placement.device.index] if placement.kind == "cuda" else None
    # the head's buffers (d2t, rotary) are identical on every rank: no per-forward sync
    return DistributedDataParallel(model, device_ids=device_ids, forward_sync_buffers=False)


def train_eagle3(model, features: Callable[[], FeatureStore], settings: TrainSettings, placement: Placement,
                 work_dir: Path, *, dist: Dist | None = None,
                 on_step: Callable[[int, dict[str, Any]], None] | None = None) -> TrainResult:
    """Train `model.eagle_module` on the feature store; resumable from `work_dir/state.pt`.

    `features` is called only when there is training left to do, so re-exporting a finished run
    does not re-run the target over the data. Rank 0 writes the state and snapshots.
    """
    import torch

    dist = dist or Dist()
    state_path, snapshots = work_dir / "state.pt", work_dir / "snapshots"
    if dist.is_main:
        snapshots.mkdir(parents=True, exist_ok=True)
    params = [p for p in model.eagle_module.parameters() if p.requires_grad]
    optimizer = torch.optim.AdamW(params, lr=settings.learning_rate, weight_decay=0.0, betas=(0.9, 0.95))
    step, elapsed, history = 0, 0.0, []
    if state_path.exists():
        state = torch.load(state_path, map_location=placement.device, weights_only=False)
        model.eagle_module.load_state_dict(state["head"], strict=False)
        optimizer.load_state_dict(state["optimizer"])
        step, elapsed, history = state["step"], state["elapsed"], state["history"]
    resumed_from = step
    if step >= settings.max_steps or elapsed >= settings.max_seconds:
        return _result(step, elapsed, settings, resumed_from, history)
    store = features()
    lengths = store.read_all("lengths").long()
    length, ttt = store.arrays["input_ids"].shape[0], modelopt_compat.ttt_steps(model)
    micro = settings.micro_batch_size or -(-settings.batch_size // dist.world_size)
    reader = BatchReader(store, placement.device)

    def plan(at: int) -> tuple[list[int], list[list[int]]]:
        rows = global_batch(at, num_rows=store.rows, batch_size=settings.batch_size, seed=settings.seed)
        return rows, micro_batches(share(rows, dist.rank, dist.world_size), micro)

    model.train()
    model.eagle_offline = True  # train on the features; the frozen target is not re-run per step
    if "logits" in store.arrays:
        # the teacher logits were restricted to the draft vocabulary once, in eagle3_features
        model._map_logits_to_draft_vocab = _already_mapped
    trainer = _data_parallel(model, dist, placement)
    started = time.monotonic() - elapsed
    rows, micros = plan(step)
    pending = reader.submit(micros[0])
    try:
        while step < settings.max_steps and elapsed < settings.max_seconds:
            # 1. this step's rows (planned one step ahead so the reader prefetches)
            step_rows = rows
            counts = loss_counts(lengths[step_rows], ttt)
            # 2. learning rate from whichever budget is further along (the same on every rank)
            for group in optimizer.param_groups:
                group["lr"] = lr_at(max(step / settings.max_steps, elapsed / settings.max_seconds), settings)
            # 3. forward + backward per micro-batch; DDP all-reduces the gradients on the last one
            loss_sum = torch.zeros((), device=placement.device)
            with GlobalMeanLoss(model, counts, length) as shares:
                for number, rows_now in enumerate(micros):
                    host = pending.result()
                    last = number == len(micros) - 1
                    if not last:
                        pending = reader.submit(micros[number + 1])
                    elif step + 1 < settings.max_steps:
                        rows, micros = plan(step + 1)
                        pending = reader.submit(micros[0])
                    shares.local = loss_counts(lengths[rows_now], ttt)
                    input_ids, attention, base_outputs = reader.to_inputs(host)
                    sync = contextlib.nullcontext() if last or not dist.distributed else trainer.no_sync()
                    with sync:
                        with placement.autocast():
                            output = trainer(input_ids=input_ids, attention_mask=attention,
                                             base_model_outputs=base_outputs)
                        # DDP averages gradients over processes; the loss is already each one's share
                        (output.loss * dist.world_size).backward()
                    loss_sum += output.loss.detach()
            # 4. clip and update
            torch.nn.utils.clip_grad_norm_(params, 1.0)
            optimizer.step()
            optimizer.zero_grad(set_to_none=True)
            # 5. one all-reduce: global loss and accuracy, and rank 0's clock for every rank
            clock = time.monotonic() - started if dist.is_main else 0.0
            figures = torch.stack([loss_sum.float(), *[torch.as_tensor(a, device=placement.device).float()
                                                       for a in shares.accuracy],
                                   torch.tensor(clock, device=placement.device)])
            figures = dist.all_reduce_sum(figures).tolist()
            step, elapsed = step + 1, figures[-1]
            # milliseconds: a tiny 3-step run can take under 0.05 s, and tenths made its throughput unknown
            record = {"step": step, "seconds": round(elapsed, 3), "loss": round(figures[0], 4),
                      "lr": optimizer.param_groups[0]["lr"], "train_acc": [round(a, 3) for a in figures[1:-1]],
                      "tokens": int(lengths[step_rows].sum())}
            history.append(record)
            if on_step:
                on_step(step, record)
            # 6. rank 0: periodic resumable state + a weights snapshot (acceptance-vs-time curves)
            finished = step >= settings.max_steps or elapsed >= settings.max_seconds
            if dist.is_main and (step % settings.checkpoint_every == 0 or finished):
                _save_atomic({"head": trainable_state(model), "optimizer": optimizer.state_dict(), "step": step,
                              "elapsed": elapsed, "history": history}, state_path)
                _save_atomic({"head": trainable_state(model), "step": step, "seconds": elapsed},
                             snapshots / f"step-{step:06d}.pt")
    finally:
        reader.close()
        store.close()
        model.__dict__.pop("_map_logits_to_draft_vocab", None)
        model.eagle_offline = False
        model.eval()
    return _result(step, elapsed, settings, resumed_from, history)


def _result(step: int, elapsed: float, settings: TrainSettings, resumed_from: int, history) -> TrainResult:
    stopped_by = "max_steps" if step >= settings.max_steps else "time_budget"
    return TrainResult(steps=step, seconds=elapsed, stopped_by=stopped_by, resumed_from=resumed_from,
                       history=history)
