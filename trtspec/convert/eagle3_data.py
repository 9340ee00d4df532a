"""Self-distilled EAGLE-3 training data: the target answers prompts in its own chat template.

`generate_sequences` returns token-id lists (chat-templated prompt + the target's greedy answer):
what the head must learn to predict is exactly what the target says. Generation is batched with
left padding (the cheap part on a CPU); the padding is stripped again so training rows are
right-padded and positions start at 0, as at inference.

`build_draft_vocab` makes the reduced draft vocabulary: the most frequent target token ids in the
data, sorted by id, and `d2t` with target_id = draft_id + d2t[draft_id] (the ModelOpt / EAGLE-3
convention that TensorRT-LLM and vLLM read).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable

from trtspec.chat import prompt_ids


def generate_sequences(model, tokenizer, prompts: list[str], *, num_samples: int, answer_tokens: int,
                       batch_size: int = 64, on_batch: Callable[[int], None] | None = None) -> list[list[int]]:
    """`num_samples` sequences: prompt i % len(prompts), answered greedily by `model`.

    When num_samples exceeds the prompt count, repeats are answered by sampling (temperature 0.7,
    seeded) so the data is not the same answer twice.
    """
    import torch

    requests = [(prompts[i % len(prompts)], i >= len(prompts)) for i in range(num_samples)]
    sequences: list[list[int]] = []
    pad = tokenizer.pad_token_id
    generator_seed = 0
    for start in range(0, len(requests), batch_size):
        batch = requests[start:start + batch_size]
        for sample in (False, True):
            group = [prompt_ids(tokenizer, prompt) for prompt, sampled in batch if sampled == sample]
            if not group:
                continue
            width = max(len(ids) for ids in group)
            # Left padding: every row's next token sits at the same column.
            input_ids = torch.tensor([[pad] * (width - len(ids)) + ids for ids in group])
            attention = torch.tensor([[0] * (width - len(ids)) + [1] * len(ids) for ids in group])
            torch.manual_seed(generator_seed)
            generator_seed += 1
            with torch.no_grad():
                out = model.generate(input_ids=input_ids, attention_mask=attention, max_new_tokens=answer_tokens,
                                     do_sample=sample, temperature=0.7 if sample else None, top_p=None, top_k=None,
                                     pad_token_id=pad)
            for ids, row in zip(group, out[:, width:].tolist(), strict=True):
                sequences.append(ids + _strip_after_eos(row, tokenizer.eos_token_id, pad))
        if on_batch:
            on_batch(len(batch))
    return sequences


def _strip_after_eos(row: list[int], eos: int | None, pad: int | None) -> list[int]:
    """Keep the answer up to and including its first end-of-sequence token."""
    if eos is not None and eos in row:
        return row[:row.index(eos) + 1]
    while row and pad is not None and row[-1] == pad and pad != eos:
        row = row[:-1]
    return row


def build_draft_vocab(sequences: list[list[int]], vocab_size: int, draft_vocab_size: int):
    """(target ids kept, d2t) for a reduced draft vocabulary, by token frequency in `sequences`.

    Ties and unseen tokens are broken by the lowest id so the result is deterministic.
    """
    import torch

    counts = Counter(token for seq in sequences for token in seq)
    ranked = sorted(range(vocab_size), key=lambda token: (-counts.get(token, 0), token))
    kept = torch.tensor(sorted(ranked[:draft_vocab_size]), dtype=torch.int64)
    d2t = kept - torch.arange(draft_vocab_size, dtype=torch.int64)
    coverage = sum(counts[t] for t in kept.tolist()) / max(1, sum(counts.values()))
    return kept, d2t, coverage


def pack_rows(sequences: list[list[int]], seq_len: int, pad_id: int):
    """(input_ids, attention_mask) right-padded to one fixed length L = min(seq_len, longest).

    One length for every batch: ModelOpt caches its train-time-test attention masks per step,
    not per length, so the length must not change between steps.
    """
    import torch

    length = min(seq_len, max(len(seq) for seq in sequences))
    rows = [seq[:length] for seq in sequences]
    input_ids = torch.tensor([row + [pad_id] * (length - len(row)) for row in rows], dtype=torch.long)
    attention = torch.tensor([[1] * len(row) + [0] * (length - len(row)) for row in rows], dtype=torch.long)
    return input_ids, attention


def compute_features(eagle_model, input_ids, attention_mask, *, batch_size: int = 8,
                     on_batch: Callable[[int], None] | None = None) -> dict:
    """Run the frozen target once over every row and keep what the EAGLE-3 head trains on.

    Returns {"aux": [N, L, k*H] bfloat16 (the k auxiliary layers' hidden states), "hidden":
    [N, L, H] float32 (final post-norm hidden), "embeds": [N, L, H] bfloat16}. This is ModelOpt's
    offline-training input, computed with ModelOpt's own base-model forward (its hooks pick the
    auxiliary layers), so the head's training inputs are exactly those it sees at inference.

    With a reduced draft vocabulary it also returns "logits": [N, L, draft_vocab] float16, the
    teacher logits already restricted to the draft vocabulary. ModelOpt would otherwise recompute
    them through the full lm_head at every training step: a third of a SmolLM2 step (49152 x 576
    per token), for the same numbers each epoch.
    """
    import torch

    reduced = teacher_vocab_reduced(eagle_model)
    aux, hidden, embeds, logits = [], [], [], []
    for start in range(0, input_ids.shape[0], batch_size):
        ids = input_ids[start:start + batch_size]
        mask = attention_mask[start:start + batch_size]
        with torch.no_grad():
            outputs, _ = eagle_model._eagle_base_model_forward(ids, mask, None, None, True, None)
            if reduced:
                logits.append(eagle_model._map_logits_to_draft_vocab(outputs.logits).to(torch.float16))
        aux.append(outputs.aux_hiddens.to(torch.bfloat16))
        hidden.append(outputs.out_hiddens.float())
        embeds.append(outputs.input_embeds.to(torch.bfloat16))
        if on_batch:
            on_batch(ids.shape[0])
    features = {"aux": torch.cat(aux), "hidden": torch.cat(hidden), "embeds": torch.cat(embeds)}
    if reduced:
        features["logits"] = torch.cat(logits)
    return features


def teacher_vocab_reduced(eagle_model) -> bool:
    """Whether the head predicts over a reduced draft vocabulary (ModelOpt's own test)."""
    config = eagle_model.eagle_config
    return config.draft_vocab_size != config.vocab_size
