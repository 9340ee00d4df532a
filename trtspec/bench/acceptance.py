"""Where a benchmark's acceptance comes from, per backend and release, and which zeros to distrust.

The cpu model reports every count itself (per request: num_drafts, total_draft_tokens,
total_accepted_draft_tokens; per position: its trtspec:spec_decode_* counters). The GPU releases
report what their contract's `acceptance` section says (contract_data/trtllm-<version>.json): the
stock llmapi model's per-request perf outputs, sent only with sampling_param_return_perf_metrics
and as strings holding the number although config.pbtxt types them FP32/INT32 (trtspec.client.
events parses either), no speculative series on Prometheus before the 1.3 line, and for one-model
EAGLE-3 in 1.1.0 and 1.2.1 per-request counts that read 0 whatever was accepted (PR #17082 fixed
it later). A speculative cell whose counts are all such zeros is marked untrusted and its
acceptance left out (NaN), instead of a 0 % that says the head accepts nothing.

Pure: it reads a spec and the summarized cells; the report carries what it returns.
"""

from __future__ import annotations

import math
from typing import Any

from trtspec.backends import GPU as GPU_BACKENDS  # the backends that target a GPU release

ACCEPTANCE_KEYS = ("spec_decode_acceptance_rate", "spec_decode_acceptance_length",
                   "spec_decode_per_position_acceptance_rates", "tokens_per_target_pass")


def source(spec: Any) -> str:
    """One line: what the acceptance figures of a bench of this spec are read from."""
    if spec.build.backend not in GPU_BACKENDS:
        return ("cpu model: per-request num_drafts, total_draft_tokens, total_accepted_draft_tokens and the "
                "trtspec:spec_decode_* counters")
    from trtspec.builders import contracts

    contract = contracts.for_spec(spec)
    data = contract.data.get("acceptance") or {}
    outputs = ", ".join(data.get("per_request", ()))
    prometheus = "" if data.get("prometheus") else f"; no speculative Prometheus series in TensorRT-LLM {contract.version}"
    return (f"TensorRT-LLM {contract.version} per-request perf outputs ({outputs}; with "
            f"sampling_param_return_perf_metrics, strings or numbers){prometheus}")


def untrusted_reason(spec: Any) -> str | None:
    """Why a zero in this spec's per-request acceptance cannot be trusted, or None."""
    if spec.build.backend not in GPU_BACKENDS:
        return None
    from trtspec.builders import contracts

    data = contracts.for_spec(spec).data.get("acceptance") or {}
    return (data.get("untrusted_zero") or {}).get(spec.speculative.mode)


def mark(results: list[dict[str, Any]], spec: Any, speculative_variants: set[str]) -> list[str]:
    """Mark speculative cells whose acceptance is an untrusted zero (in place); one note per cell."""
    reason = untrusted_reason(spec)
    notes: list[str] = []
    if reason is None:
        return notes
    for result in results:
        if result.get("variant") not in speculative_variants or "spec_decode_accepted_tokens" not in result:
            continue
        if result["spec_decode_accepted_tokens"] == 0:
            for key in ACCEPTANCE_KEYS:
                if key in result:
                    result[key] = None if key == "spec_decode_per_position_acceptance_rates" else math.nan
            result["acceptance_untrusted"] = reason
            notes.append(f"{result['variant']} at concurrency {result.get('max_concurrency')}: acceptance not "
                         f"reported ({reason})")
    return notes
