"""Command lines that start tritonserver: here (`local_command`) and in a container (`docker_command`).

Pure plans: every function returns data (an argument list or a shell string) and runs nothing;
trtspec.server executes the local one and `trtspec deploy --dry-run` prints them. Multi-GPU
(tp*pp > 1) goes through `mpirun`, as upstream's launch_triton_server.py does.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from trtspec import subproc

CONTAINER_TRITONSERVER = "/opt/tritonserver/bin/tritonserver"
CONTAINER_REPOSITORY = "/models"
CONTAINER_ENGINES = "/engines"
DEFAULT_IMAGE = {"cpu": "trtspec:cpu", "trtllm": "trtspec:gpu", "trtllm-engine": "trtspec:gpu"}
SHM_SIZE = "2g"
# APIs trtspec closes unless serve.open_apis opens them. Triton checks a restricted API's header
# before it reads the request (a nested-JSON body to a closed API gets 403, not a crash), and
# trtspec closes with a header no client can send: HTTP/1.1 parsers strip the whitespace that
# starts a field value (RFC 9112 section 5), so the value " closed" never arrives intact; HTTP/2
# field names are lowercase (RFC 9113 section 8.2.1) and gRPC resets a stream that sends a
# capital, so gRPC's key `triton-grpc-protocol-Trtspec-Closed` never matches. Measured against
# tritonserver 2.51 in tests/deploy/test_reliability_closed.py. A random token would not do:
# tritonserver's command line is readable by every local user.
CLOSABLE_APIS = ("shared-memory", "model-repository", "logging", "trace")
CLOSED_HEADER = "Trtspec-Closed= closed"


def restricted_api_args(serve: Any) -> list[str]:
    """--http-restricted-api / --grpc-restricted-protocol closing what the spec leaves closed."""
    closed = [api for api in CLOSABLE_APIS if api not in serve.open_apis]
    http_closed = closed + ([] if serve.http_inference else ["inference"])
    args = []
    if http_closed:
        args.append(f"--http-restricted-api={','.join(http_closed)}:{CLOSED_HEADER}")
    if closed:
        args.append(f"--grpc-restricted-protocol={','.join(closed)}:{CLOSED_HEADER}")
    return args


def tritonserver_args(serve: Any, repository: str, *, backend_dir: str | None = None,
                      bind_all: bool = False) -> list[str]:
    """tritonserver flags shared by every target (a container binds 0.0.0.0 inside its network)."""
    host = "0.0.0.0" if bind_all else serve.host
    args = [f"--model-repository={repository}", "--model-control-mode=none", "--disable-auto-complete-config",
            f"--http-port={serve.http_port}", f"--grpc-port={serve.grpc_port}",
            f"--metrics-port={serve.metrics_port}", f"--http-address={host}", f"--grpc-address={host}",
            f"--metrics-address={host}", "--allow-metrics=true", "--exit-timeout-secs=10",
            *restricted_api_args(serve)]
    if backend_dir:
        args.append(f"--backend-directory={backend_dir}")
    return args


def local_command(spec: Any, binary: Path, repository: Path, backend_dir: Path | None, *,
                  server_id: str | None = None, shm_prefix: str | None = None) -> list[str]:
    """The command that runs tritonserver here (mpirun for tp*pp > 1, as launch_triton_server.py).

    `server_id` is what the server reports as its name (GET /v2), so a readiness check can tell
    this server from another on the same port; `shm_prefix` names the Python backend's shared
    memory regions (/dev/shm/<prefix>...) so they can be removed after an abnormal exit.
    """
    args = tritonserver_args(spec.serve, str(repository.resolve()),
                             backend_dir=str(backend_dir) if backend_dir else None)
    if server_id:
        args.append(f"--id={server_id}")
    world = spec.build.tp_size * spec.build.pp_size if spec.build.backend != "cpu" else 1
    if world == 1:
        shm = [f"--backend-config=python,shm-region-prefix-name={shm_prefix}_"] if shm_prefix else []
        return [str(binary), *args, *shm]
    command = ["mpirun", "--allow-run-as-root"]
    for rank in range(world):
        rank_args = args + [f"--backend-config=python,shm-region-prefix-name={shm_prefix or 'prefix'}{rank}_"]
        if rank:
            rank_args += ["--model-control-mode=explicit", "--load-model=tensorrt_llm"]
            rank_args = [a for a in rank_args if a != "--model-control-mode=none"]
        command += ["-n", "1", str(binary), *rank_args, ":"]
    return command[:-1]


# cpu image (trtspec + nvidia-pytriton, no /opt/tritonserver): the same backend directory and
# library path the local target prepares, done inside the container with its own Python.
CPU_CONTAINER_PRELUDE = (
    "P=$(python -c 'import os, pytriton; print(os.path.dirname(pytriton.__file__))')/tritonserver && "
    "V=$(python -c 'import sys; print(\"%d.%d\" % sys.version_info[:2])') && "
    "mkdir -p /tmp/trtspec-backends/python && cp $P/backends/python/libtriton_python.so "
    "$P/backends/python/triton_python_backend_utils.py /tmp/trtspec-backends/python/ && "
    "cp $P/python_backend_stubs/$V/triton_python_backend_stub /tmp/trtspec-backends/python/ && "
    "export LD_LIBRARY_PATH=$P/../../nvidia_pytriton.libs && ")
CPU_CONTAINER_SERVER = "$P/bin/tritonserver"


def container_server(serve: Any, backend: str) -> str:
    """The shell command a container (docker or k8s) runs: prelude, then exec tritonserver."""
    if backend == "cpu":
        args = tritonserver_args(serve, CONTAINER_REPOSITORY, backend_dir="/tmp/trtspec-backends", bind_all=True)
        return CPU_CONTAINER_PRELUDE + "exec " + CPU_CONTAINER_SERVER + " " + subproc.format_command(args)
    args = tritonserver_args(serve, CONTAINER_REPOSITORY, bind_all=True)
    return container_prelude(backend) + "exec " + subproc.format_command([CONTAINER_TRITONSERVER, *args])


def container_prelude(backend: str) -> str:
    """Shell run in a GPU container before tritonserver: copy the stock model.py files in."""
    if backend == "trtllm":
        return (f"cp -n /app/all_models/llmapi/tensorrt_llm/1/*.py {CONTAINER_REPOSITORY}/tensorrt_llm/1/ && ")
    if backend == "trtllm-engine":
        return "".join(f"cp -n /app/all_models/inflight_batcher_llm/{m}/1/*.py {CONTAINER_REPOSITORY}/{m}/1/ "
                       f"2>/dev/null; " for m in ("preprocessing", "postprocessing", "tensorrt_llm_bls"))
    return ""


def docker_command(spec: Any, repository: Path, engine_dir: Path, image: str | None = None) -> list[str]:
    """`docker run` for the project's image: GPUs, shm, ports on the spec's host, mounts."""
    serve, backend = spec.serve, spec.build.backend
    image = image or DEFAULT_IMAGE[backend]
    command = ["docker", "run", "--rm", "-d", "--name", f"trtspec-{engine_dir.name}", f"--shm-size={SHM_SIZE}",
               "--ulimit", "memlock=-1", "--ulimit", "stack=67108864"]
    if backend != "cpu":
        command += ["--gpus", "all"]
    for port in (serve.http_port, serve.grpc_port, serve.metrics_port):
        command += ["-p", f"{serve.host}:{port}:{port}"]
    command += ["-v", f"{repository.resolve()}:{CONTAINER_REPOSITORY}",
                "-v", f"{engine_dir.resolve()}:{CONTAINER_ENGINES}/{engine_dir.name}:ro",
                "--entrypoint", "bash", image, "-c"]
    return command + [container_server(serve, backend)]
