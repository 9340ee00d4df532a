"""The trtllm-engine backend's repository: `inflight_batcher_llm` for legacy TensorRT engines.

Models: ensemble -> preprocessing -> tensorrt_llm (C++ `tensorrtllm` backend,
`inflight_fused_batching`) -> postprocessing; for draft-target also tensorrt_llm_draft and
tensorrt_llm_bls (the BLS runs the draft/verify loop: non-streaming, one request per call, as
upstream). The configs are rendered as data here; the Python models' model.py files
(preprocessing, postprocessing, tensorrt_llm_bls) come from the container's
`/app/all_models/inflight_batcher_llm/` at start, so they match its TensorRT-LLM.

Every `${...}` placeholder of upstream's templates (the contract of the engine's TensorRT-LLM
release: contract_data/trtllm-<version>.json, `triton.inflight_batcher_llm`) is either filled or in
UNSET with the reason it stays unset (upstream reads an unset parameter as "use the default").
`fill_values()` also gives the `tools/fill_template.py` argument for re-filling the container's
own templates, with the commas of gpu_device_ids escaped as upstream requires.

Multi-GPU, as tensorrtllm_backend docs/llama_multi_instance.md describes it: draft-target (two
TensorRT-LLM models) runs in orchestrator mode, one server whose backend spawns each engine's
workers on the GPUs its `gpu_device_ids` names (trtspec.serve.launch sets TRTLLM_ORCHESTRATOR); a
single engine with tp*pp > 1 runs in leader mode (mpirun, one server per rank). Two engines on
the same GPUs get their KV pools as `max_tokens_in_paged_kv_cache` from the memory plan, so the
split holds whichever engine loads first; a free-memory fraction alone would depend on the order.
"""

from __future__ import annotations

from pathlib import Path, PurePosixPath
from typing import Any

from trtspec.builders import contracts
from trtspec.errors import IncompatibleArtifactError
from trtspec.repository import pbtxt
from trtspec.repository.pbtxt import tensor

CONTAINER_MODELS = "/app/all_models/inflight_batcher_llm"
PYTHON_MODELS = ("preprocessing", "postprocessing", "tensorrt_llm_bls")


def _placeholders(version: str | None = None) -> dict[str, Any]:
    return contracts.load(version or contracts.default_version()).triton["inflight_batcher_llm"]


# Every ${...} of the default release's tensorrt_llm/config.pbtxt, and of the other models'.
UPSTREAM_PLACEHOLDERS = frozenset(_placeholders()["tensorrt_llm_placeholders"])
UPSTREAM_OTHER_PLACEHOLDERS = {model: frozenset(keys) for model, keys in _placeholders()["other_placeholders"].items()}

# Upstream placeholders not set by trtspec, each with why it stays unset.
UNSET = {
    "cross_kv_cache_fraction": "encoder-decoder models only",
    "encoder_engine_dir": "encoder-decoder models only",
    "enable_trt_overlap": "an experimental CUDA-graph feature, off by default",
    "guided_decoding_backend": "no guided decoding",
    "xgrammar_tokenizer_info_path": "no guided decoding",
    "kv_cache_host_memory_bytes": "no host KV offload",
    "kv_cache_onboard_blocks": "no host KV offload",
    "lookahead_ngram_size": "lookahead decoding is not a trtspec mode",
    "lookahead_verification_set_size": "lookahead decoding is not a trtspec mode",
    "lookahead_window_size": "lookahead decoding is not a trtspec mode",
    "lora_cache_gpu_memory_fraction": "no LoRA", "lora_cache_host_memory_bytes": "no LoRA",
    "lora_cache_max_adapter_size": "no LoRA", "lora_cache_optimal_adapter_size": "no LoRA",
    "lora_prefetch_dir": "no LoRA",
    "max_attention_window_size": "full attention (engine default)",
    "medusa_choices": "Medusa is not a trtspec mode",
    "eagle_choices": "EAGLE is refused on trtllm-engine (EAGLE-3 needs the LLM API)",
    "gpu_weights_percent": "weights stay on the GPU",
    "sink_token_length": "no attention sinks",
    "participant_ids": "orchestrator mode spawns each engine's workers; participant_ids are only for "
                       "--disable-spawn-processes (rank 0 the orchestrator)",
    "prompt_embedding_table_data_type": "no prompt tuning",
}
# Set only for draft-target (two engines sharing GPUs); a single engine is sized by the fraction.
SET_FOR_DRAFT_TARGET = {"max_tokens_in_paged_kv_cache"}
UNSET_OTHER = {"max_num_images": "text-only models", "multimodal_model_path": "text-only models",
               "multimodal_encoders_name": "text-only models", "prompt_embedding_table_data_type": "no prompt tuning"}


def plan(engine: dict[str, Any], spec: Any, engine_path: str, engine_dir: Path) -> dict[str, Any]:
    """Every value the configs need, derived from engine.json and the spec."""
    section = engine.get("trtllm_engine") or {}
    build = engine["build_config"]
    root = PurePosixPath(engine_path)
    draft_target = engine["mode"] == "draft-target"
    if engine["mode"] not in ("draft-target", "none"):
        raise IncompatibleArtifactError(f"mode {engine['mode']} has no TensorRT-engine repository",
                                        fix="use build.backend: trtllm")
    engines = section.get("engines") or {"target": "target", "draft": "draft" if draft_target else None}
    kv_tokens = section.get("kv_cache_tokens") or {}
    if draft_target and not kv_tokens.get("draft"):
        raise IncompatibleArtifactError(f"engine {engine.get('name')}: engine.json has no kv_cache_tokens for the "
                                        "two engines", fix="rebuild it with this trtspec (`trtspec build --force`)")
    world = build.get("tp_size", spec.build.tp_size) * build.get("pp_size", spec.build.pp_size)
    num_draft_tokens = int(section.get("num_draft_tokens", build["max_draft_len"] if draft_target else 0))
    if num_draft_tokens > build["max_draft_len"]:
        raise IncompatibleArtifactError(f"num_draft_tokens {num_draft_tokens} exceeds the engine's max_draft_len "
                                        f"{build['max_draft_len']}", fix="rebuild with a larger max_draft_len")
    return {
        "triton_max_batch_size": build["max_batch_size"],
        "engine_dir": str(root / engines["target"]),
        "draft_engine_dir": str(root / engines["draft"]) if draft_target else None,
        "tokenizer_dir": str(root / section.get("tokenizer_dir", engine["target"]["path"])),
        # The BLS loop is non-streaming (upstream); a plain ensemble streams when the spec says so.
        "decoupled_mode": spec.serve.streaming and not draft_target,
        "kv_cache_free_gpu_mem_fraction": spec.build.free_gpu_memory_fraction,
        "max_tokens_in_paged_kv_cache": (kv_tokens.get("target"), kv_tokens.get("draft")) if draft_target
        else (None, None),
        "decoding_mode": section.get("decoding_mode", "top_k_top_p"),
        # Both engines on the same GPUs (co-located, as the draft-target README's single-GPU example).
        "gpu_device_ids": list(range(world)),
        "multi_gpu": multi_gpu_mode(draft_target, world),
        "num_draft_tokens": num_draft_tokens,
        "use_draft_logits": bool(section.get("use_draft_logits", False)),
        "max_queue_delay_microseconds": spec.serve.max_queue_delay_us,
        "draft_target": draft_target,
        "instance_count": spec.serve.instance_count,
    }


def multi_gpu_mode(draft_target: bool, world: int) -> str:
    """orchestrator (several TensorRT-LLM models), leader (one model on several GPUs) or single."""
    if draft_target:
        return "orchestrator"
    return "leader" if world > 1 else "single"


def llm_parameters(values: dict[str, Any], *, draft: bool) -> dict[str, Any]:
    """The tensorrt_llm (or tensorrt_llm_draft) model's parameters: upstream's placeholders, filled."""
    params = {
        "max_beam_width": 1, "FORCE_CPU_ONLY_INPUT_TENSORS": "no",
        "gpt_model_type": "inflight_fused_batching",           # ${batching_strategy}
        "gpt_model_path": values["draft_engine_dir" if draft else "engine_dir"],  # ${engine_dir}
        "encoder_input_features_data_type": "TYPE_FP16",
        "batch_scheduler_policy": "guaranteed_no_evict",
        "kv_cache_free_gpu_mem_fraction": values["kv_cache_free_gpu_mem_fraction"],
        "enable_kv_cache_reuse": True,
        "enable_chunked_context": False,
        "normalize_log_probs": True,
        "exclude_input_in_output": True,
        "cancellation_check_period_ms": 100,
        "stats_check_period_ms": 100,
        "iter_stats_max_iterations": 1000,
        "request_stats_max_iterations": 0,
        "decoding_mode": values["decoding_mode"],
        "multi_block_mode": True,
        "enable_context_fmha_fp32_acc": False,
        "cuda_graph_mode": False,
        "cuda_graph_cache_size": 0,
        "speculative_decoding_fast_logits": False,
        "gpu_device_ids": ",".join(str(i) for i in values["gpu_device_ids"]),
        "num_nodes": 1,
    }
    max_tokens = values["max_tokens_in_paged_kv_cache"][1 if draft else 0]
    if max_tokens:
        # "If both max_tokens and free_gpu_memory_fraction are set, the minimum is used": the planned
        # token count wins when the plan holds, whichever engine loads first.
        params["max_tokens_in_paged_kv_cache"] = max_tokens
    return params


def _llm_model(name: str, values: dict[str, Any], *, draft: bool) -> dict[str, Any]:
    ids = lambda n, dims=None, **kw: tensor(n, "INT32", dims or [1], **kw)  # noqa: E731
    return {
        "name": name, "backend": "tensorrtllm", "max_batch_size": values["triton_max_batch_size"],
        "model_transaction_policy": {"decoupled": values["decoupled_mode"]},
        "dynamic_batching": {"preferred_batch_size": [values["triton_max_batch_size"]],
                             "max_queue_delay_microseconds": values["max_queue_delay_microseconds"],
                             "default_queue_policy": {"max_queue_size": 0}},
        "input": [ids("input_ids", [-1], ragged=True), ids("input_lengths", [1]),
                  ids("request_output_len"), ids("draft_input_ids", [-1], optional=True, ragged=True),
                  tensor("draft_logits", "FP32", [-1, -1], optional=True, ragged=True),
                  tensor("draft_acceptance_threshold", "FP32", optional=True),
                  ids("end_id", optional=True), ids("pad_id", optional=True),
                  ids("stop_words_list", [2, -1], optional=True), ids("bad_words_list", [2, -1], optional=True),
                  tensor("temperature", "FP32", optional=True), ids("runtime_top_k", optional=True),
                  tensor("runtime_top_p", "FP32", optional=True), tensor("seed", "UINT64", optional=True),
                  tensor("streaming", "BOOL", optional=True), tensor("return_perf_metrics", "BOOL", optional=True),
                  tensor("return_generation_logits", "BOOL", optional=True),
                  tensor("exclude_input_in_output", "BOOL", optional=True)],
        "output": [ids("output_ids", [-1, -1]), ids("sequence_length", [-1]),
                   tensor("generation_logits", "FP32", [-1, -1, -1]),
                   tensor("acceptance_rate", "FP32"), ids("total_accepted_draft_tokens"), ids("total_draft_tokens")],
        "instance_group": [{"count": 1, "kind": "KIND_CPU"}],
        "parameters": pbtxt.parameters(llm_parameters(values, draft=draft)),
    }


def _pre_post(name: str, values: dict[str, Any], pre: bool) -> dict[str, Any]:
    count = values["instance_count"]
    if pre:
        io = {"input": [tensor("QUERY", "BYTES", [1]), tensor("REQUEST_OUTPUT_LEN", "INT32", [1]),
                        tensor("BAD_WORDS_DICT", "BYTES", [-1], optional=True),
                        tensor("STOP_WORDS_DICT", "BYTES", [-1], optional=True),
                        tensor("END_ID", "INT32", [1], optional=True), tensor("PAD_ID", "INT32", [1], optional=True)],
              "output": [tensor("INPUT_ID", "INT32", [-1]), tensor("REQUEST_INPUT_LEN", "INT32", [1]),
                         tensor("BAD_WORDS_IDS", "INT32", [2, -1]), tensor("STOP_WORDS_IDS", "INT32", [2, -1]),
                         tensor("REQUEST_OUTPUT_LEN", "INT32", [-1]), tensor("OUT_END_ID", "INT32", [1]),
                         tensor("OUT_PAD_ID", "INT32", [1])]}
        params = {"tokenizer_dir": values["tokenizer_dir"], "add_special_tokens": False}
    else:
        io = {"input": [tensor("TOKENS_BATCH", "INT32", [-1, -1]), tensor("SEQUENCE_LENGTH", "INT32", [-1])],
              "output": [tensor("OUTPUT", "BYTES", [-1])]}
        params = {"tokenizer_dir": values["tokenizer_dir"], "skip_special_tokens": True}
    return {"name": name, "backend": "python", "max_batch_size": values["triton_max_batch_size"], **io,
            "instance_group": [{"count": count, "kind": "KIND_CPU"}], "parameters": pbtxt.parameters(params)}


def _front_io() -> dict[str, list[dict[str, Any]]]:
    """The tensorrtllm_backend request names the ensemble and the BLS accept (client.py adapts)."""
    return {"input": [tensor("text_input", "BYTES", [1]), tensor("max_tokens", "INT32", [1]),
                      tensor("bad_words", "BYTES", [-1], optional=True), tensor("stop_words", "BYTES", [-1], optional=True),
                      tensor("end_id", "INT32", [1], optional=True), tensor("pad_id", "INT32", [1], optional=True),
                      tensor("top_k", "INT32", [1], optional=True), tensor("top_p", "FP32", [1], optional=True),
                      tensor("temperature", "FP32", [1], optional=True), tensor("seed", "UINT64", [1], optional=True),
                      tensor("stream", "BOOL", [1], optional=True),
                      tensor("return_perf_metrics", "BOOL", [1], optional=True)],
            "output": [tensor("text_output", "BYTES", [-1]), tensor("acceptance_rate", "FP32", [1]),
                       tensor("total_accepted_draft_tokens", "INT32", [1]),
                       tensor("total_draft_tokens", "INT32", [1])]}


def _ensemble(values: dict[str, Any]) -> dict[str, Any]:
    pre = {"model_name": "preprocessing", "model_version": -1,
           "input_map": {"QUERY": "text_input", "REQUEST_OUTPUT_LEN": "max_tokens", "BAD_WORDS_DICT": "bad_words",
                         "STOP_WORDS_DICT": "stop_words", "END_ID": "end_id", "PAD_ID": "pad_id"},
           "output_map": {"INPUT_ID": "_INPUT_ID", "REQUEST_INPUT_LEN": "_REQUEST_INPUT_LEN",
                          "BAD_WORDS_IDS": "_BAD_WORDS_IDS", "STOP_WORDS_IDS": "_STOP_WORDS_IDS",
                          "REQUEST_OUTPUT_LEN": "_REQUEST_OUTPUT_LEN", "OUT_END_ID": "_END_ID", "OUT_PAD_ID": "_PAD_ID"}}
    llm = {"model_name": "tensorrt_llm", "model_version": -1,
           "input_map": {"input_ids": "_INPUT_ID", "input_lengths": "_REQUEST_INPUT_LEN",
                         "request_output_len": "_REQUEST_OUTPUT_LEN", "end_id": "_END_ID", "pad_id": "_PAD_ID",
                         "stop_words_list": "_STOP_WORDS_IDS", "bad_words_list": "_BAD_WORDS_IDS",
                         "runtime_top_k": "top_k", "runtime_top_p": "top_p", "temperature": "temperature",
                         "seed": "seed", "streaming": "stream", "return_perf_metrics": "return_perf_metrics"},
           "output_map": {"output_ids": "_TOKENS_BATCH", "sequence_length": "_SEQUENCE_LENGTH",
                          "acceptance_rate": "acceptance_rate",
                          "total_accepted_draft_tokens": "total_accepted_draft_tokens",
                          "total_draft_tokens": "total_draft_tokens"}}
    post = {"model_name": "postprocessing", "model_version": -1,
            "input_map": {"TOKENS_BATCH": "_TOKENS_BATCH", "SEQUENCE_LENGTH": "_SEQUENCE_LENGTH"},
            "output_map": {"OUTPUT": "text_output"}}
    return {"name": "ensemble", "platform": "ensemble", "max_batch_size": values["triton_max_batch_size"],
            **_front_io(), "ensemble_scheduling": {"step": [pre, llm, post]}}


def _bls(values: dict[str, Any]) -> dict[str, Any]:
    io = _front_io()
    io["input"] += [tensor("num_draft_tokens", "INT32", [1], optional=True),
                    tensor("use_draft_logits", "BOOL", [1], optional=True)]
    return {"name": "tensorrt_llm_bls", "backend": "python", "max_batch_size": values["triton_max_batch_size"],
            "model_transaction_policy": {"decoupled": False}, **io,
            # Upstream: "set the number of model instances to the maximum batch size".
            "instance_group": [{"count": values["triton_max_batch_size"], "kind": "KIND_CPU"}],
            "parameters": pbtxt.parameters({"accumulate_tokens": False, "tensorrt_llm_model_name": "tensorrt_llm",
                                            "tensorrt_llm_draft_model_name": "tensorrt_llm_draft",
                                            "logits_datatype": "TYPE_FP32"})}


def model_configs(values: dict[str, Any]) -> dict[str, dict[str, Any]]:
    """Model name -> ModelConfig dict."""
    configs = {"ensemble": _ensemble(values), "preprocessing": _pre_post("preprocessing", values, True),
               "tensorrt_llm": _llm_model("tensorrt_llm", values, draft=False),
               "postprocessing": _pre_post("postprocessing", values, False)}
    if values["draft_target"]:
        configs["tensorrt_llm_draft"] = _llm_model("tensorrt_llm_draft", values, draft=True)
        configs["tensorrt_llm_bls"] = _bls(values)
    return configs


def fill_values(values: dict[str, Any], *, draft: bool = False) -> dict[str, Any]:
    """tensorrt_llm placeholders -> values, for upstream's fill_template.py (lists stay lists)."""
    params = llm_parameters(values, draft=draft)
    filled = {"triton_backend": "tensorrtllm", "triton_max_batch_size": values["triton_max_batch_size"],
              "decoupled_mode": values["decoupled_mode"], "engine_dir": params["gpt_model_path"],
              "batching_strategy": params["gpt_model_type"], "max_queue_size": 0,
              "max_queue_delay_microseconds": values["max_queue_delay_microseconds"], "logits_datatype": "TYPE_FP32",
              "tokenizer_dir": values["tokenizer_dir"]}
    for key, value in params.items():
        if key not in ("gpt_model_type", "gpt_model_path", "FORCE_CPU_ONLY_INPUT_TENSORS"):
            filled[key] = value
    filled["gpu_device_ids"] = values["gpu_device_ids"]
    return filled


def other_fill_values(values: dict[str, Any]) -> dict[str, dict[str, Any]]:
    """fill_template values for the other models' placeholders [BK@v0.19.0, reference §2.2]."""
    common = {"triton_max_batch_size": values["triton_max_batch_size"]}
    fills = {
        "preprocessing": {**common, "tokenizer_dir": values["tokenizer_dir"], "add_special_tokens": False,
                          "preprocessing_instance_count": values["instance_count"], "engine_dir": values["engine_dir"],
                          "max_queue_delay_microseconds": values["max_queue_delay_microseconds"], "max_queue_size": 0},
        "postprocessing": {**common, "tokenizer_dir": values["tokenizer_dir"], "skip_special_tokens": True,
                           "postprocessing_instance_count": values["instance_count"]},
        "ensemble": {**common, "logits_datatype": "TYPE_FP32"},
    }
    if values["draft_target"]:
        fills["tensorrt_llm_bls"] = {**common, "decoupled_mode": False, "accumulate_tokens": False,
                                     "bls_instance_count": values["triton_max_batch_size"],
                                     "logits_datatype": "TYPE_FP32", "tensorrt_llm_model_name": "tensorrt_llm",
                                     "tensorrt_llm_draft_model_name": "tensorrt_llm_draft"}
    return fills


def render(engine: dict[str, Any], spec: Any, engine_path: str, dest: Path, engine_dir: Path) -> list[Path]:
    values = plan(engine, spec, engine_path, engine_dir)
    written = []
    for name, config in model_configs(values).items():
        (dest / name / "1").mkdir(parents=True)
        path = dest / name / "config.pbtxt"
        path.write_text(pbtxt.render(config))
        written.append(path)
    fill = dest / "fill_template.sh"
    lines = ["#!/usr/bin/env bash",
             "# Re-fill the container's own templates with the values trtspec rendered (optional):",
             "#   bash fill_template.sh <new repository dir>",
             f"set -euo pipefail\ncp -r {CONTAINER_MODELS}/. \"$1\"/"]
    targets = [("tensorrt_llm", fill_values(values))]
    if values["draft_target"]:
        # Upstream: clone tensorrt_llm as tensorrt_llm_draft and rewrite its name (reference §6).
        lines.append('cp -r "$1"/tensorrt_llm/. "$1"/tensorrt_llm_draft/ && '
                     'sed -i \'s/^name: "tensorrt_llm"/name: "tensorrt_llm_draft"/\' "$1"/tensorrt_llm_draft/config.pbtxt')
        targets.append(("tensorrt_llm_draft", fill_values(values, draft=True)))
    targets += list(other_fill_values(values).items())
    for model, fills in targets:
        lines.append(f'python3 /app/tools/fill_template.py -i "$1"/{model}/config.pbtxt '
                     f"'{pbtxt.fill_template_args(fills)}'")
    fill.write_text("\n".join(lines) + "\n")
    return written + [fill]
