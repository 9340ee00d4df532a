"""Pinned upstream names: LLM-API fields, trtllm-build and quantize.py flags, with their sources.

This is the ONE place trtspec keeps the names it writes into TensorRT-LLM artifacts. Every
rendered `llm_api_options.yaml` key and every `build.sh` flag is checked against these lists
(`check_llm_api_options`, `check_command`) before anything is written. When `tensorrt_llm` is
importable, `llm_api_fields()` reads the field names from its pydantic `llmapi` classes instead,
so a newer or older release is checked against itself, not against this file.

Sources (read 2026-11; see ../shared/reference/trtllm-triton-modelopt.md §1-3):
- LLM API: NVIDIA/TensorRT-LLM `tensorrt_llm/llmapi/llm_args.py`, 1.3-era (the version that has
  `Eagle3DecodingConfig.decoding_type = "Eagle3"`, `DraftTargetDecodingConfig.decoding_type =
  "Draft_Target"`, `DecodingBaseConfig.speculative_model` with alias `speculative_model_dir`,
  `KvCacheConfig.tokens_per_block`, `CudaGraphConfig.{batch_sizes,max_batch_size,enable_padding}`).
- trtllm-build: `tensorrt_llm/commands/build.py` + `tensorrt_llm/plugin/plugin.py` (pydantic
  PluginConfig), pinned to TensorRT-LLM <= 1.3.0rc20, the last release with the TensorRT backend.
- quantize.py: `examples/quantization/quantize.py` of the same release.
"""

from __future__ import annotations

from typing import Any

from trtspec.errors import IncompatibleArtifactError

# The TensorRT-LLM release both GPU backends are pinned to, and the Triton container that ships it.
PINNED_TRTLLM_VERSION = "1.3.0rc20"
CONTAINER = ("the TensorRT-LLM Triton container nvcr.io/nvidia/tritonserver:<yy.mm>-trtllm-python-py3 "
             "(TensorRT-LLM <= 1.3.0rc20; the project Dockerfile uses 25.12)")
LLM_API_SOURCE = "NVIDIA/TensorRT-LLM tensorrt_llm/llmapi/llm_args.py (1.2/1.3-era)"
TRTLLM_BUILD_SOURCE = "NVIDIA/TensorRT-LLM tensorrt_llm/commands/build.py + plugin/plugin.py (<= 1.3.0rc20)"
QUANTIZE_SOURCE = "NVIDIA/TensorRT-LLM examples/quantization/quantize.py (<= 1.3.0rc20)"

# Top-level LLM() / LlmArgs fields trtspec writes (BaseLlmArgs + TorchLlmArgs).
LLM_ARGS_FIELDS = frozenset({
    "model", "backend", "dtype", "trust_remote_code", "tensor_parallel_size", "pipeline_parallel_size",
    "max_batch_size", "max_num_tokens", "max_seq_len", "kv_cache_config", "speculative_config",
    "cuda_graph_config", "disable_overlap_scheduler", "enable_chunked_prefill",
})
KV_CACHE_CONFIG_FIELDS = frozenset({
    "enable_block_reuse", "max_tokens", "free_gpu_memory_fraction", "dtype", "tokens_per_block",
    "enable_partial_reuse", "host_cache_size",
})
CUDA_GRAPH_CONFIG_FIELDS = frozenset({"batch_sizes", "max_batch_size", "enable_padding"})
# speculative_model_dir is what 1.0/1.1 call it; later releases name it speculative_model and keep
# speculative_model_dir as a validation alias, so trtspec writes the old name, accepted by both.
_DECODING_BASE = {"decoding_type", "max_draft_len", "max_total_draft_tokens", "speculative_model",
                  "speculative_model_dir"}
# decoding_type value -> the fields its config class accepts.
DECODING_CONFIG_FIELDS: dict[str, frozenset[str]] = {
    "Eagle3": frozenset(_DECODING_BASE | {"eagle_choices", "eagle3_one_model", "eagle3_layers_to_capture",
                                          "greedy_sampling", "posterior_threshold", "use_dynamic_tree"}),
    "Draft_Target": frozenset(_DECODING_BASE),
    "NGram": frozenset(_DECODING_BASE | {"max_matching_ngram_size", "is_keep_all", "is_use_oldest",
                                         "is_public_pool"}),
}
# trtspec mode -> LLM-API decoding_type (None: no speculative_config).
DECODING_TYPES: dict[str, str | None] = {"eagle3": "Eagle3", "draft-target": "Draft_Target",
                                         "ngram": "NGram", "none": None}
# LLM-API class name per decoding_type, for introspection.
_DECODING_CLASSES = {"Eagle3": "Eagle3DecodingConfig", "Draft_Target": "DraftTargetDecodingConfig",
                     "NGram": "NGramDecodingConfig"}

# trtllm-build flags trtspec may emit, with their allowed values (None = any value / no value).
TRTLLM_BUILD_FLAGS: dict[str, frozenset[str] | None] = {
    "--checkpoint_dir": None, "--output_dir": None, "--max_batch_size": None, "--max_input_len": None,
    "--max_seq_len": None, "--max_num_tokens": None, "--max_beam_width": None,
    "--kv_cache_type": frozenset({"continuous", "paged", "disabled"}),
    "--tokens_per_block": None,
    "--speculative_decoding_mode": frozenset({"draft_tokens_external", "lookahead_decoding", "medusa",
                                              "explicit_draft_tokens", "eagle"}),
    "--max_draft_len": None,
    "--gemm_plugin": frozenset({"auto", "float16", "float32", "bfloat16", "int32", "fp8", "nvfp4", "disable"}),
    "--gpt_attention_plugin": frozenset({"auto", "float16", "float32", "bfloat16", "disable"}),
    "--use_paged_context_fmha": frozenset({"enable", "disable"}),
    "--use_fp8_context_fmha": frozenset({"enable", "disable"}),
    "--context_fmha": frozenset({"enable", "disable"}),
    "--remove_input_padding": frozenset({"enable", "disable"}),
    "--gather_generation_logits": None, "--gather_context_logits": None,
    "--logits_dtype": frozenset({"float16", "float32"}), "--workers": None,
}
TRTLLM_BUILD_BOOLEAN_FLAGS = frozenset({"--gather_generation_logits", "--gather_context_logits"})
QUANTIZE_FLAGS: dict[str, frozenset[str] | None] = {
    "--model_dir": None, "--output_dir": None,
    "--dtype": frozenset({"auto", "float16", "bfloat16", "float32"}),
    "--qformat": frozenset({"nvfp4", "fp8", "int8_sq", "int4_awq", "w4a8_awq", "int8_wo", "int4_wo", "full_prec"}),
    "--kv_cache_dtype": frozenset({"int8", "fp8"}),
    "--calib_size": None, "--tp_size": None, "--pp_size": None, "--device": frozenset({"cuda", "cpu"}),
}
# EAGLE engine limits asserted by tensorrt_llm/builder.py::build().
EAGLE_MAX_BATCH_SIZE = 512
EAGLE_MAX_DRAFT_LEN = 256


def tensorrt_llm_version() -> str | None:
    """The installed tensorrt_llm version, or None (the usual case off the GPU container)."""
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("tensorrt_llm")
    except PackageNotFoundError:
        return None


def llm_api_fields() -> dict[str, Any]:
    """Field names per LLM-API section: introspected from tensorrt_llm when importable, else pinned.

    Returns {"source": str, "llm_args": set, "kv_cache_config": set, "cuda_graph_config": set,
    "decoding": {decoding_type: set}}.
    """
    try:
        from tensorrt_llm import llmapi  # noqa: F401  (heavy; only in the GPU container)
        from tensorrt_llm.llmapi import llm_args
    except Exception:  # not installed, or the stub wheel without its NVIDIA index
        return {"source": f"pinned: {LLM_API_SOURCE}", "llm_args": LLM_ARGS_FIELDS,
                "kv_cache_config": KV_CACHE_CONFIG_FIELDS, "cuda_graph_config": CUDA_GRAPH_CONFIG_FIELDS,
                "decoding": DECODING_CONFIG_FIELDS}
    args_cls = getattr(llm_args, "TorchLlmArgs", None) or llm_args.LlmArgs
    decoding = {dt: _names(getattr(llm_args, cls)) for dt, cls in _DECODING_CLASSES.items()
                if hasattr(llm_args, cls)}
    if "Eagle3" not in decoding and hasattr(llm_args, "EagleDecodingConfig"):
        # Releases before Eagle3DecodingConfig serve EAGLE-3 heads with decoding_type "Eagle".
        decoding["Eagle"] = _names(llm_args.EagleDecodingConfig)
    return {"source": f"introspected: tensorrt_llm {tensorrt_llm_version()}",
            "llm_args": _names(args_cls), "kv_cache_config": _names(llm_args.KvCacheConfig),
            "cuda_graph_config": _names(llm_args.CudaGraphConfig), "decoding": decoding}


def _names(model_cls: Any) -> frozenset[str]:
    """A pydantic class's field names plus their validation aliases (AliasChoices included)."""
    names = set(model_cls.model_fields)
    for info in model_cls.model_fields.values():
        alias = info.validation_alias
        choices = getattr(alias, "choices", None)
        if isinstance(alias, str):
            names.add(alias)
        elif choices:
            names.update(c for c in choices if isinstance(c, str))
    return frozenset(names)


def check_llm_api_options(options: dict[str, Any], fields: dict[str, Any] | None = None) -> None:
    """Raise IncompatibleArtifactError naming the first key not in the (pinned or introspected) lists."""
    fields = fields or llm_api_fields()
    where = fields["source"]
    _check_keys("llm_api_options", options, fields["llm_args"], where)
    _check_keys("kv_cache_config", options.get("kv_cache_config") or {}, fields["kv_cache_config"], where)
    _check_keys("cuda_graph_config", options.get("cuda_graph_config") or {}, fields["cuda_graph_config"], where)
    speculative = options.get("speculative_config")
    if speculative:
        decoding_type = speculative.get("decoding_type")
        if decoding_type not in fields["decoding"]:
            raise IncompatibleArtifactError(f"speculative_config.decoding_type {decoding_type!r} is not one of "
                                            f"{sorted(fields['decoding'])} ({where})")
        _check_keys("speculative_config", speculative, fields["decoding"][decoding_type], where)


def _check_keys(section: str, data: dict[str, Any], allowed: frozenset[str], where: str) -> None:
    unknown = sorted(set(data) - set(allowed))
    if unknown:
        raise IncompatibleArtifactError(f"{section}: {', '.join(unknown)} not a field of the LLM API ({where})",
                                        fix="this is a trtspec bug; report it with the TensorRT-LLM version")


def check_command(command: list[str], allowed: dict[str, frozenset[str] | None],
                  booleans: frozenset[str] = frozenset()) -> None:
    """Check every `--flag value` of a command line against a pinned flag table.

    Raises IncompatibleArtifactError naming the unknown flag or the value outside its choices.
    """
    index = 0
    args = command[2:] if command[:1] == ["python3"] else command[1:]
    while index < len(args):
        flag = args[index]
        if flag not in allowed:
            raise IncompatibleArtifactError(f"{command[0]}: flag {flag} is not in the pinned list",
                                            fix="this is a trtspec bug; report it")
        if flag in booleans:
            index += 1
            continue
        value = args[index + 1]
        choices = allowed[flag]
        if choices is not None and value not in choices:
            raise IncompatibleArtifactError(f"{flag} {value}: must be one of {sorted(choices)}")
        index += 2
