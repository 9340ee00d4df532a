"""Command lines that start tritonserver: here (`local_command`) and in a container (`docker_command`).

Pure plans: every function returns data (an argument list or a shell string) and runs nothing;
trtspec.serve.server executes the local one and `trtspec deploy --dry-run` prints them.

GPU backends on several GPUs start the way TensorRT-LLM's scripts/launch_triton_server.py and
tensorrtllm_backend docs/llama_multi_instance.md describe (`gpu_launch`):
- one TensorRT-LLM model on tp*pp GPUs (trtllm, or trtllm-engine without a draft): leader mode,
  `mpirun -n <world>`, one tritonserver per rank, ranks > 0 loading only `tensorrt_llm`;
- two TensorRT-LLM models (trtllm-engine draft-target, any tp): orchestrator mode,
  TRTLLM_ORCHESTRATOR=1 with spawned workers, one tritonserver (`mpirun -n 1`), each model on the
  GPUs its config.pbtxt `gpu_device_ids` names, with the memory-pool flags the script adds.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from trtspec import subproc
from trtspec.repository import trtllm_engine

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
# tritonserver 2.51 in tests/serve/test_reliability_closed.py. A random token would not do:
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
    """The command that runs tritonserver here (see the module docstring for several GPUs).

    `server_id` is what the server reports as its name (GET /v2), so a readiness check can tell
    this server from another on the same port; `shm_prefix` names the Python backend's shared
    memory regions (/dev/shm/<prefix>...) so they can be removed after an abnormal exit.
    """
    engine_repository = spec.build.backend == "trtllm-engine"
    served = filled_repository(repository) if engine_repository else repository.resolve()
    args = tritonserver_args(spec.serve, str(served), backend_dir=str(backend_dir) if backend_dir else None)
    if server_id:
        args.append(f"--id={server_id}")
    env, command = gpu_launch(spec, str(binary), args, shm_prefix=shm_prefix)
    if engine_repository:
        # inside the GPU container: build the repository from its own tree first (container_prelude)
        command = ["bash", "-c", f"bash {subproc.format_command([str(repository.resolve() / 'fill_template.sh')])} "
                   f"{subproc.format_command([str(served)])} && exec {subproc.format_command(command)}"]
    return (["env", *(f"{key}={value}" for key, value in env.items())] if env else []) + command


def filled_repository(repository: Path) -> Path:
    """Where fill_template.sh builds a trtllm-engine repository on this machine: beside the rendered one."""
    return repository.resolve().with_name(repository.resolve().name + "-filled")


def gpu_launch(spec: Any, binary: str, args: list[str], *,
               shm_prefix: str | None = None) -> tuple[dict[str, str], list[str]]:
    """(environment, argv): a single process, leader mode or orchestrator mode (module docstring)."""
    from trtspec.repository.trtllm_engine import multi_gpu_mode

    world = spec.build.tp_size * spec.build.pp_size if spec.build.backend != "cpu" else 1
    mode = multi_gpu_mode(spec.build.backend == "trtllm-engine" and spec.speculative.mode == "draft-target", world)
    if mode == "single":
        shm = [f"--backend-config=python,shm-region-prefix-name={shm_prefix}_"] if shm_prefix else []
        return {}, [binary, *args, *shm]
    if mode == "orchestrator":
        # launch_triton_server.py --multi-model (spawning on): world size 1, the backend spawns workers.
        pools = [f"--cuda-memory-pool-byte-size={gpu}:0" for gpu in range(world)]
        return ({"TRTLLM_ORCHESTRATOR": "1", "TRTLLM_ORCHESTRATOR_SPAWN_PROCESSES": "1"},
                ["mpirun", "--allow-run-as-root", "-n", "1", binary, *args, "--pinned-memory-pool-byte-size=0",
                 "--enable-peer-access=false", *pools,
                 f"--backend-config=python,shm-region-prefix-name={shm_prefix or 'prefix'}0_"])
    command = ["mpirun", "--allow-run-as-root"]
    for rank in range(world):
        rank_args = args + [f"--backend-config=python,shm-region-prefix-name={shm_prefix or 'prefix'}{rank}_"]
        if rank:
            rank_args += ["--model-control-mode=explicit", "--load-model=tensorrt_llm"]
            rank_args = [a for a in rank_args if a != "--model-control-mode=none"]
        command += ["-n", "1", binary, *rank_args, ":"]
    return {}, command[:-1]


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


def container_server(serve: Any, backend: str, spec: Any = None, engine_name: str | None = None) -> str:
    """The shell command a container (docker or k8s) runs: prelude, then exec tritonserver.

    With the spec, GPU backends on several GPUs start in leader or orchestrator mode (gpu_launch),
    and serve.openai_port adds the OpenAI API (openai_in_container).
    """
    openai = bool(spec is not None and serve.openai_port and engine_name)
    if backend == "cpu":
        args = tritonserver_args(serve, CONTAINER_REPOSITORY, backend_dir="/tmp/trtspec-backends", bind_all=True)
        beside = openai_in_container(spec, engine_name) if openai else ""
        return CPU_CONTAINER_PRELUDE + beside + "exec " + CPU_CONTAINER_SERVER + " " + subproc.format_command(args)
    if openai and backend == "trtllm-engine":
        return container_prelude(backend, engine_name) + openai_in_container(spec, engine_name)
    args = tritonserver_args(serve, container_repository(backend), bind_all=True)
    env, command = gpu_launch(spec, CONTAINER_TRITONSERVER, args) if spec is not None else ({}, [CONTAINER_TRITONSERVER, *args])
    exports = "".join(f"export {key}={value} && " for key, value in env.items())
    beside = openai_in_container(spec, engine_name) if openai else ""
    return container_prelude(backend, engine_name) + beside + exports + "exec " + subproc.format_command(command)


# Triton's OpenAI frontend in the Triton containers (triton-inference-server/server
# python/openai/README.md: `cd /opt/tritonserver/python/openai && python3 openai_frontend/main.py`).
TRITON_OPENAI_DIR = "/opt/tritonserver/python/openai"
ENGINE_TOKENIZER_DIR = "hf/target"  # engine.json tokenizer_dir of a trtllm-engine build (builders/trtllm_engine.py)


def openai_in_container(spec: Any, engine_name: str) -> str:
    """Shell for serve.openai_port inside a container, per backend (docs/DEPLOY.md, OpenAI API):

    - cpu: trtspec's frontend (python -m trtspec.serve.openai_app) started beside tritonserver,
      forwarding to its gRPC port; a prefix ending in `&&`.
    - trtllm: `trtllm-serve serve` with the engine's llm_api_options.yaml as
      --extra_llm_api_options (NVIDIA/TensorRT-LLM tensorrt_llm/commands/serve.py: MODEL, --host,
      --port, --backend, --extra_llm_api_options; the YAML's own `model`, relative to the engine
      directory, overrides the positional one), started beside tritonserver: a second copy of the
      weights and KV cache on the same GPUs. A prefix ending in `&&`.
    - trtllm-engine: Triton's OpenAI frontend (python/openai/openai_frontend/main.py
      --model-repository --tokenizer --backend tensorrtllm --openai-port, with
      --enable-kserve-frontends on the spec's HTTP and gRPC ports) in place of tritonserver: it
      runs Triton in process, one process on one GPU (no metrics port). The whole command.
    """
    from trtspec.errors import IncompatibleArtifactError
    from trtspec.serve.openai_frontend import served_names

    serve, backend = spec.serve, spec.build.backend
    engine = f"{CONTAINER_ENGINES}/{engine_name}"
    if backend == "cpu":
        names = " ".join(f"--served-model-name {subproc.format_command([n])}" for n in served_names(spec))
        return (f"{{ python -m trtspec.serve.openai_app --triton-url 127.0.0.1:{serve.grpc_port} --host 0.0.0.0 "
                f"--port {serve.openai_port} {names} > /tmp/openai.log 2>&1 & }} && ")
    if backend == "trtllm":
        return (f"{{ (cd {engine} && exec trtllm-serve serve {engine} --backend pytorch --host 0.0.0.0 "
                f"--port {serve.openai_port} --extra_llm_api_options llm_api_options.yaml) "
                f"> /tmp/trtllm-serve.log 2>&1 & }} && ")
    if spec.build.tp_size * spec.build.pp_size > 1:
        raise IncompatibleArtifactError(
            "serve.openai_port with trtllm-engine on several GPUs: Triton's OpenAI frontend runs Triton in "
            "process, without mpirun", fix="set serve.openai_port: 0, or build for one GPU (tp_size 1, pp_size 1)")
    tokenizer = f"{engine}/{ENGINE_TOKENIZER_DIR}"
    return (f"cd {TRITON_OPENAI_DIR} && {{ python3 -c 'import tritonserver' 2>/dev/null || "
            f"pip install -q /opt/tritonserver/python/triton*.whl; }} && exec python3 openai_frontend/main.py "
            f"--model-repository {container_repository(backend)} --tokenizer {tokenizer} --backend tensorrtllm --host 0.0.0.0 "
            f"--openai-port {serve.openai_port} --enable-kserve-frontends --kserve-http-port {serve.http_port} "
            f"--kserve-grpc-port {serve.grpc_port}")


def container_repository(backend: str) -> str:
    """The repository tritonserver serves inside the container: trtllm-engine's is built at start."""
    return trtllm_engine.FILLED_AT if backend == "trtllm-engine" else CONTAINER_REPOSITORY


def container_prelude(backend: str, engine_name: str | None = None) -> str:
    """Shell run in a GPU container before tritonserver.

    trtllm: the probe first (trtspec.serve.probe: the installed TensorRT-LLM must know every
    LLM-API key the engine's options carry, else the container stops with one line naming the
    first it does not), then copy the stock llmapi model.py in. trtllm-engine: build the repository from the
    container's own inflight_batcher_llm tree, whole model directories (the BLS's 1/lib/ too),
    filled with /app/tools/fill_template.py by the rendered fill_template.sh (trtspec.repository.
    trtllm_engine); the mounted repository is only read, and a placeholder left stops the start.
    """
    if backend == "trtllm":
        probe = f"python3 -m trtspec.serve.probe {CONTAINER_ENGINES}/{engine_name} && " if engine_name else ""
        return probe + f"cp -n /app/all_models/llmapi/tensorrt_llm/1/*.py {CONTAINER_REPOSITORY}/tensorrt_llm/1/ && "
    if backend == "trtllm-engine":
        return f"bash {CONTAINER_REPOSITORY}/fill_template.sh {trtllm_engine.FILLED_AT} && "
    return ""


def docker_command(spec: Any, repository: Path, engine_dir: Path, image: str | None = None) -> list[str]:
    """`docker run` for the project's image: GPUs, shm, ports on the spec's host, mounts."""
    serve, backend = spec.serve, spec.build.backend
    image = image or DEFAULT_IMAGE[backend]
    command = ["docker", "run", "--rm", "-d", "--name", f"trtspec-{engine_dir.name}", f"--shm-size={SHM_SIZE}",
               "--ulimit", "memlock=-1", "--ulimit", "stack=67108864"]
    if backend != "cpu":
        from trtspec.builders import contracts

        # the release the engine was written for names its container (26.07 for TensorRT-LLM 1.2.1)
        command += ["--gpus", "all", "--label", f"trtspec.base-image={contracts.for_spec(spec).image}"]
    for port in (serve.http_port, serve.grpc_port, serve.metrics_port) + ((serve.openai_port,) if serve.openai_port else ()):
        command += ["-p", f"{serve.host}:{port}:{port}"]
    command += ["-v", f"{repository.resolve()}:{CONTAINER_REPOSITORY}",
                "-v", f"{engine_dir.resolve()}:{CONTAINER_ENGINES}/{engine_dir.name}:ro",
                "--entrypoint", "bash", image, "-c"]
    return command + [container_server(serve, backend, spec, engine_dir.name)]
