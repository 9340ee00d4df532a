"""The cpu backend: the engine bundle trtspec's PyTorch engine loads, then a smoke generation.

The bundle is engine.json plus the checkpoints (hard-linked when the filesystem allows, copied
otherwise) under `target/` and `draft/`. The smoke generation loads the staged bundle with
`trtspec.runtime.load_engine` and generates a few tokens before the bundle is renamed into place,
so a bundle that cannot generate never lands. It is skipped, with a message saying so, only
while `trtspec.runtime` does not exist in this checkout; once it exists a failure fails the build.
"""

from __future__ import annotations

import importlib.util
import os
import shutil
from pathlib import Path
from typing import Any

from trtspec.errors import TrtSpecError

# A question, not a sentence to complete: engine.generate sends it through the chat template
# (trtspec.chat.prompt_ids), as the server does, and an instruct model answers a user turn
# (SmolLM2: "The capital of France is Paris."); a bare continuation as a user turn got noise.
SMOKE_PROMPT = "What is the capital of France?"
SMOKE_TOKENS = 8


def link_tree(source: Path, destination: Path) -> None:
    """Recreate `source` under `destination`, hard-linking files (copying across filesystems)."""
    for path in sorted(Path(source).rglob("*")):
        target = destination / path.relative_to(source)
        if path.is_dir():
            target.mkdir(parents=True, exist_ok=True)
            continue
        target.parent.mkdir(parents=True, exist_ok=True)
        try:
            os.link(path, target)
        except OSError:  # another filesystem, or links not allowed: copy instead
            shutil.copy2(path, target)


def runtime_import_error() -> str | None:
    """None once `trtspec.runtime` (issue 3) imports with load_engine; else why it does not."""
    if importlib.util.find_spec("trtspec.runtime") is None:
        return "trtspec.runtime is not in this checkout yet"
    try:
        from trtspec.runtime import load_engine  # noqa: F401
    except Exception as error:  # a half-landed package: report, do not crash the build
        return f"trtspec.runtime does not import yet ({type(error).__name__}: {error})"
    return None


def smoke_test(engine_dir: Path) -> dict[str, Any]:
    """Load the bundle and generate SMOKE_TOKENS greedy tokens; return what happened.

    Returns {"status": "skipped", "reason": ...} when trtspec.runtime is absent, else
    {"status": "ok", "text", "num_tokens", "stats"}; any failure raises TrtSpecError.
    """
    problem = runtime_import_error()
    if problem:
        return {"status": "skipped", "reason": f"{problem}; the smoke generation runs once it imports"}
    from trtspec.runtime import load_engine

    try:
        engine = load_engine(str(engine_dir))
        result = engine.generate(SMOKE_PROMPT, max_new_tokens=SMOKE_TOKENS, temperature=0.0)
    except TrtSpecError:
        raise
    except Exception as error:  # the engine's own failure modes are many; all mean "bundle unusable"
        raise TrtSpecError(f"smoke generation failed on the new bundle ({type(error).__name__}: {error})",
                           fix="run with TRTSPEC_DEBUG=1 for the traceback; the old engine was left in place") from None
    if not result.token_ids:
        raise TrtSpecError("smoke generation returned no tokens", fix="check the target checkpoint")
    stats = result.stats.to_dict() if getattr(result, "stats", None) is not None else None
    return {"status": "ok", "text": result.text, "num_tokens": len(result.token_ids), "stats": stats}


def runtime_options(spec: Any) -> dict[str, Any]:
    """The cpu engine's own keys of engine.json's runtime block (trtspec.runtime.loading reads them)."""
    return {"prepack": spec.build.prepack, "kv_cache_max_tokens": spec.build.kv_cache_max_tokens,
            "kv_cache_reuse": spec.build.kv_cache_reuse, "kv_cache_reuse_mib": spec.build.kv_cache_reuse_mib,
            "adapt_threads": spec.build.adapt_threads,
            "draft_len_schedule": spec.speculative.draft_len_schedule,
            **({"max_prefill_tokens": spec.build.max_prefill_tokens} if spec.build.max_prefill_tokens else {})}


def write_bundle(staging: Path, inputs: Any) -> None:
    """Place the target (and draft) checkpoints into the staged engine directory."""
    link_tree(inputs.target.path, staging / "target")
    if inputs.draft is not None:
        link_tree(inputs.draft.path, staging / "draft")
