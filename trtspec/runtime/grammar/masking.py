"""Allowed-token bitmasks applied to logits and probabilities (pure tensor functions).

A bitmask is xgrammar's packed form: int32 [rows, ceil(vocab / 32)], bit j of word i set where
token 32 i + j is allowed. Logits outside it become -inf (xgrammar's CPU kernel, on a float32
copy) before temperature, top-k and top-p, exactly as the non-speculative path applies them, so
both paths sample from the same distribution; probabilities outside it become 0 and each row is
renormalized. Masks stay packed on the hot path: torch's elementwise ops on bool rows cost 3-45 ms
a step on the loaded 2-core EPYC (2026-12-06), the kernel a fraction of that.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import torch


def unpack_bitmask(bitmask: torch.Tensor, vocab_size: int) -> torch.Tensor:
    """The packed rows as bool rows. # bitmask: [rows, ceil(vocab / 32)] int32 -> [rows, vocab] bool"""
    import numpy as np
    import torch

    bits = np.unpackbits(bitmask.contiguous().numpy().view(np.uint8), bitorder="little")
    return torch.from_numpy(bits.reshape(bitmask.shape[0], -1)[:, :vocab_size].astype(bool))


def mask_logits(logits: torch.Tensor, bitmask: torch.Tensor) -> torch.Tensor:
    """# logits: [rows, vocab]; bitmask: [rows, words] int32 -> [rows, vocab] float32, -inf where not allowed"""
    import torch
    import xgrammar

    source = logits.detach()
    # the copy through numpy: one memcpy, where torch's copy (split over threads) took 17 ms for
    # 5 x 49,152 floats on the loaded 2-core EPYC (2026-12-06)
    masked = torch.from_numpy(source.numpy().copy()) if source.dtype == torch.float32 else source.float().contiguous()
    width = bitmask.shape[-1] * 32
    if masked.shape[-1] > width:  # logits wider than the grammar's vocabulary: the extra ids are never allowed
        masked[:, width:] = float("-inf")
    xgrammar.apply_token_bitmask_inplace(masked, bitmask.contiguous(), vocab_size=min(masked.shape[-1], width))
    return masked


def mask_probs(probs: torch.Tensor, bitmask: torch.Tensor) -> torch.Tensor:
    """A draft's distributions restricted to the allowed tokens and renormalized (a row with no
    allowed mass stays zero). # probs: [rows, vocab]; bitmask: [rows, words] int32 -> [rows, vocab]"""
    import torch

    keep = mask_logits(torch.zeros_like(probs, dtype=torch.float32), bitmask) == 0.0
    masked = probs * keep.to(probs.dtype)
    return masked / masked.sum(dim=-1, keepdim=True).clamp_min(1e-30)
