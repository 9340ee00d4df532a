"""The trtllm-engine backend's repository: upstream's own `inflight_batcher_llm`, filled by trtspec.

trtspec writes no config.pbtxt for this backend. In the container, `fill_template.sh` copies the
whole `/app/all_models/inflight_batcher_llm` tree (every model directory, the BLS's `1/lib/`
included), derives `tensorrt_llm_draft` from `tensorrt_llm` the way upstream's draft-target README
does (copy, rename), and runs `/app/tools/fill_template.py` on each model with the key:value list
trtspec plans (`fills()`; also written as fills.json). Every placeholder gets a value: a data type
where the field is one, `""` where upstream reads the parameter as unset (UNSET says why), so
no `${...}` is left; the script refuses to start the server if one is.

Before anything is written, the lists are checked against the contract of the engine's
TensorRT-LLM release (trtllm_engine_contract.py): applied to upstream's templates they must
declare every parameter, input and output upstream's Python models read or send, and leave no
placeholder. Models: ensemble -> preprocessing -> tensorrt_llm (C++ `tensorrtllm` backend,
`inflight_fused_batching`) -> postprocessing, and tensorrt_llm_bls beside it (draft-target runs
its draft/verify loop: non-streaming, one request per call, as upstream).

Multi-GPU, as tensorrtllm_backend docs/llama_multi_instance.md describes it: draft-target (two
TensorRT-LLM models) runs in orchestrator mode, one server whose backend spawns each engine's
workers on the GPUs its `gpu_device_ids` names (trtspec.serve.launch sets TRTLLM_ORCHESTRATOR); a
single engine with tp*pp > 1 runs in leader mode (mpirun, one server per rank). Two engines on
the same GPUs get their KV pools as `max_tokens_in_paged_kv_cache` from the memory plan, so the
split holds whichever engine loads first; a free-memory fraction alone would depend on the order.
"""

from __future__ import annotations

import json
from pathlib import Path, PurePosixPath
from typing import Any

from trtspec.errors import IncompatibleArtifactError
from trtspec.repository import pbtxt
from trtspec.repository import trtllm_engine_contract as contract

APP = "/app"                                           # where the trtllm containers keep upstream's tree
CONTAINER_MODELS = f"{APP}/all_models/inflight_batcher_llm"
FILL_SCRIPT = "fill_template.sh"
FILLS_JSON = "fills.json"
FILLED_AT = "/tmp/trtspec-models"                      # where the container's start builds the repository

# Placeholders filled with "" because upstream reads an empty (or unset) parameter as "use the
# default": the C++ backend's GetParameter<T> fails to parse "" and takes its catch/default path
# (tensorrtllm_backend inflight_batcher_llm/src/model_instance_state.cc@c2e65b88, e.g. :86, :112,
# :144, :652), guided decoding is off when guided_decoding_backend is empty (:423), and the Python
# models treat '' like an unfilled '${...}' (tensorrt_llm_bls/1/model.py get_valid_param_value,
# preprocessing/1/model.py multimodal_model_path == "").
UNSET = {
    "cross_kv_cache_fraction": "encoder-decoder models only",
    "encoder_engine_dir": "encoder-decoder models only",
    "enable_trt_overlap": "deprecated, ignored by the backend",
    "guided_decoding_backend": "no guided decoding",
    "xgrammar_tokenizer_info_path": "no guided decoding",
    "kv_cache_host_memory_bytes": "no host KV offload",
    "kv_cache_onboard_blocks": "no host KV offload",
    "lookahead_ngram_size": "set only for mode lookahead (decoding_mode lookahead)",
    "lookahead_verification_set_size": "set only for mode lookahead (decoding_mode lookahead)",
    "lookahead_window_size": "set only for mode lookahead (decoding_mode lookahead)",
    "lora_cache_gpu_memory_fraction": "no LoRA", "lora_cache_host_memory_bytes": "no LoRA",
    "lora_cache_max_adapter_size": "no LoRA", "lora_cache_optimal_adapter_size": "no LoRA",
    "lora_prefetch_dir": "no LoRA",
    "max_attention_window_size": "full attention (engine default)",
    "medusa_choices": "set only for mode medusa (the engine's tree, brace syntax)",
    "eagle_choices": "EAGLE is refused on trtllm-engine (EAGLE-3 needs the LLM API)",
    "gpu_weights_percent": "weights stay on the GPU",
    "sink_token_length": "no attention sinks",
    "participant_ids": "orchestrator mode spawns each engine's workers; participant_ids are only for "
                       "--disable-spawn-processes (rank 0 the orchestrator)",
    "max_num_images": "text-only models", "multimodal_model_path": "text-only models",
    "multimodal_encoders_name": "text-only models",
}
# Data-type fields: upstream's own fill lines (tensorrtllm_backend docs/baichuan.md@r25.12:45,47).
DATA_TYPES = {"logits_datatype": "TYPE_FP32", "encoder_input_features_data_type": "TYPE_FP16",
              "prompt_embedding_table_data_type": "TYPE_FP16"}


def plan(engine: dict[str, Any], spec: Any, engine_path: str, engine_dir: Path) -> dict[str, Any]:
    """Every value the configs need, derived from engine.json and the spec."""
    section = engine.get("trtllm_engine") or {}
    build = engine["build_config"]
    root = PurePosixPath(engine_path)
    draft_target = engine["mode"] == "draft-target"
    if engine["mode"] not in ("draft-target", "lookahead", "medusa", "none"):
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
        "tensorrt_llm_version": section.get("tensorrt_llm_version") or spec.build.trtllm_version,
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
        "lookahead": section.get("lookahead"),  # {window_size, ngram_size, verification_set_size} or None
        "medusa_choices": medusa_braces(_medusa_tree(engine, section)) if engine["mode"] == "medusa" else None,
    }


def _medusa_tree(engine: dict[str, Any], section: dict[str, Any]) -> list[list[int]]:
    if not section.get("medusa_choices"):
        raise IncompatibleArtifactError(f"engine {engine.get('name')}: engine.json has no medusa_choices",
                                        fix="rebuild it with this trtspec (`trtspec build --force`)")
    return section["medusa_choices"]


def medusa_braces(choices: list[list[int]]) -> str:
    """Triton's medusa_choices syntax, "{0}, {0, 0}, {1}" (tensorrtllm_backend docs/model_config.md@v0.19.0
    L178-182: "in the format of e.g. "{0, 0, 0}, {0, 1}""), unlike the CLI's Python lists."""
    return ", ".join("{" + ", ".join(str(int(i)) for i in path) + "}" for path in choices)


def multi_gpu_mode(draft_target: bool, world: int) -> str:
    """orchestrator (several TensorRT-LLM models), leader (one model on several GPUs) or single."""
    if draft_target:
        return "orchestrator"
    return "leader" if world > 1 else "single"


def models(values: dict[str, Any]) -> list[str]:
    """The models the container serves, in fill order: upstream's five, plus the draft's copy."""
    draft = ["tensorrt_llm_draft"] if values["draft_target"] else []
    return ["tensorrt_llm", *draft, "preprocessing", "postprocessing", "ensemble", "tensorrt_llm_bls"]


def _llm_fills(values: dict[str, Any], *, draft: bool) -> dict[str, Any]:
    max_tokens = values["max_tokens_in_paged_kv_cache"][1 if draft else 0]
    return {
        "triton_backend": "tensorrtllm", "triton_max_batch_size": values["triton_max_batch_size"],
        "decoupled_mode": values["decoupled_mode"],
        "max_queue_delay_microseconds": values["max_queue_delay_microseconds"], "max_queue_size": 0,
        "engine_dir": values["draft_engine_dir" if draft else "engine_dir"],
        "batching_strategy": "inflight_fused_batching", "max_beam_width": 1,
        "batch_scheduler_policy": "guaranteed_no_evict",
        "kv_cache_free_gpu_mem_fraction": values["kv_cache_free_gpu_mem_fraction"],
        # "If both max_tokens and free_gpu_memory_fraction are set, the minimum is used": the planned
        # token count wins when the plan holds, whichever engine loads first. Unset for one engine.
        "max_tokens_in_paged_kv_cache": max_tokens or "",
        "enable_kv_cache_reuse": True, "enable_chunked_context": False, "normalize_log_probs": True,
        # The 1.1-era BLS decoder takes output_ids as prompt + new tokens (lib/decode.py@c2e65b88:336,
        # :351 slice the draft by the prompt length), so draft-target keeps the input in the output,
        # as upstream's draft-target README fills it (exclude_input_in_output:False).
        "exclude_input_in_output": not values["draft_target"],
        "cancellation_check_period_ms": 100, "stats_check_period_ms": 100,
        "iter_stats_max_iterations": 1000, "request_stats_max_iterations": 0,
        "decoding_mode": values["decoding_mode"], "multi_block_mode": True,
        "enable_context_fmha_fp32_acc": False, "cuda_graph_mode": False, "cuda_graph_cache_size": 0,
        "speculative_decoding_fast_logits": False,
        "gpu_device_ids": values["gpu_device_ids"], "num_nodes": 1,
        "tokenizer_dir": values["tokenizer_dir"],
        # model-level (W, N, G), read under decoding_mode lookahead (config.pbtxt lookahead_*)
        **({f"lookahead_{key}": value for key, value in values["lookahead"].items()}
           if values.get("lookahead") and not draft else {}),
        # the engine's tree; without it the backend only warns and takes mc_sim_7b_63 (model_instance_state.cc)
        **({"medusa_choices": values["medusa_choices"]} if values.get("medusa_choices") and not draft else {}),
    }


def fills(values: dict[str, Any], version: str) -> dict[str, dict[str, Any]]:
    """model -> {placeholder: value} for every placeholder of upstream's template of that model."""
    count = values["instance_count"]
    batch = values["triton_max_batch_size"]
    planned = {
        "tensorrt_llm": _llm_fills(values, draft=False),
        "tensorrt_llm_draft": _llm_fills(values, draft=True),
        "preprocessing": {"triton_max_batch_size": batch, "tokenizer_dir": values["tokenizer_dir"],
                          "add_special_tokens": False, "preprocessing_instance_count": count,
                          "engine_dir": values["engine_dir"], "max_queue_size": 0,
                          "max_queue_delay_microseconds": values["max_queue_delay_microseconds"]},
        "postprocessing": {"triton_max_batch_size": batch, "tokenizer_dir": values["tokenizer_dir"],
                           "skip_special_tokens": True, "postprocessing_instance_count": count},
        "ensemble": {"triton_max_batch_size": batch},
        # Upstream: "set the number of model instances to the maximum batch size".
        "tensorrt_llm_bls": {"triton_max_batch_size": batch, "decoupled_mode": values["decoupled_mode"],
                             "accumulate_tokens": False, "bls_instance_count": batch,
                             "tensorrt_llm_model_name": "tensorrt_llm",
                             "tensorrt_llm_draft_model_name": "tensorrt_llm_draft" if values["draft_target"] else ""},
    }
    sec = contract.section(version)
    result = {}
    for model in models(values):
        wanted = planned[model]
        keys = contract.placeholders(sec, model)
        unknown = sorted(set(wanted) - set(keys))
        if unknown:
            raise IncompatibleArtifactError(f"{model}: {', '.join(unknown)} not a placeholder of upstream's template "
                                            f"(contract {version})", fix="this is a trtspec bug; report it")
        missing = sorted(set(keys) - set(wanted) - set(DATA_TYPES) - set(UNSET))
        if missing:
            raise IncompatibleArtifactError(f"{model}: no value planned for {', '.join(missing)} (contract {version})",
                                            fix="this is a trtspec bug; report it")
        result[model] = {key: wanted[key] if key in wanted else DATA_TYPES.get(key, "") for key in keys}
    return result


def check(fill_lists: dict[str, dict[str, Any]], version: str) -> None:
    """The filled templates declare every name upstream's models read, and parse as ModelConfig."""
    sec = contract.section(version)
    configs = contract.filled(sec, fill_lists)
    found = contract.problems(sec, configs)
    if found:
        raise IncompatibleArtifactError(f"trtllm-engine repository for TensorRT-LLM {version}: {found[0]}"
                                        + (f" (and {len(found) - 1} more)" if len(found) > 1 else ""),
                                        fix="this is a trtspec bug; report it with the TensorRT-LLM version")
    for config in configs.values():
        pbtxt.to_message(config)


def fill_script(fill_lists: dict[str, dict[str, Any]]) -> str:
    """The shell the container runs before tritonserver (see the module docstring)."""
    lines = ["#!/usr/bin/env bash",
             "# Builds the model repository from the container's own inflight_batcher_llm tree:",
             "#   bash fill_template.sh <new repository dir>     (APP=<dir> for another tree than /app)",
             "set -euo pipefail",
             f'APP="${{APP:-{APP}}}"',
             'rm -rf "$1" && mkdir -p "$1"',
             '# whole model directories, lib/ of the BLS included',
             'cp -r "$APP"/all_models/inflight_batcher_llm/. "$1"/']
    if "tensorrt_llm_draft" in fill_lists:
        lines.append('# the draft model is upstream\'s tensorrt_llm, copied and renamed (draft-target README)')
        lines.append('cp -r "$1"/tensorrt_llm "$1"/tensorrt_llm_draft && '
                     'sed -i \'s/^name: "tensorrt_llm"/name: "tensorrt_llm_draft"/\' "$1"/tensorrt_llm_draft/config.pbtxt')
    lines += ['for dir in "$1"/*/; do',
              '  case "$(basename "$dir")" in',
              f'    {"|".join(fill_lists)}) ;;',
              '    *) echo "fill_template.sh: removing $(basename "$dir") (trtspec does not serve it)"; rm -rf "$dir" ;;',
              '  esac',
              'done',
              '# fill_template.py asserts every key it is given is in the file: pass only the ones there',
              'fill() {',
              '  local file="$1" kv args=()',
              '  shift',
              '  for kv in "$@"; do grep -q "\\${${kv%%:*}}" "$file" && args+=("$kv"); done',
              '  [ ${#args[@]} -eq 0 ] || (IFS=,; python3 "$APP"/tools/fill_template.py -i "$file" "${args[*]}")',
              '}']
    for model, values in fill_lists.items():
        items = " ".join(_quote(f"{key}:{_escaped(value)}") for key, value in values.items())
        lines.append(f'fill "$1"/{model}/config.pbtxt {items}')
    lines += ['if grep -n \'\\${\' "$1"/*/config.pbtxt; then',
              '  echo "fill_template.sh: placeholders above have no value from trtspec; refusing to start" >&2',
              '  exit 1',
              'fi']
    return "\n".join(lines) + "\n"


def fill_calls(fill_lists: dict[str, dict[str, Any]], repository: str = FILLED_AT) -> list[str]:
    """The fill_template.py command per model, as the container runs it (the dry run prints them).

    fill_template.sh passes only the keys that occur in the container's template (the templates
    differ between releases); these lines show every key trtspec plans.
    """
    return [f"python3 {APP}/tools/fill_template.py -i {repository}/{model}/config.pbtxt "
            + _quote(",".join(f"{key}:{_escaped(value)}" for key, value in values.items()))
            for model, values in fill_lists.items()]


def _escaped(value: Any) -> str:
    """A value as fill_template.py's argument: booleans lower-case, list commas escaped (`0\\,1`).

    fill_template.py splits the list on commas and then each item on its colon, each split taking
    one level of backslash escapes, so a comma can be escaped and a colon cannot be carried at all.
    """
    text = contract.text(value) if not isinstance(value, list | tuple) else "\\,".join(str(v) for v in value)
    if ":" in text:
        raise IncompatibleArtifactError(f"{text!r} has a colon, which tools/fill_template.py cannot carry",
                                        fix="use a path without ':' for the engine and tokenizer directories")
    return text.replace(",", "\\,") if not isinstance(value, list | tuple) else text


def _quote(text: str) -> str:
    return "'" + text.replace("'", "'\\''") + "'"


def render(engine: dict[str, Any], spec: Any, engine_path: str, dest: Path, engine_dir: Path) -> list[Path]:
    """fill_template.sh and fills.json; nothing is written unless the contract check passes."""
    values = plan(engine, spec, engine_path, engine_dir)
    version = values["tensorrt_llm_version"]
    fill_lists = fills(values, version)
    check(fill_lists, version)
    script = dest / FILL_SCRIPT
    script.write_text(fill_script(fill_lists))
    data = dest / FILLS_JSON
    data.write_text(json.dumps({"tensorrt_llm_version": version, "container_models": CONTAINER_MODELS,
                                "fill_template": f"{APP}/tools/fill_template.py", "models": fill_lists},
                               indent=1, sort_keys=False) + "\n")
    return [script, data]
