"""Allowed-token masks applied to logits and probabilities (pure tensor functions).

A mask is bool, True where the grammar allows the token. Logits outside it become -inf before
temperature, top-k and top-p, exactly as the non-speculative path applies them, so both paths
sample from the same distribution; probabilities outside it become 0 and each row is
renormalized.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import torch


def unpack_bitmask(bitmask: torch.Tensor, vocab_size: int) -> torch.Tensor:
    """xgrammar's packed bitmask as bool rows. # bitmask: [rows, ceil(vocab / 32)] int32 -> [rows, vocab] bool"""
    import torch

    bits = torch.arange(32, dtype=torch.int32)
    return ((bitmask.unsqueeze(-1) >> bits) & 1).bool().reshape(bitmask.shape[0], -1)[:, :vocab_size]


def mask_logits(logits: torch.Tensor, allowed: torch.Tensor) -> torch.Tensor:
    """# logits: [rows, vocab]; allowed: [rows, vocab] bool -> [rows, vocab], -inf where not allowed"""
    width = min(logits.shape[-1], allowed.shape[-1])
    masked = logits.clone()
    masked[..., :width] = masked[..., :width].masked_fill(~allowed[..., :width], float("-inf"))
    if logits.shape[-1] > width:  # logits wider than the grammar's vocabulary: the extra ids are never allowed
        masked[..., width:] = float("-inf")
    return masked


def mask_probs(probs: torch.Tensor, allowed: torch.Tensor) -> torch.Tensor:
    """A draft's distributions restricted to the allowed tokens and renormalized (a row with no
    allowed mass stays zero). # probs: [rows, vocab]; allowed: [rows, vocab] bool -> [rows, vocab]"""
    masked = probs * allowed[..., : probs.shape[-1]].to(probs.dtype)
    total = masked.sum(dim=-1, keepdim=True)
    return masked / total.clamp_min(1e-30)
