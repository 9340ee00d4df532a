"""Server plans (pure): local command, docker run; ports; stop only our process (k8s: test_k8s_manifests.py)."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from trtspec import subproc
from trtspec.artifacts import Layout, write_json
from trtspec.errors import ServerError
from trtspec.serve import launch, server


@pytest.fixture
def gpu_spec(tmp_path, tiny_llama, spec_factory):
    return spec_factory(tmp_path, tiny_llama, backend="trtllm", mode="ngram", build={"tp_size": 2})


def test_local_command_binds_loopback_with_model_control_none(tmp_path, tiny_llama, spec_factory):
    spec = spec_factory(tmp_path, tiny_llama)
    command = launch.local_command(spec, Path("/x/tritonserver"), tmp_path / "repo", tmp_path / "backends")
    assert command[0] == "/x/tritonserver"
    for flag in ("--model-control-mode=none", f"--grpc-port={spec.serve.grpc_port}", "--http-address=127.0.0.1",
                 "--grpc-address=127.0.0.1", "--metrics-address=127.0.0.1", f"--backend-directory={tmp_path / 'backends'}"):
        assert flag in command


def test_multi_gpu_local_command_uses_mpirun_per_rank(gpu_spec, tmp_path):
    command = launch.local_command(gpu_spec, Path("/opt/tritonserver/bin/tritonserver"), tmp_path / "repo", None)
    assert command[:2] == ["mpirun", "--allow-run-as-root"]
    assert command.count("-n") == 2 and command.count(":") == 1
    rank1 = command[command.index(":") + 1:]
    assert "--model-control-mode=explicit" in rank1 and "--load-model=tensorrt_llm" in rank1
    assert "--model-control-mode=none" not in rank1
    assert "--backend-config=python,shm-region-prefix-name=prefix1_" in rank1


def test_docker_command_has_gpus_shm_ports_and_mounts(gpu_spec, tmp_path):
    engine = tmp_path / "engines" / "tiny-ngram-trtllm"
    command = launch.docker_command(gpu_spec, tmp_path / "repo", engine)
    assert command[:2] == ["docker", "run"] and "--gpus" in command and "--shm-size=2g" in command
    # the image's base for the release the engine was written for (1.2.1 by default: 26.07)
    assert "trtspec.base-image=nvcr.io/nvidia/tritonserver:26.07-trtllm-python-py3" in command
    for port in (gpu_spec.serve.http_port, gpu_spec.serve.grpc_port, gpu_spec.serve.metrics_port):
        assert f"127.0.0.1:{port}:{port}" in command
    assert f"{(tmp_path / 'repo').resolve()}:/models" in command
    assert f"{engine.resolve()}:/engines/tiny-ngram-trtllm:ro" in command
    shell = command[-1]
    # the probe first: the container's TensorRT-LLM must know every key the options carry (serve/probe.py)
    assert shell.startswith("python3 -m trtspec.serve.probe /engines/tiny-ngram-trtllm && "
                            "cp -n /app/all_models/llmapi/tensorrt_llm/1/*.py /models/tensorrt_llm/1/")
    # tp 2: leader mode, one tritonserver per rank (launch.gpu_launch)
    assert "exec mpirun --allow-run-as-root -n 1 /opt/tritonserver/bin/tritonserver --model-repository=/models" in shell
    assert "--grpc-address=0.0.0.0" in shell  # inside the container; the host side stays on 127.0.0.1


def test_busy_port_is_refused(tmp_path, tiny_llama, spec_factory):
    import socket

    spec = spec_factory(tmp_path, tiny_llama)
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", spec.serve.grpc_port))
        sock.listen()
        with pytest.raises(ServerError, match=f"grpc_port {spec.serve.grpc_port}"):
            server.check_ports(spec.serve)


def test_stop_leaves_a_process_that_is_not_ours_alone(tmp_path, tiny_llama, spec_factory):
    # A recorded pid that now belongs to some other program (pids get reused) must survive stop.
    spec = spec_factory(tmp_path, tiny_llama)
    layout = Layout.from_spec(spec)
    layout.server_dir.mkdir(parents=True)
    pid = subproc.start([sys.executable, "-c", "import time; time.sleep(60)"], log_path=tmp_path / "other.log")
    try:
        write_json(layout.server_pid, {"pid": pid, "binary": "/x/tritonserver", "host": "127.0.0.1",
                                       "http_port": 1, "started": 0})
        result = server.stop_local(layout)
        assert not result["stopped"] and "another process" in result["reason"]
        assert subproc.is_running(pid)
        assert not layout.server_pid.exists()
    finally:
        subproc.stop(pid)


def test_find_tritonserver_prefers_env_override(tmp_path, monkeypatch):
    fake = tmp_path / "tritonserver"
    fake.write_text("")
    monkeypatch.setenv("TRTSPEC_TRITONSERVER", str(fake))
    assert server.find_tritonserver() == fake
    monkeypatch.setenv("TRTSPEC_TRITONSERVER", str(tmp_path / "missing"))
    with pytest.raises(Exception, match="no such file"):
        server.find_tritonserver()


def test_server_env_passes_site_packages_to_the_stub():
    env = server.server_env()
    import trtspec

    root = str(Path(trtspec.__file__).resolve().parent.parent)
    assert env["TRTSPEC_PYTHONPATH"].split(":")[0] == root
    assert "PATH" not in env  # only a prepared backend directory anchors the stub's home on PATH


def test_cpu_server_threads_use_every_core_unless_the_caller_set_them(monkeypatch):
    import os

    monkeypatch.delenv("OMP_NUM_THREADS", raising=False)
    monkeypatch.delenv("OMP_WAIT_POLICY", raising=False)
    env = server.server_env(backend="cpu")
    assert env["OMP_NUM_THREADS"] == str(len(os.sched_getaffinity(0)))   # every usable core
    assert "OMP_WAIT_POLICY" not in env                                   # libgomp's own default
    monkeypatch.setenv("OMP_NUM_THREADS", "7")
    monkeypatch.setenv("OMP_WAIT_POLICY", "ACTIVE")
    env = server.server_env(backend="cpu")
    assert env["OMP_NUM_THREADS"] == "7" and "OMP_WAIT_POLICY" not in env   # inherited as the caller set it


def test_cpu_docker_command_prepares_the_python_backend_in_the_container(tmp_path, tiny_llama, spec_factory):
    spec = spec_factory(tmp_path, tiny_llama)
    command = launch.docker_command(spec, tmp_path / "repo", tmp_path / "engines" / "tiny-ngram-cpu")
    assert "--gpus" not in command
    shell = command[-1]
    assert "python_backend_stubs/$V/triton_python_backend_stub /tmp/trtspec-backends/python/" in shell
    assert "export LD_LIBRARY_PATH=$P/../../nvidia_pytriton.libs" in shell
    assert "exec $P/bin/tritonserver --model-repository=/models" in shell
    assert "--backend-directory=/tmp/trtspec-backends" in shell


def test_openai_port_in_containers_per_backend(tmp_path, tiny_llama, spec_factory):
    """serve.openai_port in docker: cpu runs trtspec's frontend beside tritonserver, trtllm runs
    trtllm-serve with the engine's llm_api_options.yaml beside it, trtllm-engine runs Triton's
    OpenAI frontend (Triton in process, KServe frontends on the Triton ports) in its place."""
    from trtspec.errors import IncompatibleArtifactError

    def shell(backend, **build):
        spec = spec_factory(tmp_path, tiny_llama, backend=backend, mode="ngram" if backend != "trtllm-engine" else "none",
                            serve={"openai_port": 18299}, build=build)
        command = launch.docker_command(spec, tmp_path / "repo", tmp_path / "engines" / "e1")
        assert "127.0.0.1:18299:18299" in command
        return spec, command[-1]

    spec, cpu = shell("cpu")
    assert (f"{{ python -m trtspec.serve.openai_app --triton-url 127.0.0.1:{spec.serve.grpc_port} --host 0.0.0.0 "
            "--port 18299 --served-model-name tiny") in cpu
    assert cpu.index("trtspec.serve.openai_app") < cpu.index("exec $P/bin/tritonserver")
    _, trtllm = shell("trtllm")
    assert ("{ (cd /engines/e1 && exec trtllm-serve serve /engines/e1 --backend pytorch --host 0.0.0.0 --port 18299 "
            "--extra_llm_api_options llm_api_options.yaml) > /tmp/trtllm-serve.log 2>&1 & } && ") in trtllm
    assert "exec /opt/tritonserver/bin/tritonserver" in trtllm
    spec, engine = shell("trtllm-engine")
    assert engine.endswith(
        "cd /opt/tritonserver/python/openai && { python3 -c 'import tritonserver' 2>/dev/null || pip install -q "
        "/opt/tritonserver/python/triton*.whl; } && exec python3 openai_frontend/main.py --model-repository /tmp/trtspec-models "
        "--tokenizer /engines/e1/hf/target --backend tensorrtllm --host 0.0.0.0 --openai-port 18299 "
        f"--enable-kserve-frontends --kserve-http-port {spec.serve.http_port} --kserve-grpc-port {spec.serve.grpc_port}")
    assert "bin/tritonserver" not in engine
    assert engine.startswith("bash /models/fill_template.sh /tmp/trtspec-models && ")   # upstream's tree, filled
    with pytest.raises(IncompatibleArtifactError, match="Triton's OpenAI frontend runs Triton in process"):
        shell("trtllm-engine", tp_size=2)


def test_openai_port_off_leaves_the_commands_unchanged(tmp_path, tiny_llama, spec_factory):
    spec = spec_factory(tmp_path, tiny_llama, backend="trtllm", mode="ngram")
    shell = launch.docker_command(spec, tmp_path / "repo", tmp_path / "engines" / "e1")[-1]
    assert "trtllm-serve" not in shell and "openai" not in shell
