"""The trtllm backend: an LLM-API package (PyTorch backend of TensorRT-LLM).

Artifacts: the (FP8) HF target checkpoint under `target/`, the draft or EAGLE-3 head under
`draft/`, and `llm_api_options.yaml`: the keyword arguments of `tensorrt_llm.LLM(...)` (what
`trtllm-serve --extra_llm_api_options` and Triton's `all_models/llmapi` model.yaml take). Every key
is checked against upstream.llm_api_fields() before it is written. engine.json carries the same
options with paths relative to the engine directory, for the repository renderer.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from trtspec.builders import upstream
from trtspec.errors import ToolMissingError, TrtSpecError


def llm_api_options(spec: Any, *, target: str, draft: str | None) -> dict[str, Any]:
    """LLM() keyword arguments for the spec; `target`/`draft` are the paths to write for them."""
    b, s, q = spec.build, spec.speculative, spec.quantization
    kv_cache: dict[str, Any] = {
        "free_gpu_memory_fraction": b.free_gpu_memory_fraction,
        # ModelOpt's EAGLE-3 deployment recipe turns block reuse off; other modes keep the default (on).
        "enable_block_reuse": s.mode != "eagle3",
        "tokens_per_block": b.tokens_per_block,
    }
    if q.fp8_kv_cache:
        kv_cache["dtype"] = "fp8"
    options: dict[str, Any] = {
        "model": target,
        "backend": "pytorch",
        "tensor_parallel_size": b.tp_size,
        "pipeline_parallel_size": b.pp_size,
        "max_batch_size": b.max_batch_size,
        "max_num_tokens": max(b.max_num_tokens, b.max_batch_size * (s.max_draft_len + 1)),
        "max_seq_len": b.max_seq_len,
        "trust_remote_code": spec.model.trust_remote_code,
        "kv_cache_config": kv_cache,
        "cuda_graph_config": {"max_batch_size": b.max_batch_size, "enable_padding": True},
    }
    decoding_type = upstream.DECODING_TYPES[s.mode]
    if decoding_type == "Eagle3" and "Eagle3" not in upstream.llm_api_fields()["decoding"]:
        decoding_type = "Eagle"  # an installed release older than Eagle3DecodingConfig
    if decoding_type is not None:
        speculative: dict[str, Any] = {"decoding_type": decoding_type, "max_draft_len": s.max_draft_len}
        if decoding_type == "NGram":
            speculative.update(max_matching_ngram_size=s.ngram_max, is_keep_all=True, is_use_oldest=True,
                               is_public_pool=False)
        else:
            speculative["speculative_model_dir"] = draft
        options["speculative_config"] = speculative
        # "Two-model based speculation implementations do not support overlap scheduler" (TRT-LLM docs).
        options["disable_overlap_scheduler"] = True
    return options


def checked_options(spec: Any, *, target: str, draft: str | None) -> dict[str, Any]:
    """llm_api_options() with every key checked against the pinned (or introspected) field lists."""
    options = llm_api_options(spec, target=target, draft=draft)
    upstream.check_llm_api_options(options)
    return options


def render_yaml(options: dict[str, Any]) -> str:
    import yaml

    header = (f"# LLM-API options written by trtspec for TensorRT-LLM {upstream.PINNED_TRTLLM_VERSION}\n"
              f"# (field names: {upstream.LLM_API_SOURCE}).\n"
              "# Use: trtllm-serve <model> --backend pytorch --extra_llm_api_options llm_api_options.yaml\n")
    return header + yaml.safe_dump(options, sort_keys=False)


def verify(engine_dir: Path, options: dict[str, Any]) -> dict[str, Any]:
    """Load the LLM with these options and generate once (needs tensorrt_llm and a GPU)."""
    try:
        from tensorrt_llm import LLM, SamplingParams
    except Exception:
        raise ToolMissingError("--verify needs tensorrt_llm, which is not importable here",
                               fix=f"run it inside {upstream.CONTAINER}") from None
    kwargs = {k: v for k, v in options.items() if k != "model"}
    if kwargs.get("speculative_config", {}).get("speculative_model_dir"):
        # engine.json paths are relative to the engine directory, not to the current directory
        draft = str(engine_dir / kwargs["speculative_config"]["speculative_model_dir"])
        kwargs["speculative_config"] = {**kwargs["speculative_config"], "speculative_model_dir": draft}
    try:
        from tensorrt_llm.llmapi.llm_args import DecodingBaseConfig

        if kwargs.get("speculative_config") and hasattr(DecodingBaseConfig, "from_dict"):
            # releases whose LLM() does not coerce a dict into the right *DecodingConfig class
            kwargs["speculative_config"] = DecodingBaseConfig.from_dict(kwargs["speculative_config"])
        llm = LLM(model=str(engine_dir / options["model"]), **kwargs)
        output = llm.generate(["The capital of France is"], SamplingParams(max_tokens=8))[0]
    except Exception as error:
        raise TrtSpecError(f"--verify: TensorRT-LLM could not load or run the package ({error})",
                           fix="check llm_api_options.yaml against the installed TensorRT-LLM") from None
    return {"status": "ok", "text": output.outputs[0].text}
