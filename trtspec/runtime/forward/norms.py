"""RMSNorm as the torch loop computes it: LlamaRMSNorm.forward for float32 input. The compiled
decoder layers (native_layers.py) check their norm against this one, so both import it from here."""

from __future__ import annotations

from typing import Any


def rms_norm(hidden: Any, norm: Any):
    """LlamaRMSNorm.forward for float32 input (its casts to float32 and back are no-ops then)."""
    import torch

    variance = hidden.pow(2).mean(-1, keepdim=True)
    return norm.weight * (hidden * torch.rsqrt(variance + norm.variance_epsilon))
