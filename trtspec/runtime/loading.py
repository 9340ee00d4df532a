"""Loading an engine bundle: engine.json (from `trtspec build --backend cpu`) into an Engine.

The bundle format is fixed by the contract in DESIGN.md (`format: trtspec-engine/1`); paths in
it are relative to the engine directory. The checkpoints themselves load through
Engine.from_checkpoints (trtspec.runtime.checkpoints.parts): loading -> engine -> checkpoints, one way.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from trtspec.errors import IncompatibleArtifactError, ModelSourceError
from trtspec.runtime.drafters.registry import DRAFTER_OPTIONS
from trtspec.runtime.engine import Engine

ENGINE_FORMAT = "trtspec-engine/1"
# the engine's own keys, then every drafter's (registry.DRAFTER_OPTIONS: one list, so a new drafter
# option is not dropped here)
RUNTIME_KEYS = ("dtype", "dynamic_draft", "confidence_threshold", "acceptance_floor",
                "eagle_choices", "tree", "prepack", "kv_cache_max_tokens", "draft_len_schedule",
                "kv_cache_reuse", "tree_min_path_prob", "kv_cache_reuse_mib", "adapt_threads",
                "max_prefill_tokens",
                *dict.fromkeys(key for keys in DRAFTER_OPTIONS.values() for key in keys))
# build_config keys the engine's scheduler reads (engine.json's contract with TensorRT-LLM's names)
SCHEDULER_KEYS = ("max_batch_size", "max_num_tokens", "tokens_per_block")


def load_engine(path: str | Path, **overrides: Any):
    """Load an engine bundle directory (engine.json + checkpoints) into an Engine; `overrides`
    replace EngineConfig fields the bundle sets (a server's max_queue_size, for instance)."""
    path = Path(path)
    manifest_path = path / "engine.json"
    if not manifest_path.is_file():
        raise ModelSourceError(f"{path}: no engine.json", fix="build it with `trtspec build --backend cpu`")
    bundle = json.loads(manifest_path.read_text())
    if bundle.get("format") != ENGINE_FORMAT:
        raise IncompatibleArtifactError(f"{manifest_path}: format {bundle.get('format')!r} is not {ENGINE_FORMAT}",
                                        fix="rebuild the engine with this trtspec version")
    if bundle.get("backend") != "cpu":
        raise IncompatibleArtifactError(f"{path}: a {bundle.get('backend')} engine cannot run in-process",
                                        fix="build with --backend cpu, or serve it with `trtspec deploy`")
    build = bundle.get("build_config", {})
    draft = bundle.get("draft") or None
    if draft and draft.get("target_sha256") and draft["target_sha256"] != bundle["target"].get("sha256"):
        raise IncompatibleArtifactError(f"{path}: the draft was made for another target",
                                        fix="re-run `trtspec convert` and `trtspec build`")
    runtime = {key: value for key, value in (bundle.get("runtime") or {}).items() if key in RUNTIME_KEYS}
    runtime.update({key: int(build[key]) for key in SCHEDULER_KEYS if key in build})
    runtime.update(overrides)
    sizes = {"max_input_len": int(build.get("max_input_len", 1024)), "max_seq_len": int(build.get("max_seq_len", 2048)),
             "name": bundle.get("name")}
    return Engine.from_checkpoints(
        path / bundle["target"]["path"], mode=bundle.get("mode", "none"),
        draft_dir=(path / draft["path"]) if draft else None,
        max_draft_len=int(runtime.pop("max_draft_len", build.get("max_draft_len", 4))), **{**sizes, **runtime})
