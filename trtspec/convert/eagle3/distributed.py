"""The processes of one data-parallel EAGLE-3 run: who this process is, and what they share.

torchrun starts the processes and sets RANK, WORLD_SIZE, LOCAL_RANK, MASTER_ADDR/PORT;
`Dist.from_env` joins them in a torch.distributed process group (gloo on the CPU, NCCL on GPUs).
Without torchrun (or with one process) `Dist()` is the single process and every collective is the
identity, so one code path serves both.

Contract: rank 0 writes every file that is not a per-rank shard (checkpoints, training state,
reports, the export); the others read what rank 0 wrote after a `barrier`. The work directory must
therefore be one shared filesystem across nodes; `check_shared_dir` refuses a run where it is not.
"""

from __future__ import annotations

import os
import secrets
from dataclasses import dataclass
from datetime import timedelta
from pathlib import Path
from typing import TYPE_CHECKING, Any

from trtspec.errors import TrtSpecError

if TYPE_CHECKING:
    import torch

# Barriers wait for the slowest rank's data generation or feature pass, which can take hours on a
# large data set; the default process-group timeout (10-30 min) would abort a healthy run.
COLLECTIVE_TIMEOUT = timedelta(hours=6)


def launched_by_torchrun() -> bool:
    """True inside a process that torchrun (torch.distributed.run) started."""
    return "LOCAL_RANK" in os.environ and "WORLD_SIZE" in os.environ


@dataclass
class Dist:
    rank: int = 0
    world_size: int = 1
    local_rank: int = 0
    backend: str | None = None  # "gloo" | "nccl"; None: one process, no process group

    @property
    def is_main(self) -> bool:
        return self.rank == 0

    @property
    def distributed(self) -> bool:
        return self.backend is not None

    def describe(self) -> str:
        return f"{self.world_size} processes ({self.backend})" if self.distributed else "1 process"

    @classmethod
    def from_env(cls, device: torch.device) -> Dist:
        """Join torchrun's process group when this process is one of several; else one process."""
        world_size = int(os.environ.get("WORLD_SIZE", "1"))
        if world_size <= 1:
            return cls()
        import torch
        import torch.distributed as dist

        backend = "nccl" if device.type == "cuda" else "gloo"
        if device.type == "cuda":
            torch.cuda.set_device(device)
        dist.init_process_group(backend, timeout=COLLECTIVE_TIMEOUT,
                                device_id=device if device.type == "cuda" else None)
        return cls(rank=dist.get_rank(), world_size=dist.get_world_size(),
                   local_rank=int(os.environ.get("LOCAL_RANK", "0")), backend=backend)

    def barrier(self) -> None:
        if self.distributed:
            import torch.distributed as dist

            dist.barrier()

    def broadcast(self, value: Any) -> Any:
        """Rank 0's `value` on every rank (any picklable object)."""
        if not self.distributed:
            return value
        import torch.distributed as dist

        box = [value if self.is_main else None]
        dist.broadcast_object_list(box, src=0)
        return box[0]

    def all_reduce_sum(self, tensor: torch.Tensor) -> torch.Tensor:
        """Sum `tensor` over the ranks in place (NCCL needs it on this rank's GPU)."""
        if self.distributed:
            import torch.distributed as dist

            dist.all_reduce(tensor, op=dist.ReduceOp.SUM)
        return tensor

    def check_shared_dir(self, directory: Path) -> None:
        """Refuse a run whose ranks do not see one work directory (multi-node without shared storage)."""
        if not self.distributed:
            return
        token = self.broadcast(secrets.token_hex(8) if self.is_main else None)
        probe = directory / ".shared-check"
        if self.is_main:
            directory.mkdir(parents=True, exist_ok=True)
            probe.write_text(token)
        self.barrier()
        seen = probe.read_text() if probe.exists() else None
        ok = int(seen == token)
        import torch

        flags = torch.tensor([ok], dtype=torch.int64)
        if self.backend == "nccl":
            flags = flags.cuda()
        if int(self.all_reduce_sum(flags).item()) != self.world_size:
            raise TrtSpecError(f"{directory}: not every process sees the same work directory "
                               f"({int(flags.item())} of {self.world_size} do)",
                               fix="put workdir on a filesystem shared by every node (NFS, Lustre, ...)")

    def close(self) -> None:
        if self.distributed:
            import torch.distributed as dist

            if dist.is_initialized():
                dist.destroy_process_group()
