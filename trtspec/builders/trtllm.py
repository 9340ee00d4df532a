"""The trtllm backend: an LLM-API package (PyTorch backend of TensorRT-LLM).

Artifacts: the (FP8) HF target checkpoint under `target/`, the draft model or the EAGLE-3 head
under `draft/` (the head under the tensor names the release binds: eagle3_head.py), and
`llm_api_options.yaml`: the keyword arguments of `tensorrt_llm.LLM(...)` (what
`trtllm-serve --extra_llm_api_options` and Triton's `all_models/llmapi` model.yaml take). Every
key, and the decoding_type, comes from the contract of `build.trtllm_version` and is checked
against it (upstream.check_llm_api_options) before it is written. engine.json carries the same
options with paths relative to the engine directory, for the repository renderer.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from trtspec import modes
from trtspec.builders import upstream
from trtspec.builders.contracts import Contract
from trtspec.errors import ToolMissingError, TrtSpecError

# What TensorRT-LLM uses when kv_cache_config.tokens_per_block is not written (the 1.1 contract
# has no such field): PluginConfig.tokens_per_block defaults to 32 (reference section 1.2).
DEFAULT_TOKENS_PER_BLOCK = 32


def llm_api_options(spec: Any, contract: Contract, *, target: str, draft: str | None,
                    layers_to_capture: list[int] | None = None, tp_size: int | None = None) -> dict[str, Any]:
    """LLM() keyword arguments for the spec; `target`/`draft` are the paths to write for them;
    `tp_size` overrides build.tp_size (a DynamoGraphDeployment spread over nodes)."""
    b, s, q = spec.build, spec.speculative, spec.quantization
    kv_cache: dict[str, Any] = {
        "free_gpu_memory_fraction": b.free_gpu_memory_fraction,
        # ModelOpt's EAGLE-3 deployment recipe turns block reuse off; other modes keep the default (on).
        "enable_block_reuse": s.mode != "eagle3",
    }
    if contract.has_field("kv_cache_config", "tokens_per_block"):
        kv_cache["tokens_per_block"] = b.tokens_per_block
    elif b.tokens_per_block != DEFAULT_TOKENS_PER_BLOCK:
        raise TrtSpecError(f"build.tokens_per_block {b.tokens_per_block}: TensorRT-LLM {contract.version}'s "
                           f"kv_cache_config has no tokens_per_block (it uses {DEFAULT_TOKENS_PER_BLOCK})",
                           fix=f"set build.tokens_per_block: {DEFAULT_TOKENS_PER_BLOCK} or build.trtllm_version: 1.2.1")
    if q.fp8_kv_cache:
        kv_cache["dtype"] = "fp8"
    options: dict[str, Any] = {
        "model": target,
        "backend": "pytorch",
        "tensor_parallel_size": tp_size or b.tp_size,
        "pipeline_parallel_size": b.pp_size,
        "max_batch_size": b.max_batch_size,
        "max_num_tokens": max(b.max_num_tokens, b.max_batch_size * (s.draft_cap + 1)),
        "max_seq_len": b.max_seq_len,
        "trust_remote_code": spec.model.trust_remote_code,
        "kv_cache_config": kv_cache,
        "cuda_graph_config": {"max_batch_size": b.max_batch_size, "enable_padding": True},
    }
    # the 1.3 line (a Dynamo worker's --extra-engine-args) takes neither: dynamo.trtllm passes the
    # model as --model-path and runs the PyTorch flow, the only one left (contract llm_api.llm_args)
    options = {k: v for k, v in options.items() if k in contract.llm_api["llm_args"]}
    if b.guided_decoding_backend:
        options.update(guided_decoding(spec, contract))
    refuse_unmapped(spec, contract)
    decoding = contract.decoding(s.mode)
    if decoding is not None:
        # the mode's own cap where it has one (suffix: speculative.suffix.max_draft_len, SA's max_draft_len)
        speculative: dict[str, Any] = {"decoding_type": decoding["decoding_type"], "max_draft_len": s.draft_cap}
        if s.mode == "ngram":
            speculative.update(max_matching_ngram_size=s.ngram_max, is_keep_all=True, is_use_oldest=True,
                               is_public_pool=False)
        elif s.mode == "mtp":
            speculative.update(mtp_options(spec))
        elif s.mode == "suffix":
            speculative.update(suffix_options(spec))
        else:
            speculative[contract.llm_api["speculative_model_field"]] = draft
        if layers_to_capture:
            speculative[contract.head["layers_to_capture_field"]] = list(layers_to_capture)
        if s.mode == "eagle3" and s.tree is not None and tree_note(spec, contract) is None:
            # the release's PyTorch flow grows dynamic trees: its names (llm_args.py EagleDecodingConfig)
            speculative.update(max_draft_len=s.tree.depth, use_dynamic_tree=True,
                               dynamic_tree_max_topK=s.tree.topk, max_total_draft_tokens=s.tree.num_draft_tokens)
        speculative.update(schedule_and_gate(spec, contract))
        options["speculative_config"] = speculative
        # "Two-model based speculation implementations do not support overlap scheduler" (TRT-LLM docs).
        options["disable_overlap_scheduler"] = True
    return options


def mtp_options(spec: Any) -> dict[str, Any]:
    """MTPDecodingConfig's fields for the spec (contract llm_api.decoding.mtp): no draft directory,
    the MTP modules are the target's own. num_nextn_predict_layers is the release's draft length
    (from_dict sets max_draft_len to it; a one-module checkpoint runs MTP Eagle, the module reused
    that many times), so it is speculative.max_draft_len, and max_draft_len is written equal to it.
    Relaxed acceptance stays off, its release defaults written out: it accepts a thinking-phase draft within relaxed_topk / relaxed_delta of the
    target's top token, which is not the target's own output, and trtspec promises that."""
    s = spec.speculative
    if s.mtp.num_layers and s.mtp.num_layers > 1 and s.mtp.num_layers != s.max_draft_len:
        raise TrtSpecError(f"speculative.mtp.num_layers {s.mtp.num_layers}: TensorRT-LLM runs several MTP modules "
                           f"one per draft position (MTP vanilla), so max_draft_len must be {s.mtp.num_layers} "
                           f"(got {s.max_draft_len})", fix=f"set speculative.max_draft_len: {s.mtp.num_layers}")
    return {"num_nextn_predict_layers": s.max_draft_len, "max_draft_len": s.max_draft_len,
            "use_relaxed_acceptance_for_thinking": False, "relaxed_topk": 1, "relaxed_delta": 0.0}


def guided_decoding(spec: Any, contract: Contract) -> dict[str, Any]:
    """{guided_decoding_backend: ...} where the release's contract has read the option and lets the
    spec's mode use it (contract llm_api.guided_decoding: values, speculative modes, sources);
    one line otherwise."""
    value, mode = spec.build.guided_decoding_backend, spec.speculative.mode
    mode = "draft-target" if mode == "layerskip" else mode  # served as draft-target
    guided = contract.llm_api.get("guided_decoding") or {}
    if not guided or guided["option"] not in contract.llm_api["llm_args"]:
        raise TrtSpecError(f"build.guided_decoding_backend {value}: trtspec's contract for TensorRT-LLM "
                           f"{contract.version} has not read a guided-decoding option",
                           fix="leave it empty for this release, or use build.trtllm_version: 1.2.1 (Triton)")
    if value not in guided["values"]:
        raise TrtSpecError(f"build.guided_decoding_backend {value}: TensorRT-LLM {contract.version} takes "
                           f"{' or '.join(guided['values'])} ({guided['source']})", fix="use one of those")
    if mode not in guided["modes"]:
        raise TrtSpecError(f"build.guided_decoding_backend with speculative.mode {mode}: TensorRT-LLM "
                           f"{contract.version} does not combine them ({guided['modes_source']})",
                           fix="leave build.guided_decoding_backend empty, or use another mode")
    return {guided["option"]: value}


def suffix_options(spec: Any) -> dict[str, Any]:
    """SADecodingConfig's fields for mode suffix (contract llm_api.decoding.suffix, the 1.3 line):
    the suffix automaton's longest match (max_matching_ngram_size -1, as trtspec's suffix tries
    match the longest suffix), and the global pool (every active and recently completed request's
    automaton searched) where the spec keeps earlier responses. The release drafts chains only."""
    s = spec.speculative
    if s.suffix.tree:
        raise TrtSpecError("speculative.suffix.tree: TensorRT-LLM's suffix automaton (SADecodingConfig) drafts "
                           "chains; it has no tree setting", fix="set speculative.suffix.tree: false for this target")
    return {"max_matching_ngram_size": -1, "enable_global_pool": s.suffix.max_cached_requests > 0}


def refuse_unmapped(spec: Any, contract: Contract) -> None:
    """One line where the release has no speculative config for the spec's mode (its contract has
    no decoding entry), naming the releases trtspec knows that have one, instead of writing
    options without speculation."""
    from trtspec.builders import contracts
    from trtspec.errors import IncompatibleArtifactError

    mode = spec.speculative.mode
    mode = "draft-target" if mode == "layerskip" else mode  # served as draft-target (builders: written_spec)
    if mode == "none" or contract.decoding(mode) is not None:
        return
    having = [(v, contracts.load(v)) for v in contracts.all_versions() if v != contract.version]
    others = [f"TensorRT-LLM {v} ({c.decoding(mode)['class']}, decoding_type {c.decoding(mode)['decoding_type']}"
              f"{', in Dynamo ' + c.runtime['dynamo'] if c.runtime else ''})" for v, c in having if c.decoding(mode)]
    where = f"; {' and '.join(others)} has it" if others else ""
    dynamo = any(c.runtime for v, c in having if c.decoding(mode))
    fix = ("deploy it with --target dynamo-k8s (build the target with speculative.mode none and pass that engine "
           "with --engine), or use build.backend: cpu") if dynamo else "use another speculative.mode, or build.backend: cpu"
    raise IncompatibleArtifactError(f"speculative.mode {mode}: TensorRT-LLM {contract.version} has no speculative "
                                    f"config for it{where}", fix=fix)


def refuse_without_mtp(target: Path) -> None:
    """One line where the target checkpoint the package serves carries no MTP module (an FP8 export
    made through transformers drops them, as transformers' loader does)."""
    from trtspec.errors import IncompatibleArtifactError
    from trtspec.runtime.drafters.mtp import MISSING_FIX, mtp_weights_missing

    missing = mtp_weights_missing(target)
    if missing:
        raise IncompatibleArtifactError(missing, fix=MISSING_FIX)


def schedule_and_gate(spec: Any, contract: Contract) -> dict[str, Any]:
    """The release's draft_len_schedule and acceptance gate for the spec (contract llm_api.schedule
    and .gate: which modes they serve); {} where the release or the mode has neither.

    speculative.draft_len_schedule rows [batch_size, draft_len] become {batch_size: draft_len},
    with {1: max_draft_len} and no length above max_draft_len, as the release's validator wants.
    """
    s, api = spec.speculative, contract.llm_api
    out: dict[str, Any] = {}
    schedule, gate = api.get("schedule"), api.get("gate")
    if schedule and s.mode in schedule["modes"] and s.draft_len_schedule:
        if any(len(row) != 2 for row in s.draft_len_schedule):
            raise TrtSpecError("speculative.draft_len_schedule: tree rows are a cpu-engine setting; TensorRT-LLM's "
                               "draft_len_schedule takes [batch_size, draft_len] rows",
                               fix="re-run `trtspec tune --url ...` against the GPU server (chains only)")
        cap, field = s.draft_cap, modes.draft_cap_field(s.mode)
        table = {1: cap} | {int(b): int(k) for b, k in s.draft_len_schedule}
        if table[1] != cap or max(table.values()) > cap:
            raise TrtSpecError(
                f"speculative.draft_len_schedule {s.draft_len_schedule}: TensorRT-LLM {contract.version} requires "
                f"the length at batch size 1 to equal max_draft_len ({cap}) and none above it "
                f"({schedule['source']})", fix=f"set {field} to the schedule's length at batch size 1")
        table = dict(sorted(table.items()))
        if schedule.get("keys") == "last_batch_size":
            table = last_batch_size_keys(table, spec.build.max_batch_size)
        out[schedule["field"]] = table
    threshold = s.acceptance_rate_threshold if (gate or {}).get("threshold_kind") == "rate" \
        else s.acceptance_length_threshold
    if gate and s.mode in gate["modes"] and s.acceptance_window and threshold:
        out[gate["window"]] = s.acceptance_window
        out[gate["threshold"]] = threshold
    return out


def last_batch_size_keys(table: dict[int, int], max_batch_size: int) -> dict[int, int]:
    """{first batch size: draft_len} ("from that many on", trtspec's rows and 1.2.1's keys) as the
    1.3 line's {last batch size: draft_len} (contract llm_api.schedule.read: {4: 4, 8: 2, 32: 1}
    drafts 4 at 1-4 sequences, 2 at 5-8, 1 at 9-32 and nothing above 32). The last range ends at
    build.max_batch_size; a trailing 0 is the release's implicit "off above the largest key"."""
    firsts = sorted(table)
    out = {nxt - 1: table[first] for first, nxt in zip(firsts, firsts[1:], strict=False)}
    if table[firsts[-1]] and firsts[-1] <= max_batch_size:
        out[max_batch_size] = table[firsts[-1]]
    return out


def tree_note(spec: Any, contract: Contract) -> str | None:
    """Why a spec's dynamic tree (speculative.tree) is written as a chain for this release, in one
    line; None when there is no tree or the release's LLM API grows dynamic trees (contract data)."""
    s = spec.speculative
    chain = f"speculative.tree written as a chain of max_draft_len {s.max_draft_len}"
    if s.tree is not None and s.mode == "draft-target":  # both GPU backends
        return f"{chain}: TensorRT-LLM drafts chains from a draft model (no tree setting for draft-target)"
    support = (contract.decoding("eagle3") or {}).get("dynamic_tree") or {}
    if s.mode != "eagle3" or s.tree is None or support.get("llm_api"):
        return None
    return f"{chain}: {support.get('why', 'no dynamic tree in this release')}"


def checked_options(spec: Any, contract: Contract, **paths: Any) -> dict[str, Any]:
    """llm_api_options() with every key checked against the contract (or the installed release)."""
    options = llm_api_options(spec, contract, **paths)
    upstream.check_llm_api_options(options, contract)
    return options


def header(contract: Contract) -> str:
    """The comment block every file written for a release starts with: release, container, source."""
    return (f"# TensorRT-LLM {contract.version}, as in {contract.image}\n"
            f"# (names checked against trtspec's contract for TensorRT-LLM {contract.version}: llm_args.py in\n"
            f"# {contract.llm_api['read_at']}; contract_data/trtllm-{contract.version}.json).\n")


def render_yaml(options: dict[str, Any], contract: Contract) -> str:
    import yaml

    return (f"# LLM-API options written by trtspec for\n{header(contract)}"
            "# Use: trtllm-serve <model> --backend pytorch --extra_llm_api_options llm_api_options.yaml\n"
            + yaml.safe_dump(options, sort_keys=False))


def verify(engine_dir: Path, options: dict[str, Any], contract: Contract) -> dict[str, Any]:
    """Load the LLM with these options and generate once (needs tensorrt_llm and a GPU).

    The options go through TensorRT-LLM's own YAML path (update_llm_args_with_extra_dict), as
    Triton's llmapi model.py sends model.yaml, so --verify fails where the server would.
    """
    try:
        from tensorrt_llm import LLM, SamplingParams
        from tensorrt_llm.llmapi.llm_utils import update_llm_args_with_extra_dict
    except Exception:
        raise ToolMissingError("--verify needs tensorrt_llm, which is not importable here",
                               fix=f"run it inside {contract.image}") from None
    decoding = upstream.introspect_decoding(contract)
    kwargs = {k: v for k, v in options.items() if k != "model"}
    field = contract.llm_api["speculative_model_field"]
    if kwargs.get("speculative_config", {}).get(field):
        # engine.json paths are relative to the engine directory, not to the current directory
        kwargs["speculative_config"] = {**kwargs["speculative_config"],
                                        field: str(engine_dir / kwargs["speculative_config"][field])}
    try:
        llm = LLM(model=str(engine_dir / options["model"]), **update_llm_args_with_extra_dict({}, kwargs))
        output = llm.generate(["The capital of France is"], SamplingParams(max_tokens=8))[0]
    except Exception as error:
        raise TrtSpecError(f"--verify: TensorRT-LLM could not load or run the package ({error})",
                           fix="check llm_api_options.yaml against the installed TensorRT-LLM") from None
    return {"status": "ok", "text": output.outputs[0].text, "decoding": decoding}
