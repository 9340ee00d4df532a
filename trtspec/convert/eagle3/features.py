"""Target features for offline EAGLE-3 training: one frozen-target pass per row, streamed to disk.

ModelOpt's offline mode trains the head from what the target computes once: the auxiliary
layers' hidden states, the last hidden state, the input embeddings and (with a reduced draft
vocabulary) the teacher logits already restricted to the draft vocabulary. Recomputing those
logits through the full lm_head at every step was a third of a SmolLM2 step ([1480, 576] x
[576, 49152]) for numbers that never change between epochs.

Each rank runs the target on its own contiguous block of rows, on its device, and writes them to
the shared FeatureStore; training reads batches back (eagle3_store). Rows are right-padded to one
length L = min(seq_len, longest row): ModelOpt caches its train-time-test attention masks per
step, not per length, so L must not change between steps.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import TYPE_CHECKING, Any

from trtspec.convert.eagle3 import modelopt_compat
from trtspec.convert.eagle3.store import ArraySpec, FeatureStore
from trtspec.convert.progress import Phase

if TYPE_CHECKING:
    import torch


def teacher_vocab_reduced(eagle_model) -> bool:
    """Whether the head predicts over a reduced draft vocabulary (ModelOpt's own test)."""
    config = eagle_model.eagle_config
    return config.draft_vocab_size != config.vocab_size


def feature_arrays(eagle_model, length: int) -> dict[str, ArraySpec]:
    """The per-row arrays this model's offline training reads, for rows of `length` tokens."""
    config = eagle_model.eagle_config
    hidden = eagle_model.config.hidden_size
    aux = len(config.eagle_aux_hidden_state_layer_ids) * hidden
    arrays = {"lengths": ArraySpec("int32", ()), "input_ids": ArraySpec("int32", (length,)),
              "aux": ArraySpec("bfloat16", (length, aux)), "hidden": ArraySpec("float32", (length, hidden)),
              "embeds": ArraySpec("bfloat16", (length, hidden))}
    if teacher_vocab_reduced(eagle_model):
        arrays["logits"] = ArraySpec("float16", (length, config.draft_vocab_size))
    return arrays


def pack(rows: list[list[int]], length: int, pad_id: int, device: torch.device):
    """(input_ids, attention_mask) [len(rows), length], right-padded and truncated, on `device`."""
    import torch

    cut = [row[:length] for row in rows]
    input_ids = torch.tensor([row + [pad_id] * (length - len(row)) for row in cut], dtype=torch.long)
    attention = torch.tensor([[1] * len(row) + [0] * (length - len(row)) for row in cut], dtype=torch.long)
    return input_ids.to(device), attention.to(device)


def forward_features(eagle_model, input_ids, attention_mask) -> dict[str, Any]:
    """One batch through the frozen target (ModelOpt's base-model forward and its aux-layer hooks)."""
    import torch

    with torch.no_grad():
        outputs = modelopt_compat.base_model_forward(eagle_model, input_ids, attention_mask)
        features = {"aux": outputs.aux_hiddens, "hidden": outputs.out_hiddens, "embeds": outputs.input_embeds}
        if teacher_vocab_reduced(eagle_model):
            features["logits"] = eagle_model._map_logits_to_draft_vocab(outputs.logits)
    return features


def rank_block(rows: int, rank: int, world_size: int) -> tuple[int, int]:
    """[start, stop) of the contiguous rows rank `rank` computes."""
    per = -(-rows // world_size)
    return min(rows, rank * per), min(rows, (rank + 1) * per)


def fill_store(eagle_model, store: FeatureStore, rows: Iterator[tuple[int, list[int]]], *, start: int, stop: int,
               length: int, pad_id: int, batch_size: int = 8, phase: Phase | None = None) -> None:
    """Compute and write features for rows [start, stop) of the rows stream (sample order)."""
    device = eagle_model.device
    batch: list[list[int]] = []
    first = start

    def flush() -> None:
        nonlocal first
        input_ids, attention = pack(batch, length, pad_id, device)
        features = forward_features(eagle_model, input_ids, attention)
        store.write("lengths", first, attention.sum(dim=1))
        store.write("input_ids", first, input_ids)
        for name, values in features.items():
            if name in store.arrays:  # a store made without teacher logits recomputes them per step
                store.write(name, first, values)
        if phase:
            phase.advance(len(batch), tokens=int(attention.sum()))
        first += len(batch)
        batch.clear()

    for position, (_, ids) in enumerate(rows):
        if position >= stop:
            break
        if position < start:
            continue
        batch.append(ids)
        if len(batch) == batch_size:
            flush()
    if batch:
        flush()


def time_forwards(model, rows: list[list[int]], *, seq_len: int, pad_id: int) -> tuple[float, float]:
    """(seconds per row of a feature pass over `rows`, seconds of a one-row 16-token forward): the
    target's costs, timed on this machine for the time budget (eagle3.budget)."""
    import time

    import torch

    length = min(seq_len, max(len(row) for row in rows))
    input_ids, attention = pack(rows, length, pad_id, model.device)
    with torch.no_grad():
        clock = time.perf_counter()
        model(input_ids=input_ids, attention_mask=attention)
        per_row = (time.perf_counter() - clock) / len(rows)
    return per_row, time_one_row(model, input_ids[:1, :16])


def time_one_row(model, input_ids) -> float:
    """Seconds of a one-row forward of `input_ids` ([1, tokens] long), the fastest of two."""
    import time

    import torch

    steps = []
    with torch.no_grad():
        for _ in range(2):
            clock = time.perf_counter()
            model(input_ids=input_ids)
            steps.append(time.perf_counter() - clock)
    return min(steps)
