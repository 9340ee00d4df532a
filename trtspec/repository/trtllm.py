"""The trtllm backend's repository: Triton's stock LLM-API model (`all_models/llmapi`).

Files: `tensorrt_llm/config.pbtxt` (LLM-API I/O, python backend) and `tensorrt_llm/1/model.yaml`
(every key an `LLM()` argument, plus `triton_config`). The stock `model.py` (and its helpers) is
not shipped by trtspec: the container carries the version that matches its TensorRT-LLM, and the
server command copies `/app/all_models/llmapi/tensorrt_llm/1/*.py` into the repository at deploy
time (trtspec.serve.launch). Facts, from the contract of the engine's release
(contract_data/trtllm-<version>.json, `triton.llmapi`): the stock model reads
`triton_config.max_batch_size`, `.decoupled` (and `.cancellation_check_period_ms`) from
model.yaml in auto_complete_config/initialize, so the config.pbtxt written here must agree with
them (checked below); it reads a `stop` input (cancel the requests of a request id); and it sends
every perf-metric output with text_output's dtype, so `acceptance_rate`,
`total_draft_tokens`, ... arrive as BYTES holding the number even though the stock config.pbtxt
(and this one, which keeps its declarations) types them INT32/FP32/INT64. Clients parse both.
"""

from __future__ import annotations

from pathlib import Path, PurePosixPath
from typing import Any

from trtspec.errors import IncompatibleArtifactError
from trtspec.repository import pbtxt
from trtspec.repository.pbtxt import tensor

MODEL_NAME = "tensorrt_llm"
CONTAINER_MODEL_DIR = "/app/all_models/llmapi/tensorrt_llm/1"
# Keys of model.yaml whose values are paths relative to the engine directory in engine.json.
PATH_KEYS = ("model", "tokenizer")


def inputs() -> list[dict[str, Any]]:
    """The stock llmapi model's inputs (it reads only those a request sends)."""
    optional = [("streaming", "BOOL", [1]), ("sampling_param_best_of", "INT32", [1]),
                ("sampling_param_temperature", "FP32", [1]), ("sampling_param_top_k", "INT32", [1]),
                ("sampling_param_top_p", "FP32", [1]), ("sampling_param_frequency_penalty", "FP32", [1]),
                ("sampling_param_presence_penalty", "FP32", [1]), ("sampling_param_max_tokens", "INT32", [1]),
                ("sampling_param_stop", "BYTES", [-1]), ("sampling_param_seed", "UINT64", [1]),
                ("sampling_param_exclude_input_from_output", "BOOL", [1]),
                ("sampling_param_return_perf_metrics", "BOOL", [1]), ("return_finish_reason", "BOOL", [1]),
                ("return_stop_reason", "BOOL", [1]), ("return_cumulative_logprob", "BOOL", [1]),
                ("stop", "BOOL", [1])]
    return [tensor("text_input", "BYTES", [-1])] + [tensor(n, t, d, optional=True) for n, t, d in optional]


def outputs() -> list[dict[str, Any]]:
    """Every output the stock model may send (with perf metrics: KV-cache stats, timestamps and the
    speculative counters), declared as the stock config.pbtxt declares them; the stock model.py
    sends the perf metrics as BYTES strings (module docstring). An undeclared one would fail the
    request."""
    return [tensor("text_output", "BYTES", [-1]), tensor("finish_reason", "BYTES", [-1]),
            tensor("stop_reason", "BYTES", [-1]), tensor("cumulative_logprob", "FP32", [-1]),
            *[tensor(n, "INT32", [-1]) for n in ("kv_cache_reused_block", "kv_cache_missed_block",
                                                 "kv_cache_alloc_new_blocks", "kv_cache_alloc_total_blocks")],
            tensor("kv_cache_hit_rate", "FP32", [-1]),
            *[tensor(n, "INT64", [1]) for n in ("arrival_time_ns", "first_scheduled_time_ns",
                                                "first_token_time_ns", "last_token_time_ns")],
            tensor("acceptance_rate", "FP32", [1]), tensor("total_accepted_draft_tokens", "INT32", [1]),
            tensor("total_draft_tokens", "INT32", [1])]


def llm_options(engine: dict[str, Any], engine_path: str) -> dict[str, Any]:
    """The LLM() arguments from engine.json's `trtllm.llm_api_options`, paths made server-side."""
    section = engine.get("trtllm") or {}
    options = dict(section.get("llm_api_options") or {})
    if not options:
        raise IncompatibleArtifactError(f"engine {engine.get('name')}: engine.json has no trtllm.llm_api_options",
                                        fix="rebuild with `trtspec build --backend trtllm`")
    root = PurePosixPath(engine_path)
    for key in PATH_KEYS:
        if isinstance(options.get(key), str) and not options[key].startswith("/"):
            options[key] = str(root / options[key])
    speculative = options.get("speculative_config")
    if speculative:
        speculative = dict(speculative)
        for key in ("speculative_model", "speculative_model_dir", "pytorch_weights_path"):
            if isinstance(speculative.get(key), str) and not speculative[key].startswith("/"):
                speculative[key] = str(root / speculative[key])
        if isinstance(speculative.get("draft_len_schedule"), dict):  # JSON keys are strings; the LLM API's are ints
            speculative["draft_len_schedule"] = {int(b): int(k) for b, k in speculative["draft_len_schedule"].items()}
        options["speculative_config"] = speculative
    return options


def model_yaml(engine: dict[str, Any], spec: Any, engine_path: str) -> dict[str, Any]:
    """model.yaml as data: LLM() arguments + triton_config (what the stock model.py reads)."""
    options = llm_options(engine, engine_path)
    return {**options, "triton_config": {"max_batch_size": 0, "decoupled": spec.serve.streaming}}


def check_contract(config: dict[str, Any], yaml_data: dict[str, Any], engine: dict[str, Any]) -> None:
    """Every input, output and triton_config key is one the release's stock model knows."""
    from trtspec.builders import contracts

    version = (engine.get("trtllm") or {}).get("tensorrt_llm_version") or contracts.default_version()
    llmapi = contracts.load(version).triton["llmapi"]
    for kind, known in (("input", llmapi["inputs"]), ("output", llmapi["outputs"])):
        for entry in config[kind]:
            name, dtype = entry["name"], entry["data_type"].removeprefix("TYPE_").replace("STRING", "BYTES")
            if known.get(name) != dtype:
                raise IncompatibleArtifactError(f"{kind} {name} {dtype}: not what the stock llmapi model of "
                                                f"TensorRT-LLM {version} declares ({llmapi['source']})",
                                                fix="this is a trtspec bug; report it")
    unknown = sorted(set(yaml_data["triton_config"]) - set(llmapi["triton_config"]))
    if unknown:
        raise IncompatibleArtifactError(f"model.yaml triton_config: {unknown} not read by the stock model",
                                        fix="this is a trtspec bug; report it")


def model_config(spec: Any) -> dict[str, Any]:
    return {
        "name": MODEL_NAME,
        "backend": "python",
        "max_batch_size": 0,
        "model_transaction_policy": {"decoupled": spec.serve.streaming},
        "input": inputs(),
        "output": outputs(),
        "instance_group": [{"count": 1, "kind": "KIND_CPU"}],
    }


def check_agreement(config: dict[str, Any], yaml_data: dict[str, Any], engine: dict[str, Any]) -> None:
    """config.pbtxt and model.yaml say the same thing, and both agree with engine.json."""
    triton = yaml_data["triton_config"]
    if bool(triton["decoupled"]) != config["model_transaction_policy"]["decoupled"]:
        raise IncompatibleArtifactError("model.yaml triton_config.decoupled differs from config.pbtxt")
    if int(triton["max_batch_size"]) != config["max_batch_size"]:
        raise IncompatibleArtifactError("model.yaml triton_config.max_batch_size differs from config.pbtxt")
    build = engine["build_config"]
    if int(yaml_data.get("max_batch_size", build["max_batch_size"])) != int(build["max_batch_size"]):
        raise IncompatibleArtifactError(f"model.yaml max_batch_size {yaml_data.get('max_batch_size')} differs from "
                                        f"engine.json's {build['max_batch_size']}", fix="rebuild the engine")
    speculative = yaml_data.get("speculative_config") or {}
    if speculative.get("max_draft_len", 0) > max(build["max_draft_len"], 0) and engine["mode"] != "none":
        raise IncompatibleArtifactError(f"speculative_config.max_draft_len {speculative['max_draft_len']} exceeds "
                                        f"the built max_draft_len {build['max_draft_len']}", fix="rebuild the engine")


def render(engine: dict[str, Any], spec: Any, engine_path: str, dest: Path,
           engine_dir: Path | None = None) -> list[Path]:  # engine_dir: read only by trtllm-engine's renderer
    import yaml

    config = model_config(spec)
    data = model_yaml(engine, spec, engine_path)
    check_agreement(config, data, engine)
    check_contract(config, data, engine)
    model_dir = dest / MODEL_NAME
    (model_dir / "1").mkdir(parents=True)
    config_path = model_dir / "config.pbtxt"
    config_path.write_text(pbtxt.render(config))
    yaml_path = model_dir / "1" / "model.yaml"
    from trtspec.builders import contracts
    from trtspec.builders.trtllm import header

    contract = contracts.load((engine.get("trtllm") or {}).get("tensorrt_llm_version") or contracts.default_version())
    yaml_path.write_text("# LLM() arguments for Triton's stock llmapi model (written by trtspec deploy) for\n"
                         + header(contract)
                         + f"# model.py is copied from {CONTAINER_MODEL_DIR} inside the container at start.\n"
                         + yaml.safe_dump(data, sort_keys=False))
    return [config_path, yaml_path]
