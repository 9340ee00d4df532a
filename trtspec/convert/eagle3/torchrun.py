"""The torchrun command line that runs `trtspec convert` as N data-parallel processes per node.

    trtspec convert --mode eagle3 --nproc-per-node 8                      # one node, 8 GPUs
    trtspec convert --mode eagle3 --nproc-per-node 8 --nnodes 2 --rdzv-endpoint head:29400
                                                                          # run the same on both nodes

becomes `python -m torch.distributed.run --nproc-per-node=8 [--standalone | --nnodes=2
--rdzv-backend=c10d --rdzv-endpoint=head:29400] -m trtspec convert <the same options>`: torchrun
(PyTorch's own launcher: rendezvous, worker monitoring, a failed worker stops the group) starts
the processes; each one is an ordinary `trtspec convert` that finds RANK/WORLD_SIZE in its
environment (trtspec.convert.eagle3.distributed). Pure: builds the command; trtspec.convert.launch
runs it through trtspec.subproc.
"""

from __future__ import annotations

import re
import sys

from trtspec.errors import TrtSpecError

_ENDPOINT = re.compile(r"^[A-Za-z0-9_.\-\[\]:]+:\d{1,5}$")


def torchrun_command(convert_args: list[str], *, nproc_per_node: int, nnodes: int = 1,
                     rdzv_endpoint: str | None = None, python: str | None = None) -> list[str]:
    """`python -m torch.distributed.run ... -m trtspec convert <convert_args>`."""
    if nproc_per_node < 1 or nnodes < 1:
        raise TrtSpecError(f"--nproc-per-node {nproc_per_node} --nnodes {nnodes}: both must be at least 1",
                           fix="give the processes per node (GPUs per node) and the node count")
    command = [python or sys.executable, "-m", "torch.distributed.run", f"--nproc-per-node={nproc_per_node}"]
    if nnodes == 1 and rdzv_endpoint is None:
        command.append("--standalone")  # a local rendezvous on a free port
    else:
        if rdzv_endpoint is None:
            raise TrtSpecError(f"--nnodes {nnodes} needs --rdzv-endpoint host:port",
                               fix="name a host every node reaches and a free port, e.g. --rdzv-endpoint node0:29400")
        if not _ENDPOINT.match(rdzv_endpoint):
            raise TrtSpecError(f"--rdzv-endpoint {rdzv_endpoint!r} is not host:port",
                               fix="e.g. --rdzv-endpoint node0:29400")
        command += [f"--nnodes={nnodes}", "--rdzv-backend=c10d", f"--rdzv-endpoint={rdzv_endpoint}"]
    return command + ["-m", "trtspec", "convert", *convert_args]
