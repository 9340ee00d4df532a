"""The product buffers of one attention group: queries, scores, weights and outputs, sized once
per batch shape, and views of their real (unpadded) rows. Shared by the grouped (attention.py)
and the evenly spaced (attention_strided.py) layouts, which import it from here so neither
imports the other back."""

from __future__ import annotations

from typing import Any


def allocate_products(group: Any, lead: tuple[int, int], width: int, head_dim: int, dtype: Any) -> None:
    """A group's product buffers, [*lead, width, ...] (queries zeroed: padding rows stay zero), and
    views of their real rows, [*lead, query heads per key head, rows, ...]; `group` has its
    `group` (query heads per key head), `rows` and `keys` set."""
    import torch

    group.queries = torch.zeros(*lead, width, head_dim, dtype=dtype)
    group.scores = torch.empty(*lead, width, group.keys, dtype=dtype)
    group.weights = torch.empty_like(group.scores)
    group.outputs = torch.empty(*lead, width, head_dim, dtype=dtype)
    real, shape = group.group * group.rows, (*lead, group.group, group.rows)
    group.real_queries = group.queries[:, :, :real].view(*shape, head_dim)
    group.real_scores = group.scores[:, :, :real].view(*shape, group.keys)
    group.real_outputs = group.outputs[:, :, :real].view(*shape, head_dim)
