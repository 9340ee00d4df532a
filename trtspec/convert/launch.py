"""How `trtspec convert` runs as processes: relaunched under torchrun, or as one of its workers.

`torchrun_plan` checks that the spec trains an EAGLE-3 head and returns the torchrun command line
(trtspec.convert.eagle3.torchrun builds it) that starts the same convert as N data-parallel
processes; `run` executes it attached to this terminal through trtspec.subproc. `processes` is
the other side: inside a convert (a worker or a single process), where the EAGLE-3 stage runs and
which process group it joins. The CLI decides which options to forward; nothing here prints.
"""

from __future__ import annotations

from typing import Any

from trtspec.errors import SubprocessError, TrtSpecError


def torchrun_plan(spec: Any, forwarded: list[str], *, nproc_per_node: int, nnodes: int,
                  rdzv_endpoint: str | None) -> list[str]:
    """The torchrun command that runs `trtspec convert <forwarded>` as nproc_per_node x nnodes processes."""
    from trtspec.convert.eagle3.torchrun import torchrun_command

    if spec.speculative.mode != "eagle3":
        raise TrtSpecError(f"--nproc-per-node trains EAGLE-3 heads; the spec's mode is {spec.speculative.mode}",
                           fix="add --mode eagle3 (or drop --nproc-per-node)")
    return torchrun_command(forwarded, nproc_per_node=nproc_per_node, nnodes=nnodes, rdzv_endpoint=rdzv_endpoint)


def run(command: list[str]) -> None:
    """Run the torchrun command with this terminal (the workers draw their own progress)."""
    from trtspec import subproc

    returncode = subproc.run_attached(command)
    if returncode != 0:
        raise SubprocessError(f"torchrun: the data-parallel convert failed (exit code {returncode}); "
                              "the failing process's error is printed above")


def processes(spec: Any) -> tuple[Any, Any]:
    """(placement, Dist) for an EAGLE-3 run (joining torchrun's process group when launched by it);
    (None, a single-process Dist) for every other mode, which refuses to run data-parallel."""
    import os

    from trtspec.convert.eagle3.distributed import Dist, launched_by_torchrun

    if spec.speculative.mode != "eagle3":
        if launched_by_torchrun() and int(os.environ.get("WORLD_SIZE", "1")) > 1:
            raise TrtSpecError("only EAGLE-3 training runs data-parallel", fix="use --nproc-per-node with --mode eagle3")
        return None, Dist()
    from trtspec.convert.eagle3.device import placement as resolve_placement

    settings = spec.speculative.eagle3
    placement = resolve_placement(settings.device, settings.train_dtype)
    return placement, Dist.from_env(placement.device)
