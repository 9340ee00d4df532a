"""engine.json (format trtspec-engine/1) and the inputs it describes: target, draft, pairing.

`resolve_inputs()` finds the checkpoints `trtspec convert` wrote (Layout.checkpoint(kind)); the
target falls back to `resolve_model(spec.model.source)` when checkpoints/target is absent. A draft
or EAGLE-3 head whose manifest names another target (target_sha256) is refused with
IncompatibleArtifactError. `engine_json()` renders the contract every backend writes; backends
add their own keys beside it (`trtllm`, `trtllm_engine`). Paths inside engine.json are relative to
the engine directory. Mode layerskip on a GPU backend is written as draft-target
(`layerskip_as_draft_target`: TensorRT-LLM has no early-exit drafting, so convert's first-E-layers
copy of the target drafts); engine.json's `mode` is then what was written, `requested_mode` and
`layerskip` what was asked (`record_requested`), so every later stage reads draft-target.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from trtspec import __version__, artifacts
from trtspec.artifacts import Layout
from trtspec.errors import IncompatibleArtifactError, ModelSourceError

FORMAT = "trtspec-engine/1"
# TensorRT-LLM's names for the speculative modes (build_config.speculative_decoding_mode).
SPECULATIVE_DECODING_MODES = {"eagle3": "eagle3", "draft-target": "draft_tokens_external",
                              "ngram": "ngram", "lookahead": "lookahead_decoding", "none": "none",
                              "layerskip": "layerskip",  # cpu; the GPU backends write draft-target
                              "medusa": "medusa", "mtp": "mtp", "suffix": "suffix"}


@dataclass(frozen=True)
class Checkpoint:
    """One input checkpoint directory with what engine.json records about it."""

    path: Path
    sha256: str
    source: str
    config: dict[str, Any]
    manifest: dict[str, Any] | None
    kind: str                      # target | target-fp8 | eagle3 | draft | draft-fp8 | model


@dataclass(frozen=True)
class BuildInputs:
    target: Checkpoint             # what the engine serves (the FP8 checkpoint when --fp8)
    base_target: Checkpoint        # the unquantized target (what drafts are paired against)
    draft: Checkpoint | None
    draft_kind: str | None         # "eagle3" | "draft-model" | "medusa" | None


def _from_dir(path: Path, kind: str) -> Checkpoint:
    manifest = artifacts.read_manifest(path)
    config = artifacts.read_json(path / "config.json") if (path / "config.json").exists() else {}
    sha = (manifest or {}).get("weights_sha256") or artifacts.weights_sha256(path)
    source = str((manifest or {}).get("source") or path)
    return Checkpoint(path=path, sha256=sha, source=source, config=config, manifest=manifest, kind=kind)


def resolve_inputs(spec: Any, layout: Layout | None = None) -> BuildInputs:
    """The checkpoints the build reads, checked to belong together."""
    from trtspec.models import resolve_model

    layout = layout or Layout.from_spec(spec)
    # trtllm-engine quantizes with TensorRT-LLM's own quantize.py, so it reads the unquantized checkpoints.
    mode = spec.speculative.mode
    fp8 = spec.quantization.fp8 and spec.build.backend != "trtllm-engine"
    target_dir = layout.checkpoint("target")
    if target_dir.is_dir():
        base = _from_dir(target_dir, "target")
    else:
        info = resolve_model(spec.model.source, trust_remote_code=spec.model.trust_remote_code, quiet=True)
        base = Checkpoint(path=info.path, sha256=info.sha256, source=spec.model.source, config=info.config,
                          manifest=artifacts.read_manifest(info.path), kind="model")
    target = base
    if fp8:
        fp8_dir = layout.checkpoint("target-fp8")
        if not fp8_dir.is_dir():
            raise ModelSourceError(f"{fp8_dir}: no FP8 target checkpoint",
                                   fix="run `trtspec convert --fp8` first (or build without --fp8)")
        target = _from_dir(fp8_dir, "target-fp8")
    draft, draft_kind = None, None
    if mode == "eagle3":
        head_dir = layout.checkpoint("eagle3")
        if not head_dir.is_dir():
            raise ModelSourceError(f"{head_dir}: no EAGLE-3 head", fix="run `trtspec convert --mode eagle3` first")
        draft, draft_kind = _from_dir(head_dir, "eagle3"), "eagle3"
    elif mode == "draft-target":
        draft, draft_kind = _resolve_draft(spec, layout, fp8), "draft-model"
    elif mode == "medusa":
        heads_dir = layout.checkpoint("medusa")
        if not heads_dir.is_dir():
            raise ModelSourceError(f"{heads_dir}: no Medusa heads", fix="run `trtspec convert --mode medusa` first")
        draft, draft_kind = _from_dir(heads_dir, "medusa"), "medusa"
    if draft is not None:
        check_pair(base, target, draft)
    return BuildInputs(target=target, base_target=base, draft=draft, draft_kind=draft_kind)


def _resolve_draft(spec: Any, layout: Layout, fp8: bool) -> Checkpoint:
    from trtspec.models import resolve_model

    for kind in (["draft-fp8"] if fp8 else []) + ["draft"]:
        if layout.checkpoint(kind).is_dir():
            return _from_dir(layout.checkpoint(kind), kind)
    info = resolve_model(spec.speculative.draft, trust_remote_code=spec.model.trust_remote_code, quiet=True)
    return Checkpoint(path=info.path, sha256=info.sha256, source=spec.speculative.draft, config=info.config,
                      manifest=None, kind="model")


def check_pair(base_target: Checkpoint, target: Checkpoint, draft: Checkpoint) -> None:
    """Refuse a draft/head made for another target; refuse a draft with another vocabulary.

    A converted draft's manifest records target_sha256: it must equal the sha256 of the target
    (the unquantized one, or the FP8 one, or the target the FP8 checkpoint was made from). A raw
    draft model (no manifest) is checked by config.json vocab_size, which is what TensorRT-LLM's
    logits buffers are sized by (tokenizer length can differ: NVIDIA/TensorRT-LLM PR #3615).
    """
    known = {base_target.sha256, target.sha256}
    for manifest in (base_target.manifest, target.manifest):
        for key in ("target_sha256", "source_sha256", "base_sha256"):
            if manifest and manifest.get(key):
                known.add(manifest[key])
    if draft.manifest is not None and draft.kind != "model":
        recorded = draft.manifest.get("target_sha256")
        if not recorded:
            raise IncompatibleArtifactError(f"{draft.path}: manifest.json has no target_sha256",
                                            fix="re-run `trtspec convert` to record which target it was made for")
        if recorded not in known:
            raise IncompatibleArtifactError(
                f"{draft.path} was made for target {recorded[:12]}, but the target is {base_target.sha256[:12]} "
                f"({base_target.path})", fix="re-run `trtspec convert` for this target")
    if draft.kind in ("draft", "draft-fp8", "model"):
        draft_vocab, target_vocab = draft.config.get("vocab_size"), base_target.config.get("vocab_size")
        if draft_vocab != target_vocab:
            raise IncompatibleArtifactError(
                f"{draft.path}: draft vocab_size {draft_vocab} differs from the target's {target_vocab}",
                fix="use a draft trained with the target's tokenizer")


def layerskip_as_draft_target(spec: Any, layout: Layout, target_config: dict[str, Any]) -> Any:
    """The spec a GPU backend writes for mode layerskip: draft-target, the draft convert's copy of the
    target's first E layers (work/checkpoints/draft); refused in one line where convert has not
    written that copy for this E."""
    from trtspec.convert.first_layers import exit_layer

    layers = exit_layer(spec.speculative.layerskip.exit_layer, target_config)
    draft_dir = layout.checkpoint("draft")
    recorded = (artifacts.read_manifest(draft_dir) or {}).get("inputs") or {}
    if (recorded.get("source"), recorded.get("num_layers")) != ("first-layers", layers):
        raise ModelSourceError(f"{draft_dir}: no copy of the target's first {layers} layers, which mode layerskip "
                               f"drafts with on build.backend {spec.build.backend}",
                               fix="run `trtspec convert` with this spec first (it writes the copy)")
    speculative = spec.speculative.model_copy(update={"mode": "draft-target", "draft": str(draft_dir)})
    return spec.model_copy(update={"speculative": speculative})


def record_requested(result: Any, spec: Any, inputs: BuildInputs) -> None:
    """engine.json and the build's one line for a spec written as another mode (layerskip as draft-target)."""
    assert inputs.draft is not None and inputs.draft.manifest is not None  # layerskip_as_draft_target checked
    layers = inputs.draft.manifest["inputs"]["num_layers"]
    note = (f"layerskip on {spec.build.backend}: TensorRT-LLM has no early-exit drafting; drafting with a "
            f"first-{layers}-layers copy of the target as a draft model (draft-target)")
    engine, at = result.engine, list(result.engine).index("mode") + 1
    extra = {"requested_mode": spec.speculative.mode,
             "layerskip": {"exit_layer": layers, "num_hidden_layers": inputs.base_target.config.get("num_hidden_layers"),
                           "written_as": engine["mode"], "note": note}}
    result.engine = dict(list(engine.items())[:at] + list(extra.items()) + list(engine.items())[at:])
    result.messages.append(note)


def medusa_shape(spec: Any) -> tuple[int, int]:
    """(heads, ResBlocks per head): checkpoints/medusa's config.json when convert wrote it, else
    speculative.medusa's counts or convert's defaults."""
    from trtspec.spec.medusa import DEFAULT_HEADS, DEFAULT_LAYERS

    settings = spec.speculative.medusa
    config = Layout.from_spec(spec).checkpoint("medusa") / "config.json"
    if config.is_file():
        written = artifacts.read_json(config)
        return int(written["medusa_num_heads"]), int(written["medusa_num_layers"])
    return settings.num_heads or DEFAULT_HEADS, settings.num_layers or DEFAULT_LAYERS


def medusa_choices(spec: Any) -> list[list[int]]:
    """The Medusa tree engines are built for: speculative.medusa.choices, else the default cut to
    the heads' depth."""
    return spec.speculative.medusa.tree(medusa_shape(spec)[0])


def engine_max_draft_len(spec: Any) -> int:
    """Draft tokens the engines are built for: 0 without speculation; TensorRT engines for
    lookahead (W, N, G) take (N-2 if N>1 else 0) + (W-1+G)(N-1) (LookaheadSpec.max_draft_len);
    Medusa, its tree's nodes (a TensorRT-LLM Medusa engine's draft tokens are the medusa_choices
    nodes: convert_checkpoint.py's --max_medusa_token_len defaults to 63 for the 63-node default
    tree mc_sim_7b_63); suffix, its own cap (speculative.suffix.max_draft_len); else
    speculative.max_draft_len (the cpu engine's lookahead chains too)."""
    s = spec.speculative
    if s.mode == "none":
        return 0
    if s.mode == "medusa":
        return len(medusa_choices(spec))
    if s.mode == "lookahead" and spec.build.backend == "trtllm-engine":
        return s.lookahead.max_draft_len
    return s.draft_cap


def build_config(spec: Any) -> dict[str, Any]:
    """The build_config block of engine.json."""
    b, s, q = spec.build, spec.speculative, spec.quantization
    return {"max_batch_size": b.max_batch_size, "max_input_len": b.max_input_len, "max_seq_len": b.max_seq_len,
            "max_num_tokens": b.max_num_tokens, "max_draft_len": engine_max_draft_len(spec),
            "kv_cache_type": "paged", "tokens_per_block": b.tokens_per_block,
            "speculative_decoding_mode": SPECULATIVE_DECODING_MODES[s.mode],
            "quantization": {"fp8": q.fp8, "fp8_kv_cache": q.fp8_kv_cache},
            "tp_size": b.tp_size, "pp_size": b.pp_size}


def engine_json(spec: Any, name: str, inputs: BuildInputs, *, target_path: str = "target",
                draft_path: str = "draft", **backend_keys: Any) -> dict[str, Any]:
    """engine.json for any backend; `backend_keys` add the backend's own sections."""
    s = spec.speculative
    draft = None
    if inputs.draft is not None:
        # target_sha256 names the target this engine serves (the FP8 one with --fp8): check_pair has
        # already traced the draft's recorded target to it; made_for_sha256 keeps what convert recorded.
        draft = {"kind": inputs.draft_kind, "path": draft_path, "sha256": inputs.draft.sha256,
                 "target_sha256": inputs.target.sha256,
                 "made_for_sha256": (inputs.draft.manifest or {}).get("target_sha256") or inputs.base_target.sha256}
    return {
        "format": FORMAT, "trtspec_version": __version__, "name": name,
        "backend": spec.build.backend, "mode": s.mode, "build_config": build_config(spec),
        "target": {"path": target_path, "sha256": inputs.target.sha256, "source": inputs.target.source},
        "draft": draft,
        "runtime": {"dtype": spec.model.dtype, "ngram_min": s.ngram_min, "ngram_max": s.ngram_max,
                    "dynamic_draft": s.dynamic_draft, "confidence_threshold": s.confidence_threshold,
                    "acceptance_floor": s.acceptance_floor, "eagle_choices": s.eagle_choices,
                    **({"exit_layer": s.layerskip.exit_layer} if s.mode == "layerskip" else {}),
                    **({"lookahead": [s.lookahead.window, s.lookahead.ngram, s.lookahead.verification_set]}
                       if s.mode == "lookahead" else {}),
                    **({"medusa_choices": medusa_choices(spec)} if s.mode == "medusa" else {}),
                    **({"mtp_layers": s.mtp.num_layers} if s.mode == "mtp" else {}),
                    **({"suffix": s.suffix.model_dump()} if s.mode == "suffix" else {}),
                    **({"head_dtype": s.eagle3.head_dtype} if s.mode == "eagle3" and spec.build.backend == "cpu" else {}),
                    **({"tree": [s.tree.topk, s.tree.depth, s.tree.num_draft_tokens],
                        "tree_min_path_prob": s.tree.min_path_prob} if s.tree else {})},
        **backend_keys,
    }
