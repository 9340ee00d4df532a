"""trtspec's own Medusa-1 trainer: heads on the target's last hidden states, the target's own
greedy answers as data, the target frozen.

Why not ModelOpt's: its medusa mode (modelopt/torch/speculative/plugins/hf_medusa.py, 0.47) trains
through HFMedusaModel.forward, a full target forward per batch under the HF Trainer, and exports
only through the legacy TensorRT-LLM-checkpoint path. Here the target runs once per answer: its
last hidden states (after the final norm, what Medusa's heads read) are computed once and the
heads train on them alone, which is what makes minutes on a CPU enough to measure.

Vocabulary: h_t is the target's last hidden state at position t (its lm_head gives token t+1);
head k (0-based) reads h_t and is trained by cross-entropy on token t+k+2 (FasterDecoding's
medusa_labels = labels[..., 2 + k:]), weighted 0.8^k (Medusa's medusa_decay_coefficient). Only
positions whose targets lie in the answer count. A head is ResBlock x L then the vocabulary
projection; the ResBlocks start at zero (Medusa's init: the head starts as the target's lm_head)
and train; the projection is the target's lm_head, frozen and written into every head. With all
heads sharing it, the cpu drafter runs one lm_head product for every head and sequence at once
(runtime.drafters.medusa), and the heads cost a ResBlock each beyond it.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any

DECAY = 0.8         # Medusa's medusa_decay_coefficient
LEARNING_RATE = 1e-3
BATCH_ROWS = 256
HELD_OUT = 0.1      # the last tenth of the rows: per-head top-1 accuracy in the report


@dataclass
class Features:
    """Every answer position's last hidden state, and the tokens each head should predict there."""

    # [rows, hidden_size] float32
    hidden: Any
    # [rows, num_heads] long: token t+k+2 for head k, -100 where it lies past the answer
    labels: Any


def target_answers(model, tokenizer, prompts: list[str], *, answer_tokens: int, in_flight: int = 16) -> list[tuple[list[int], int]]:
    """(context + greedy answer ids, where the answer starts) per prompt, by the cpu engine in flight."""
    from trtspec.chat import conversation_ids
    from trtspec.convert.eagle3.engine_answers import borrowed_engine

    contexts = [conversation_ids(tokenizer, [{"role": "user", "content": text}], add_generation_prompt=True)
                for text in prompts]
    longest = max(len(c) for c in contexts)
    with borrowed_engine(model, tokenizer, in_flight=in_flight, row_tokens=longest + answer_tokens,
                         answer_tokens=answer_tokens) as engine, ThreadPoolExecutor(in_flight) as pool:
        results = list(pool.map(lambda ids: engine.generate(ids, max_new_tokens=answer_tokens, temperature=0.0),
                                contexts))
    return [(context + list(result.token_ids), len(context)) for context, result in zip(contexts, results, strict=True)]


def features(model, rows: list[tuple[list[int], int]], num_heads: int) -> Features:
    """The target's last hidden states (final norm applied) over each row, and the heads' labels."""
    import torch

    hidden, labels = [], []
    with torch.no_grad():
        for ids, start in rows:
            states = model.model(input_ids=torch.tensor([ids])).last_hidden_state[0].float()  # [T, hidden]
            # position t predicts token t+1 through lm_head; answer tokens start at `start`
            positions = range(max(0, start - 1), len(ids) - 2)
            hidden.append(states[list(positions)])
            labels.append(torch.tensor([[ids[t + k + 2] if t + k + 2 < len(ids) else -100 for k in range(num_heads)]
                                        for t in positions], dtype=torch.long))
    return Features(torch.cat(hidden), torch.cat(labels))


def init_heads(lm_head_weight, num_heads: int, num_layers: int) -> dict[str, Any]:
    """Canonical tensors of fresh heads: zero ResBlocks (each head starts as the target's lm_head)."""
    import torch

    vocab, hidden = lm_head_weight.shape
    tensors = {}
    for h in range(num_heads):
        for layer in range(num_layers):
            tensors[f"{h}.{layer}.linear.weight"] = torch.zeros(hidden, hidden)
            tensors[f"{h}.{layer}.linear.bias"] = torch.zeros(hidden)
        tensors[f"{h}.{num_layers}.weight"] = lm_head_weight.detach().float().clone()
    return tensors


def resblocks(x, weights: list[tuple[Any, Any]]):
    """x + SiLU(W x + b), once per ResBlock. # x: [rows, hidden_size]"""
    import torch.nn.functional as F

    for weight, bias in weights:
        x = x + F.silu(F.linear(x, weight, bias))
    return x


def train_heads(data: Features, lm_head_weight, *, num_heads: int, num_layers: int, seconds: float, seed: int = 0,
                steps: int | None = None,
                on_step: Callable[[int, float], Any] | None = None) -> tuple[dict[str, Any], dict[str, Any]]:
    """(canonical tensors, report) after training the ResBlocks for about `seconds` (or exactly
    `steps` steps: the same heads on every run, as tests need)."""
    import torch
    import torch.nn.functional as F

    generator = torch.Generator().manual_seed(seed)
    rows = data.hidden.shape[0]
    split = max(1, int(rows * (1 - HELD_OUT)))
    train_rows = torch.arange(split)
    projection = lm_head_weight.detach().float()
    params = [[(torch.zeros(projection.shape[1], projection.shape[1], requires_grad=True),
                torch.zeros(projection.shape[1], requires_grad=True)) for _ in range(num_layers)]
              for _ in range(num_heads)]
    optimizer = torch.optim.AdamW([t for head in params for pair in head for t in pair], lr=LEARNING_RATE,
                                  weight_decay=0.0)
    started, done, loss_value = time.monotonic(), 0, float("nan")
    while done == 0 or (done < steps if steps is not None else time.monotonic() - started < seconds):
        batch = train_rows[torch.randint(split, (min(BATCH_ROWS, split),), generator=generator)]
        x, labels = data.hidden[batch], data.labels[batch]
        loss = sum((DECAY ** k) * F.cross_entropy(F.linear(resblocks(x, params[k]), projection), labels[:, k],
                                                  ignore_index=-100)
                   for k in range(num_heads) if bool((labels[:, k] >= 0).any()))
        optimizer.zero_grad()
        loss.backward()  # type: ignore[union-attr]
        optimizer.step()
        done, loss_value = done + 1, float(loss.detach())  # type: ignore[union-attr]
        if on_step:
            on_step(done, loss_value)
    tensors = init_heads(projection, num_heads, num_layers)
    for h, head in enumerate(params):
        for layer, (weight, bias) in enumerate(head):
            tensors[f"{h}.{layer}.linear.weight"] = weight.detach().clone()
            tensors[f"{h}.{layer}.linear.bias"] = bias.detach().clone()
    report = {"steps": done, "seconds": round(time.monotonic() - started, 1), "final_loss": round(loss_value, 4),
              "train_rows": split, "held_out_rows": rows - split,
              "held_out_top1": held_out_top1(data, split, params, projection)}
    return tensors, report


def held_out_top1(data: Features, split: int, params, projection) -> list[float | None]:
    """Per head, how often its top token is the label on the held-out rows."""
    import torch

    accuracies: list[float | None] = []
    with torch.no_grad():
        x, labels = data.hidden[split:], data.labels[split:]
        for k, head in enumerate(params):
            valid = labels[:, k] >= 0
            if x.shape[0] == 0 or not bool(valid.any()):
                accuracies.append(None)
                continue
            top = torch.nn.functional.linear(resblocks(x[valid], head), projection).argmax(-1)
            accuracies.append(round(float((top == labels[valid, k]).float().mean()), 4))
    return accuracies
