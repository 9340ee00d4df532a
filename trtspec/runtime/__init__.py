"""The cpu engine: lossless speculative decoding in PyTorch over transformers' Llama models.

    from trtspec.runtime import load_engine
    engine = load_engine("engines/smollm2-ngram-cpu")
    result = engine.generate("What is the capital of France?", max_new_tokens=32)

Modules: sampling (accept/reject), drafters/ (n-gram, draft model, EAGLE-3), tree (static draft
trees), policy (draft length, fallback), request (validation, stops), stats, loading, fp8.
Nothing heavy is imported until a function needs it.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from trtspec.runtime.engine import Engine

__all__ = ["Engine", "load_engine"]


def load_engine(path, **overrides: Any) -> Engine:
    """Load an engine bundle directory (engine.json) into an Engine; `overrides` replace
    EngineConfig fields (trtspec.runtime.config)."""
    from trtspec.runtime.loading import load_engine as _load

    return _load(path, **overrides)


def __getattr__(name: str) -> Any:
    if name == "Engine":
        from trtspec.runtime.engine import Engine

        return Engine
    if name in ("GenerationStats", "GenerationResult", "StreamChunk", "InvalidRequestError"):
        import importlib

        module = "trtspec.runtime.loop.stats" if name == "GenerationStats" else "trtspec.runtime.loop.request"
        return getattr(importlib.import_module(module), name)
    raise AttributeError(name)
