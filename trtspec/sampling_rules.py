"""The ranges of a request's sampling parameters, said once; every boundary that takes them checks here.

    temperature  0 (greedy) or a finite value >= MIN_TEMPERATURE
    top_p        in (0, 1]; 1 turns it off
    top_k        >= 0; 0 turns it off

The boundaries are the cpu engine's `generate` (runtime.loop.request.validate), the served model's
inputs (triton_model.request), the OpenAI frontend's bodies (serve.openai_protocol) and the CLI's
request options (cli._options). Each names the parameter its own way (`top_p`,
`sampling_param_top_p`, `--top-p`) and raises its own error type; the rule and the words of the
problem come from here, so a value one boundary passes is never refused by the next for a
different reason. Pure: math and struct, nothing heavy.
"""

from __future__ import annotations

import math
import struct

# Below this a positive temperature is refused: logits / temperature overflows float32 long before
# the smallest float (1e-38 gave "probability tensor contains inf/nan"). The value is vLLM's
# _SAMPLING_EPS (vllm/v1/sample/sampler.py), under which vLLM samples greedily; here the caller
# is told to send 0 instead, so greedy is never a silent substitute.
MIN_TEMPERATURE = 1e-5
# The bound as compared: MIN_TEMPERATURE rounded to float32, the type Triton's temperature input
# carries, so that 1e-5 sent through Triton (9.99999975e-06) passes where it passes in process.
_LOWEST = struct.unpack("f", struct.pack("f", MIN_TEMPERATURE))[0]

# What to do about each problem, for boundaries whose errors carry a fix.
FIXES = {"temperature": "use 0 for greedy", "top_p": "use 1.0 to disable top-p", "top_k": "use 0 to disable top-k"}


def temperature_problem(temperature: float) -> str | None:
    """Why a temperature is refused, or None: 0 (greedy) or a finite value >= MIN_TEMPERATURE."""
    if not math.isfinite(temperature):
        return f"must be a finite number, 0 for greedy (got {temperature})"
    if temperature < 0:
        return f"must be >= 0 (got {temperature})"
    if 0 < temperature < _LOWEST:
        return f"must be 0 (greedy) or at least {MIN_TEMPERATURE:g}; smaller values overflow the logits (got {temperature:g})"
    return None


def top_p_problem(top_p: float) -> str | None:
    """Why a top_p is refused, or None: in (0, 1] (NaN is refused too)."""
    return None if 0.0 < top_p <= 1.0 else f"must be in (0, 1] (got {top_p})"


def top_k_problem(top_k: int) -> str | None:
    """Why a top_k is refused, or None: 0 (off) or more."""
    return None if top_k >= 0 else f"must be >= 0, 0 meaning off (got {top_k})"


def sampling_problem(*, temperature: float | None = None, top_p: float | None = None,
                     top_k: int | None = None) -> tuple[str, str] | None:
    """The first of temperature, top_p, top_k that is out of range and why, as (name, problem),
    or None; a None value is not sent, so not checked."""
    if temperature is not None and (problem := temperature_problem(temperature)):
        return "temperature", problem
    if top_p is not None and (problem := top_p_problem(top_p)):
        return "top_p", problem
    if top_k is not None and (problem := top_k_problem(top_k)):
        return "top_k", problem
    return None
