"""`trtspec export-head`: the canonical head written in another tool's layout, for its consumers.

  eagle        EAGLE authors' / SpecForge layout: `midlayer.*`, d2t + t2d, flat Llama config with
               architectures ["LlamaForCausalLMEagle3"] and draft_vocab_size. Layer ids twice, each
               where its reader looks and in its convention: eagle_config's (outputs of layers: SGLang,
               SpecForge) and the top level's (inputs of layers: vLLM). For vLLM, SGLang, TensorRT-LLM
               (any release: it binds `midlayer.*`), the EAGLE code.
  modelopt     ModelOpt >= 0.43 (= the canonical head): `layers.0.*`, eagle_config. For TensorRT-LLM
               1.2+ and ModelOpt's tooling.
  speculators  `layers.N.*`, d2t + t2d, speculators_config (verifier = the target), a full
               transformer_layer_config, norm_before_residual, top-level ids (inputs of layers). For
               `vllm serve DIR` and speculators' --from-pretrained. speculators resolves the verifier
               when the head loads (a hub id or a path), so it is never an alias: `--verifier` as
               given (a path made absolute), else the hub id the model came from, else the model's
               own directory, else the converted target (checkpoints/target), absolute. Written in
               speculators 0.9.0's layout (its SpeculatorModelConfig loads it, tests/peers).

Tensors are written bit for bit (same dtype), so importing an export gives the canonical head back
(the round-trip test). Each export carries `trtspec_head_forward`; where the head's function is not
the one the format's consumers compute (a ModelOpt-trained head is hidden_norm(input_layernorm(h)),
every other consumer computes hidden_norm(h)), the summary says so in a note.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from trtspec.convert.eagle3.heads import conventions as conv
from trtspec.convert.eagle3.heads.canonical import WEIGHTS, head_forward, read_canonical
from trtspec.convert.eagle3.heads.layouts import FORWARD_KEY, LLAMA_KEYS
from trtspec.errors import IncompatibleArtifactError

FORMATS = ("eagle", "modelopt", "speculators")
CONSUMERS = {
    "eagle": "vLLM (--speculative-config model=DIR), SGLang (--speculative-draft-model-path DIR), "
             "TensorRT-LLM (speculative_model), the EAGLE code",
    "modelopt": "TensorRT-LLM 1.2+ (speculative_model), ModelOpt",
    "speculators": "vLLM (vllm serve DIR reads speculators_config), speculators train --from-pretrained DIR",
}
# the function each format's consumers compute (see layouts.FORWARDS)
CONSUMER_FORWARD = {"eagle": ("eagle",), "modelopt": ("eagle",), "speculators": ("eagle", "norm_before_residual")}
SPECULATORS_VERSION = "0.9.0"  # the release whose config class loads this layout (tests/peers)


def export_head(canonical_dir: Path, out_dir: Path, fmt: str, *, target_config: dict[str, Any],
                verifier: str, max_draft_len: int = 3) -> dict[str, Any]:
    """Write the canonical head in `canonical_dir` as `fmt` into `out_dir` (made by the caller)."""
    if fmt not in FORMATS:
        raise IncompatibleArtifactError(f"unknown head format {fmt!r}", fix=f"use one of {', '.join(FORMATS)}")
    config, tensors = read_canonical(canonical_dir)
    forward = head_forward(config)
    ids = list(config["eagle_config"]["eagle_aux_hidden_state_layer_ids"])
    llama = {key: config[key] for key in LLAMA_KEYS if key in config}
    if fmt == "modelopt":
        out_config, out_tensors = {**config, FORWARD_KEY: forward}, dict(tensors)
    else:
        out_tensors = _with_t2d(tensors, int(target_config["vocab_size"]))
        if fmt == "eagle":
            out_config = _eagle_config(config, llama, ids)
            out_tensors = {_midlayer(name, int(config.get("num_hidden_layers", 1))): t for name, t in out_tensors.items()}
        else:
            out_config = _speculators_config(config, llama, ids, forward, target_config, verifier, max_draft_len)
    out_config[FORWARD_KEY] = forward
    from safetensors.torch import save_file

    out_dir = Path(out_dir)
    save_file({k: v.contiguous() for k, v in sorted(out_tensors.items())}, str(out_dir / WEIGHTS),
              metadata={"format": "pt"})
    (out_dir / "config.json").write_text(json.dumps(out_config, indent=2) + "\n")
    notes = []
    if forward not in CONSUMER_FORWARD[fmt]:
        notes.append(f"this head computes hidden_norm(input_layernorm(h)) as ModelOpt trained it; {fmt}'s consumers "
                     "compute hidden_norm(h), so their drafts differ from trtspec's (trtspec re-imports it exactly)")
    extra = {"verifier": verifier} if fmt == "speculators" else {}
    return {"format": fmt, "path": str(out_dir), "tensors": len(out_tensors), "consumers": CONSUMERS[fmt], **extra,
            "layer_ids": {"output_of_layer": ids, "input_of_layer": conv.from_output(ids, conv.INPUT)},
            "forward": forward, "notes": notes}



def resolve_verifier(source: str, target_dir: Path, given: str | None = None) -> str:
    """What a speculators head names as its verifier: a hub id or an absolute path, never an alias.

    `given` (`--verifier`) wins: an existing path made absolute, else taken as a hub id. Else the
    model's hub id (without @revision: speculators' name_or_path takes none), a local checkpoint
    directory the model came from, or the converted target directory (an alias, a .gguf).
    """
    from trtspec import hub

    if given:
        path = Path(given).expanduser()
        return str(path.resolve()) if path.exists() else given
    if hub.is_hub_id(source):
        return source.split("@", 1)[0]
    path = Path(source).expanduser()
    if (path / "config.json").is_file():
        return str(path.resolve())
    return str(Path(target_dir).resolve())


def export_checkpoint(spec: Any, out: Path, fmt: str, *, force: bool = False,
                      verifier: str | None = None) -> dict[str, Any]:
    """`trtspec export-head`: checkpoints/eagle3 of the spec's workdir written to `out` in `fmt`
    (atomically: a failed export leaves `out` as it was); the summary, with its path."""
    from trtspec import artifacts
    from trtspec.errors import TrtSpecError

    layout = artifacts.Layout.from_spec(spec)
    head, target = layout.checkpoint("eagle3"), layout.checkpoint("target")
    if not (head / "config.json").is_file() or not (target / "config.json").is_file():
        raise TrtSpecError(f"no EAGLE-3 head in {head} (or no target in {target})",
                           fix="run `trtspec convert --mode eagle3` (with --head SOURCE to import one) first")
    if out.exists() and not force:
        raise TrtSpecError(f"{out} already exists", fix="pass --force to replace it, or choose another directory")
    with artifacts.atomic_dir(out) as staging:
        summary = export_head(head, staging, fmt, target_config=artifacts.read_json(target / "config.json"),
                              verifier=resolve_verifier(spec.model.source, target, verifier),
                              max_draft_len=spec.speculative.max_draft_len)
    summary["path"] = str(out)
    return summary

def _with_t2d(tensors: dict[str, Any], vocab: int) -> dict[str, Any]:
    """The tensors plus t2d (bool membership of each target token) where d2t reduces the vocabulary."""
    import torch

    out = dict(tensors)
    if "d2t" in tensors:
        t2d = torch.zeros(vocab, dtype=torch.bool)
        t2d[torch.arange(tensors["d2t"].shape[0]) + tensors["d2t"].long()] = True
        out["t2d"] = t2d
    return out


def _midlayer(name: str, num_layers: int) -> str:
    if not name.startswith("layers."):
        return name
    index, rest = name.removeprefix("layers.").split(".", 1)
    return f"midlayer.{rest}" if num_layers == 1 else f"midlayer.{index}.{rest}"


def _eagle_config(config: dict[str, Any], llama: dict[str, Any], ids: list[int]) -> dict[str, Any]:
    return {"architectures": ["LlamaForCausalLMEagle3"], "model_type": "llama", **llama,
            "draft_vocab_size": config["draft_vocab_size"], "torch_dtype": config.get("torch_dtype", "float32"),
            "tie_word_embeddings": False, "bias": False,
            "eagle_config": {"eagle_aux_hidden_state_layer_ids": ids},
            "eagle_aux_hidden_state_layer_ids": conv.from_output(ids, conv.INPUT)}


def _speculators_config(config: dict[str, Any], llama: dict[str, Any], ids: list[int], forward: str,
                        target_config: dict[str, Any], verifier: str, max_draft_len: int) -> dict[str, Any]:
    return {
        "architectures": ["Eagle3Speculator"], "speculators_model_type": "eagle3",
        "speculators_version": SPECULATORS_VERSION,
        "speculators_config": {
            "algorithm": "eagle3", "default_proposal_method": "greedy",
            "proposal_methods": [{"proposal_type": "greedy", "speculative_tokens": max_draft_len}],
            "verifier": {"name_or_path": verifier, "architectures": target_config.get("architectures") or []}},
        "transformer_layer_config": {"model_type": "llama", "architectures": ["LlamaForCausalLM"], **llama},
        "draft_vocab_size": config["draft_vocab_size"], "norm_before_residual": forward == "norm_before_residual",
        "norm_before_fc": False, "fc_norm": False, "norm_output": False, "target_hidden_size": int(target_config["hidden_size"]),
        "eagle_aux_hidden_state_layer_ids": conv.from_output(ids, conv.INPUT), "embed_requires_grad": False,
        "torch_dtype": config.get("torch_dtype", "float32"),
    }
