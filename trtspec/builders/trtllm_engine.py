"""The trtllm-engine backend: legacy TensorRT engines (trtllm-build exists up to TensorRT-LLM
1.3.0rc20; trtspec writes for the release of `build.trtllm_version`, 1.1.0 by default).

`engine_commands()` is pure: it returns the exact `quantize.py` and `trtllm-build` command lines
for the target (and the draft) as lists, each checked flag by flag against the release's
contract (contract_data/trtllm-<version>.json). `build.sh` holds the same lines; they run here only when `trtllm-build` is on PATH,
otherwise the user gets the script and the container to run it in. Rules (reference §1, §6):
the target gets `--speculative_decoding_mode draft_tokens_external --max_draft_len K`; both engines
get `--kv_cache_type paged --use_paged_context_fmha enable` explicitly (defaults changed across
releases); FP8 uses `quantize.py --qformat fp8` and `--gemm_plugin fp8`; `--use_fp8_context_fmha`
is enabled only with an FP8 KV cache; `--gather_generation_logits` only when draft logits are
used; `--gather_context_logits` never with drafts. Lookahead (W, N, G) builds the target with
`--speculative_decoding_mode lookahead_decoding --max_draft_len (N-2 if N>1 else 0) + (W-1+G)(N-1)`
(examples/lookahead/README.md). Medusa converts the target with its heads as upstream's
examples/medusa does (`convert_checkpoint.py --medusa_model_dir`, instead of quantize.py) and
builds it with `--speculative_decoding_mode medusa --max_draft_len <the tree's nodes>`; an FP8 Medusa
engine comes from quantize.py's own Medusa flags instead (`--medusa_model_dir`, examples/quantization/README.md),
in float16 as that README runs it. EAGLE-3, n-gram and MTP
are refused here; layerskip arrives as draft-target (engine_json.layerskip_as_draft_target).
"""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import Any

from trtspec import subproc
from trtspec.builders import engine_json, upstream
from trtspec.builders.contracts import Contract
from trtspec.errors import IncompatibleArtifactError
from trtspec.spec.schema import BACKEND_REFUSALS

QUANTIZE_SCRIPT = "/app/examples/quantization/quantize.py"   # where the trtllm containers keep the examples
MEDUSA_SCRIPT = "/app/examples/medusa/convert_checkpoint.py"
BUILD_TIMEOUT_S = 3 * 3600
# the target engine's --speculative_decoding_mode per trtspec mode (build.py choices, contract)
TARGET_DECODING = {"draft-target": "draft_tokens_external", "lookahead": "lookahead_decoding", "medusa": "medusa"}


def refuse_unsupported(mode: str) -> None:
    """Defensive twin of the spec check: EAGLE-3 and n-gram have no TensorRT-engine path."""
    reason = BACKEND_REFUSALS.get(("trtllm-engine", mode))
    if reason:
        raise IncompatibleArtifactError(f"mode {mode} cannot be built as TensorRT engines", fix=reason)


def _quantize(model_dir: str, output_dir: str, spec: Any) -> list[str]:
    q, b = spec.quantization, spec.build
    command = ["python3", QUANTIZE_SCRIPT, "--model_dir", model_dir, "--output_dir", output_dir,
               "--dtype", "bfloat16", "--qformat", "fp8" if q.fp8 else "full_prec"]
    if q.fp8_kv_cache:
        command += ["--kv_cache_dtype", "fp8"]
    command += ["--calib_size", str(q.calibration_size), "--tp_size", str(b.tp_size), "--pp_size", str(b.pp_size)]
    return command


def _medusa_convert(model_dir: str, heads_dir: str, output_dir: str, spec: Any) -> list[str]:
    """The target and its heads as one TensorRT-LLM checkpoint (examples/medusa/convert_checkpoint.py)."""
    from trtspec.builders.engine_json import engine_max_draft_len, medusa_shape

    heads, layers = medusa_shape(spec)
    b = spec.build
    if spec.quantization.fp8:
        # quantize.py exports the FP8 target, then combine_medusa_weight adds the heads, loaded in float16
        # whatever --dtype says, and leaves them unquantized (contract_data quantize.read): float16 keeps one dtype
        command = _quantize(model_dir, output_dir, spec)
        command[command.index("--dtype") + 1] = "float16"
        return command + ["--medusa_model_dir", heads_dir, "--num_medusa_heads", str(heads),
                          "--num_medusa_layers", str(layers), "--max_draft_len", str(engine_max_draft_len(spec)),
                          "--medusa_hidden_act", "silu"]
    return ["python3", MEDUSA_SCRIPT, "--model_dir", model_dir, "--medusa_model_dir", heads_dir,
            "--output_dir", output_dir, "--dtype", "bfloat16", "--num_medusa_heads", str(heads),
            "--num_medusa_layers", str(layers), "--max_medusa_token_len", str(engine_max_draft_len(spec)),
            "--medusa_hidden_act", "silu", "--tp_size", str(b.tp_size), "--pp_size", str(b.pp_size)]


def _trtllm_build(checkpoint_dir: str, output_dir: str, spec: Any, *, speculative: str | None,
                  use_draft_logits: bool) -> list[str]:
    b, q = spec.build, spec.quantization
    command = ["trtllm-build", "--checkpoint_dir", checkpoint_dir, "--output_dir", output_dir,
               "--max_batch_size", str(b.max_batch_size), "--max_input_len", str(b.max_input_len),
               "--max_seq_len", str(b.max_seq_len), "--max_num_tokens", str(b.max_num_tokens),
               "--max_beam_width", "1", "--kv_cache_type", "paged", "--tokens_per_block", str(b.tokens_per_block),
               "--use_paged_context_fmha", "enable",
               "--gemm_plugin", "fp8" if q.fp8 else "auto",
               # FP8 context FMHA with paged context FMHA needs an FP8 KV cache (tensorrt_llm/builder.py).
               "--use_fp8_context_fmha", "enable" if (q.fp8 and q.fp8_kv_cache) else "disable"]
    if speculative:  # lookahead: --max_draft_len from (W, N, G), examples/lookahead/README.md
        from trtspec.builders.engine_json import engine_max_draft_len

        command += ["--speculative_decoding_mode", speculative, "--max_draft_len", str(engine_max_draft_len(spec))]
    if use_draft_logits:
        command += ["--gather_generation_logits"]
    return command


def engine_commands(spec: Any, contract: Contract, *, use_draft_logits: bool = False) -> list[list[str]]:
    """The command lines, in order, relative to the engine directory (build.sh cds there)."""
    refuse_unsupported(spec.speculative.mode)
    draft_target = spec.speculative.mode == "draft-target"
    decoding = TARGET_DECODING.get(spec.speculative.mode)
    medusa = spec.speculative.mode == "medusa"
    commands = [_medusa_convert("hf/target", "hf/draft", "checkpoints/target", spec) if medusa
                else _quantize("hf/target", "checkpoints/target", spec)]
    if draft_target:
        commands.append(_quantize("hf/draft", "checkpoints/draft", spec))
    commands.append(_trtllm_build("checkpoints/target", "target", spec, speculative=decoding,
                                  use_draft_logits=use_draft_logits))
    if draft_target:
        commands.append(_trtllm_build("checkpoints/draft", "draft", spec, speculative=None,
                                      use_draft_logits=use_draft_logits))
    for command in commands:
        check_engine_command(command, contract)
    return commands


def check_engine_command(command: list[str], contract: Contract) -> None:
    """Every flag is in the contract with an allowed value, and the cross-flag rules hold."""
    if command[0] == "trtllm-build":
        table = contract.trtllm_build
        upstream.check_command(command, table["flags"], table["booleans"], where=table["source"])
        flags = _flag_values(command)
        draft_len = int(flags.get("--max_draft_len", "0"))
        if "--gather_context_logits" in command and draft_len > 0:
            raise IncompatibleArtifactError("--gather_context_logits cannot be combined with --max_draft_len > 0",
                                            fix="drop --gather_context_logits (trtllm-build refuses it)")
        if flags.get("--speculative_decoding_mode") == "eagle":
            if int(flags["--max_batch_size"]) > table["eagle_max_batch_size"]:
                raise IncompatibleArtifactError(f"EAGLE engines allow max_batch_size <= {table['eagle_max_batch_size']}")
            if draft_len > table["eagle_max_draft_len"]:
                raise IncompatibleArtifactError(f"EAGLE engines allow max_draft_len <= {table['eagle_max_draft_len']}")
        if flags.get("--use_fp8_context_fmha") == "enable" and flags.get("--gemm_plugin") != "fp8":
            raise IncompatibleArtifactError("--use_fp8_context_fmha enable needs an FP8 checkpoint")
    elif command[1] == MEDUSA_SCRIPT:
        table = contract.data["medusa_convert"]
        upstream.check_command(command, table["flags"], where=table["source"])
    else:
        upstream.check_command(command, contract.quantize["flags"], where=contract.quantize["source"])


def _flag_values(command: list[str]) -> dict[str, str]:
    values = {}
    for index, part in enumerate(command[:-1]):
        if part.startswith("--") and not command[index + 1].startswith("--"):
            values[part] = command[index + 1]
    return values


def render_build_sh(commands: list[list[str]], contract: Contract) -> str:
    lines = ["#!/usr/bin/env bash",
             f"# TensorRT engines for TensorRT-LLM {contract.version}. Run inside the container that carries it:",
             f"#   {contract.image}",
             f"# Flags checked against {contract.trtllm_build['source']}",
             f"# and {contract.quantize['source']}.",
             "set -euo pipefail", 'cd "$(dirname "$0")"', ""]
    lines += [subproc.format_command(command) for command in commands]
    return "\n".join(lines) + "\n"


def trtllm_build_available() -> bool:
    return shutil.which("trtllm-build") is not None


def run_commands(commands: list[list[str]], engine_dir: Path) -> None:
    """Run the commands in the staged engine directory (only when trtllm-build is on PATH)."""
    for command in commands:
        subproc.run(command, cwd=engine_dir, timeout=BUILD_TIMEOUT_S)


def engine_section(spec: Any, contract: Contract, commands: list[list[str]], built: bool,
                   use_draft_logits: bool = False, plan: Any = None) -> dict:
    """The `trtllm_engine` block of engine.json: what deploy needs for inflight_batcher_llm.

    `kv_cache_tokens` sizes each engine's paged KV pool in tokens from the memory plan, so two
    engines sharing GPUs get their planned share whichever loads first (a free-memory fraction
    alone depends on the load order: tensorrtllm_backend docs/llama_multi_instance.md).
    """
    draft_target = spec.speculative.mode == "draft-target"
    lookahead = spec.speculative.lookahead if spec.speculative.mode == "lookahead" else None
    medusa = spec.speculative.mode == "medusa"
    return {
        "tensorrt_llm_version": contract.version,
        "container": contract.image,
        "engines": {"target": "target", "draft": "draft" if draft_target else None},
        "tokenizer_dir": "hf/target",
        # the C++ backend reads the lookahead_* parameters only under decoding_mode lookahead
        # (tensorrtllm_backend model_instance_state.cc; reference heads-and-methods.md section 5)
        "decoding_mode": "lookahead" if lookahead else "medusa" if medusa else "top_k_top_p",
        **({"lookahead": {"window_size": lookahead.window, "ngram_size": lookahead.ngram,
                          "verification_set_size": lookahead.verification_set}} if lookahead else {}),
        # the tree the C++ backend reads from Triton's medusa_choices parameter (repository/trtllm_engine)
        **({"medusa_choices": engine_json.medusa_choices(spec)} if medusa else {}),
        "speculative_decoding_mode": TARGET_DECODING.get(spec.speculative.mode),
        "num_draft_tokens": spec.speculative.max_draft_len if draft_target else 0,
        "use_draft_logits": use_draft_logits,
        "gather_generation_logits": use_draft_logits,
        "kv_cache_tokens": kv_cache_tokens(plan) if plan is not None else None,
        "build_sh": "build.sh",
        "commands": [subproc.format_command(c) for c in commands],
        "built": built,
    }


def kv_cache_tokens(plan: Any) -> dict[str, int]:
    """Per-GPU KV tokens for each engine: the plan's KV budget split in proportion to each engine's
    bytes per full-length sequence (both hold the same number of sequences)."""
    per_sequence = sum(c.kv_bytes_per_sequence for c in plan.components)
    sequences = plan.kv_budget_bytes // per_sequence if per_sequence else 0
    tokens_per_sequence = plan.blocks_per_sequence * plan.settings.tokens_per_block
    return {c.role if c.role == "target" else "draft": int(sequences * tokens_per_sequence)
            for c in plan.components}
