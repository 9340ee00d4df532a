"""trtllm-engine on several GPUs: the launch and repository tensorrtllm_backend's multi-instance docs describe.

Sources (contract_data/trtllm-1.1.0.json, `triton.multi_gpu`): tensorrtllm_backend
docs/llama_multi_instance.md@r25.12 and TensorRT-LLM triton_backend/scripts/launch_triton_server.py.
Two TensorRT-LLM models (draft-target) run in orchestrator mode: TRTLLM_ORCHESTRATOR=1, spawned
workers, one tritonserver, each model on the GPUs of its gpu_device_ids, the memory-pool flags the
script adds, no participant_ids. One model on tp GPUs runs in leader mode: mpirun, one server per
rank, ranks > 0 load only tensorrt_llm.
"""

from __future__ import annotations

import json
import shlex
from pathlib import Path

import pytest

from tests.builders.conftest import assert_golden, normalize
from trtspec import subproc
from trtspec.builders import build
from trtspec.repository import pbtxt, render
from trtspec.repository import trtllm_engine_contract as contract
from trtspec.serve import launch
from trtspec.spec.schema import validate_spec


def _spec(root: Path, target: Path, draft: Path | None, **build_section):
    mode = "draft-target" if draft else "none"
    return validate_spec({"workdir": str(root / "work"), "model": {"source": str(target), "name": "tiny"},
                          "speculative": {"mode": mode, **({"draft": str(draft)} if draft else {})},
                          "build": {"backend": "trtllm-engine", "output_dir": str(root / "engines"), **build_section},
                          "serve": {"repository": str(root / "repo")}})


def served(command: list[str], repo: Path) -> list[str]:
    """The server command after the repository is filled: `[env K=V] bash -c 'fill && exec <server>'`."""
    fill, _, server = command[command.index("-c") + 1].partition(" && exec ")
    assert fill == f"bash {repo.resolve() / 'fill_template.sh'} {launch.filled_repository(repo)}"
    return command[:command.index("bash")] + shlex.split(server)


def filled_configs(repo: Path) -> dict:
    """model -> ModelConfig: upstream's templates with the rendered fills.json applied."""
    data = json.loads((repo / "fills.json").read_text())
    configs = contract.filled(contract.section(data["tensorrt_llm_version"]), data["models"])
    return {name: pbtxt.to_message(config) for name, config in configs.items()}


@pytest.fixture(scope="module")
def engines(tmp_path_factory, gpu_target, tiny_llama_draft):
    root = tmp_path_factory.mktemp("multi-gpu")
    # one workdir each: the engine name does not carry tp_size
    specs = {"draft-target-tp2": _spec(root / "a", gpu_target, tiny_llama_draft, tp_size=2),
             "draft-target-tp1": _spec(root / "b", gpu_target, tiny_llama_draft),
             "none-tp2": _spec(root / "c", gpu_target, None, tp_size=2)}
    return root, {case: (spec, build(spec).engine_dir) for case, spec in specs.items()}


def test_draft_target_tp2_launch_and_repository_golden(engines):
    root, cases = engines
    spec, engine_dir = cases["draft-target-tp2"]
    repo = root / "repo-tp2"
    render(engine_dir, spec, repo, engine_path="/engines/tiny")
    local = served(launch.local_command(spec, Path("/opt/tritonserver/bin/tritonserver"), repo, None), repo)
    docker = launch.docker_command(spec, repo, engine_dir, image="trtspec:gpu")
    configs = filled_configs(repo)
    llm = {name: configs[name] for name in ("tensorrt_llm", "tensorrt_llm_draft")}
    lines = ["# local", subproc.format_command(local), "# docker (shell run in the container)", docker[-1]]
    for name, config in llm.items():
        lines.append(f"# {name} parameters")
        lines += [f"{key}: {value.string_value}" for key, value in sorted(config.parameters.items())
                  if key in ("gpu_device_ids", "participant_ids", "kv_cache_free_gpu_mem_fraction",
                             "max_tokens_in_paged_kv_cache", "gpt_model_path")]
    text = normalize("\n".join(lines) + "\n", {str(root.resolve()): "<WORK>", str(root): "<WORK>"})
    assert_golden("trtllm-engine-draft-target-tp2-launch.txt", text)
    # orchestrator mode: one server (world size 1) with the orchestrator environment, both engines loaded
    assert local[:3] == ["env", "TRTLLM_ORCHESTRATOR=1", "TRTLLM_ORCHESTRATOR_SPAWN_PROCESSES=1"]
    assert local[3:7] == ["mpirun", "--allow-run-as-root", "-n", "1"] and ":" not in local
    assert "--cuda-memory-pool-byte-size=1:0" in local and "--load-model=tensorrt_llm" not in local
    assert "export TRTLLM_ORCHESTRATOR=1 && " in docker[-1]
    for config in llm.values():
        assert config.parameters["gpu_device_ids"].string_value == "0,1"
        # "" leaves participant_ids unset: the backend splits it into no list (model_state.cc@c2e65b88:126-131)
        assert config.parameters["participant_ids"].string_value == ""
    tokens = json.loads((engine_dir / "engine.json").read_text())["trtllm_engine"]["kv_cache_tokens"]
    assert llm["tensorrt_llm"].parameters["max_tokens_in_paged_kv_cache"].string_value == str(tokens["target"])


def test_draft_target_on_one_gpu_is_orchestrator_mode_too(engines):
    # the draft-target README's Triton workflow launches with --multi-model even on one GPU
    _, cases = engines
    spec, _ = cases["draft-target-tp1"]
    command = served(launch.local_command(spec, Path("/opt/tritonserver/bin/tritonserver"), Path("/m"), None), Path("/m"))
    assert command[1] == "TRTLLM_ORCHESTRATOR=1" and "--cuda-memory-pool-byte-size=0:0" in command


def test_one_engine_on_two_gpus_is_leader_mode(engines):
    root, cases = engines
    spec, engine_dir = cases["none-tp2"]
    render(engine_dir, spec, root / "repo-none", engine_path="/engines/tiny")
    command = served(launch.local_command(spec, Path("/opt/tritonserver/bin/tritonserver"), root / "repo-none", None),
                     root / "repo-none")
    assert command[:2] == ["mpirun", "--allow-run-as-root"] and command.count(":") == 1
    rank1 = command[command.index(":") + 1:]
    assert "--load-model=tensorrt_llm" in rank1 and "TRTLLM_ORCHESTRATOR=1" not in command
    config = filled_configs(root / "repo-none")["tensorrt_llm"]
    assert config.parameters["gpu_device_ids"].string_value == "0,1"
    # one engine: sized by the fraction; "" is unset to the backend (its parse fails, the default holds)
    assert config.parameters["max_tokens_in_paged_kv_cache"].string_value == ""
