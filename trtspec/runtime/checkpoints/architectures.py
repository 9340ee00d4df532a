"""Which checkpoints the cpu engine can run, told from config.json alone, before any work.

The engine runs a transformers causal LM with its attention routed through trtspec's paged
attention (attention.use_paged_attention), which takes each layer's queries, keys and values and
the layer's scale. So it computes the model's own numbers where attention is nothing more than
that: every key in view, no soft cap on the scores. Keys and values may differ in head size:
DeepSeek-V3's multi-head latent attention hands it keys of qk_nope_head_dim + qk_rope_head_dim
and values of v_head_dim, which the paged pool holds (trtspec.runtime.cache.paged); MoE MLPs
(DeepSeek-V3, GLM-4.5) are transformers' own modules. An architecture qualifies when the test
suite runs a tiny seeded checkpoint of it and gets transformers' own greedy tokens
(tests/runtime/checkpoints/test_rt_architectures.py); anything else is refused in one line, since
a wrong answer from a model that seems to run is worse than none. Soft-capped scores and sliding
windows shorter than the longest sequence are the cases met so far.

Contract: `why_not_runnable(config, max_seq_len)` returns None or the reason as one phrase;
`refuse_unrunnable(config, max_seq_len, where)` raises IncompatibleArtifactError with it and the
fix. Pure: no torch, no transformers, nothing read but the dict.
"""

from __future__ import annotations

from typing import Any

from trtspec.errors import IncompatibleArtifactError

# model_type -> the architecture's name in messages; each has a tiny checkpoint in the tests
RUNS: dict[str, str] = {
    "llama": "Llama", "mistral": "Mistral", "qwen2": "Qwen2", "qwen3": "Qwen3", "gemma3_text": "Gemma3 (text)",
    "phi3": "Phi-3", "deepseek_v3": "DeepSeek-V3", "glm4_moe": "GLM-4.5",
}
# model types whose sliding window applies only when use_sliding_window is set
_WINDOW_SWITCHED = ("qwen2", "qwen3")


def why_not_runnable(config: dict[str, Any], max_seq_len: int | None = None) -> str | None:
    """Why the cpu engine cannot run a checkpoint with this config.json, or None."""
    model_type = config.get("model_type") or "?"
    architecture = (config.get("architectures") or [model_type])[0]
    if model_type not in RUNS:
        return f"{architecture} (model_type {model_type!r}) is not an architecture the cpu engine runs"
    if config.get("attn_logit_softcapping"):
        return f"{architecture} caps attention scores (attn_logit_softcapping), which the cpu engine's attention does not"
    window = config.get("sliding_window")
    if model_type in _WINDOW_SWITCHED and not config.get("use_sliding_window"):
        window = None
    if window and max_seq_len and int(window) < max_seq_len:
        return (f"{architecture} attends within a sliding window of {window} tokens, below build.max_seq_len "
                f"{max_seq_len}, and the cpu engine attends to every key")
    return None


def refuse_unrunnable(config: dict[str, Any], max_seq_len: int | None, where: str) -> None:
    """Raise one line naming the problem and what runs, where `config` (from `where`) cannot run."""
    why = why_not_runnable(config, max_seq_len)
    if why is None:
        return
    window_fix = "sliding window" in why
    fix = (f"set build.max_seq_len to at most {config.get('sliding_window')}" if window_fix else
           f"the cpu engine runs {', '.join(RUNS.values())}; serve this model on a GPU backend "
           f"(build.backend trtllm)")
    raise IncompatibleArtifactError(f"{where}: {why}", fix=fix)
