"""Where EAGLE-3 training runs: the device, the autocast dtype, and host<->device transfers.

`speculative.eagle3.device` is auto | cpu | cuda; auto picks CUDA when torch sees a GPU. Under
torchrun each process takes `cuda:<LOCAL_RANK>`. The frozen target (generation, features) and the
head (training) live on that device; features are stored on disk and come back per batch through
pinned host memory with non-blocking copies, so the copy of the next batch overlaps the step.

The autocast dtype (`train_dtype`, auto): bfloat16 on a GPU that supports it (Ampere and later),
bfloat16 on a CPU with native bfloat16 units (AVX512-BF16 or AMX: a SmolLM2 step 1.58x faster at
the same held-out acceptance, docs/CONVERT.md session 4), float32 elsewhere. Weights and the
optimizer stay float32 in every case.

Nothing else in convert names a device: code takes `placement.device` and calls `to_device`.
"""

from __future__ import annotations

import os
from contextlib import AbstractContextManager
from dataclasses import dataclass
from typing import TYPE_CHECKING

from trtspec.errors import TrtSpecError

if TYPE_CHECKING:
    import torch


@dataclass(frozen=True)
class Placement:
    device: torch.device
    dtype: str  # autocast dtype of a training step: "bfloat16" | "float32"

    @property
    def kind(self) -> str:
        return self.device.type

    @property
    def bf16(self) -> bool:
        return self.dtype == "bfloat16"

    def describe(self) -> str:
        """E.g. "cuda:3 bfloat16" or "cpu float32", for reports and the CLI line."""
        return f"{self.device} {self.dtype}"

    def autocast(self) -> AbstractContextManager:
        import torch

        return torch.autocast(self.device.type, dtype=torch.bfloat16, enabled=self.bf16)


def resolve_device(choice: str, *, local_rank: int | None = None) -> torch.device:
    """torch.device for `speculative.eagle3.device` (auto | cpu | cuda) in this process."""
    import torch

    if choice == "auto":
        choice = "cuda" if torch.cuda.is_available() else "cpu"
    if choice == "cpu":
        return torch.device("cpu")
    if not torch.cuda.is_available():
        raise TrtSpecError("speculative.eagle3.device is cuda but torch sees no CUDA device "
                           f"(torch {torch.__version__}, CUDA build: {torch.version.cuda or 'no'})",
                           fix="set speculative.eagle3.device: auto or cpu, or install a CUDA build of torch")
    if local_rank is None:
        local_rank = int(os.environ.get("LOCAL_RANK", "0"))
    if local_rank >= torch.cuda.device_count():
        raise TrtSpecError(f"process {local_rank} of this node has no GPU ({torch.cuda.device_count()} visible)",
                           fix="use --nproc-per-node at most the number of GPUs, or check CUDA_VISIBLE_DEVICES")
    return torch.device("cuda", local_rank)


def resolve_train_dtype(choice: str, device: torch.device | None = None) -> str:
    """"bfloat16" or "float32" for `speculative.eagle3.train_dtype` on `device` (default: the CPU)."""
    if choice != "auto":
        return choice
    import torch

    if device is not None and device.type == "cuda":
        return "bfloat16" if torch.cuda.is_bf16_supported() else "float32"
    native = any(getattr(torch.cpu, probe, lambda: False)()
                 for probe in ("_is_avx512_bf16_supported", "_is_amx_tile_supported"))
    return "bfloat16" if native else "float32"


def placement(device_choice: str, dtype_choice: str, *, local_rank: int | None = None) -> Placement:
    device = resolve_device(device_choice, local_rank=local_rank)
    return Placement(device, resolve_train_dtype(dtype_choice, device))


def to_device(tensor: torch.Tensor, device: torch.device) -> torch.Tensor:
    """Move a host tensor to `device`; to a GPU through pinned memory without blocking the host."""
    if device.type != "cuda":
        return tensor.to(device)
    if not tensor.is_pinned():
        tensor = tensor.pin_memory()
    return tensor.to(device, non_blocking=True)


def host_buffer(shape: tuple[int, ...], dtype: torch.dtype, device: torch.device) -> torch.Tensor:
    """An empty host tensor to read into; pinned when it is bound for a GPU (fast async copies)."""
    import torch

    return torch.empty(shape, dtype=dtype, pin_memory=device.type == "cuda")
