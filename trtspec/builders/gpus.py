"""GPUs the memory planner knows: total device memory and what the runtime reserves.

Totals are what `nvidia-smi --query-gpu=memory.total` reports (MiB) for the SXM parts: 81559 MiB
(79.6 GiB) for the "80 GB" H100 and 143771 MiB (140.4 GiB) for the "141 GB" H200; names are what
`nvidia-smi --query-gpu=name` prints for them. The reserve covers what exists before
TensorRT-LLM sizes its KV cache: the CUDA context, cuBLAS/NCCL workspaces and CUDA graphs. 2 GiB
is a planning figure, not a measurement; the KV fraction is applied to what is left after it.
"""

from __future__ import annotations

from dataclasses import dataclass

MIB = 1 << 20
GIB = 1 << 30


@dataclass(frozen=True)
class Gpu:
    key: str
    name: str
    total_bytes: int
    reserved_bytes: int = 2 * GIB

    @property
    def usable_bytes(self) -> int:
        return self.total_bytes - self.reserved_bytes


GPUS: dict[str, Gpu] = {
    "h100": Gpu("h100", "NVIDIA H100 80GB HBM3", 81559 * MIB),
    "h200": Gpu("h200", "NVIDIA H200", 143771 * MIB),
}


def get_gpu(key: str) -> Gpu:
    """The Gpu for a spec key (`build.gpu`); the spec validates the key, so KeyError is a bug."""
    return GPUS[key]
