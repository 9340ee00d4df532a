"""Warm start: an EAGLE-3 head in trtspec's canonical layout loaded into ModelOpt's converted module.

ModelOpt has no API that starts `eagle_module` from an exported head: it resumes only its own
full-model checkpoints (NVIDIA/Model-Optimizer@a2fbac7b examples/speculative_decoding/main.py;
shared/reference/heads-and-methods.md section 2). So a fine-tune converts the target with the
head's own architecture and copies the head's tensors into the module by hand:

- `head_architecture(head_dir)`: the `eagle_architecture_config` fields the head fixes (attention
  shape, MLP width, norms, rope, draft vocabulary, the auxiliary layers it reads), for
  `train.convert_eagle3(architecture=...)`;
- `head_vocab(head_dir, ...)`: the head's draft vocabulary as convert's DraftVocab (kept target ids
  = arange + d2t), so the features' teacher logits are restricted to the head's vocabulary;
- `warm_start(model, head_dir)`: every tensor of the head into `model.eagle_module`, strictly:
  each head tensor lands on a module tensor of its shape, each module tensor but the rotary cache
  is covered;
- `verify_warm_start(model, head_dir, scratch)`: exports the module with ModelOpt (as convert
  exports any head) and compares every tensor with the head's, bit for bit. Equal tensors are
  the proof that the module before its first step drafts exactly as the head does.

The canonical layout is what `trtspec convert` writes in work/checkpoints/eagle3
(eagle3.export: config.json `LlamaForCausalLMEagle3` with `eagle_config`, model.safetensors with
`fc`, `layers.0.*`, `norm`, `lm_head`, `d2t`); heads in other layouts reach it through the importer.
This module reads heads and writes nothing but the scratch export. The module's names are the
export's names in ModelOpt 0.47 (what the bit-for-bit check proves); ModelOpt 0.37, inside the
TensorRT-LLM 1.1/1.2 containers, names its EagleModule's parts otherwise (eagle3.modelopt_compat)
and no map is written for it: there `warm_start` refuses in one line instead of loading.
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path
from typing import Any

from trtspec.errors import IncompatibleArtifactError

HEAD_FILE = "model.safetensors"
# Fields of the head's config.json that shape ModelOpt's EagleModule (its eagle_architecture_config).
ARCHITECTURE_FIELDS = ("num_attention_heads", "num_key_value_heads", "head_dim", "intermediate_size", "hidden_act",
                       "rms_norm_eps", "rope_theta", "rope_scaling", "attention_bias", "mlp_bias",
                       "num_hidden_layers")
# Module tensors no head file carries: recomputed from the config.
DERIVED = ("rotary_emb.",)


def read_head(head_dir: Path) -> tuple[dict[str, Any], dict[str, Any]]:
    """(config.json, tensors) of a canonical head; one-line refusal when it is not one."""
    from safetensors.torch import load_file

    head_dir = Path(head_dir)
    config_path, weights = head_dir / "config.json", head_dir / HEAD_FILE
    if not config_path.is_file() or not weights.is_file():
        raise IncompatibleArtifactError(f"{head_dir}: no config.json and {HEAD_FILE} (not a canonical EAGLE-3 head)",
                                        fix="point speculative.eagle3.head at a head trtspec wrote or imported "
                                            "(work/checkpoints/eagle3)")
    return json.loads(config_path.read_text()), load_file(str(weights))


def head_sha256(head_dir: Path) -> str:
    """sha256 of the head's weights file: what a fine-tune's inputs key on."""
    digest = hashlib.sha256()
    with open(Path(head_dir) / HEAD_FILE, "rb") as handle:
        for block in iter(lambda: handle.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def head_architecture(head_dir: Path, target_config: dict[str, Any]) -> dict[str, Any]:
    """The eagle_architecture_config fields the head fixes, checked against the target."""
    config, _ = read_head(head_dir)
    for name in ("hidden_size", "vocab_size"):
        if config.get(name) != target_config.get(name):
            raise IncompatibleArtifactError(
                f"{head_dir}: config.json {name} {config.get(name)} is not the target's {target_config.get(name)}",
                fix="use a head made for this target (speculative.eagle3.head)")
    arch = {name: config[name] for name in ARCHITECTURE_FIELDS if config.get(name) is not None}
    if config.get("draft_vocab_size") and config["draft_vocab_size"] < config["vocab_size"]:
        arch["draft_vocab_size"] = config["draft_vocab_size"]
    layers = (config.get("eagle_config") or {}).get("eagle_aux_hidden_state_layer_ids")
    if not layers or max(layers) >= target_config["num_hidden_layers"] or min(layers) < 0:
        raise IncompatibleArtifactError(
            f"{head_dir}: eagle_config.eagle_aux_hidden_state_layer_ids {layers} is not a list of the target's "
            f"{target_config['num_hidden_layers']} layers", fix="re-import the head against this target")
    arch["eagle_aux_hidden_state_layer_ids"] = list(layers)
    return arch


def head_vocab(head_dir: Path, vocab_size: int, answer_counts=None):
    """The head's draft vocabulary as a prepare.DraftVocab (size None: the whole vocabulary);
    `answer_counts` ([vocab] token counts of the answers) gives the coverage of the new data."""
    import torch

    from trtspec.convert.eagle3.prepare import DraftVocab

    _, tensors = read_head(head_dir)
    rows = tensors["lm_head.weight"].shape[0]
    total = int(answer_counts.sum()) if answer_counts is not None else 0
    if rows >= vocab_size:
        return DraftVocab(None, None, None, 1.0, total, "head")
    if "d2t" not in tensors:
        raise IncompatibleArtifactError(f"{head_dir}: a draft vocabulary of {rows} tokens without d2t",
                                        fix="re-import the head (its d2t maps draft ids to target ids)")
    d2t = tensors["d2t"].long()
    kept = torch.arange(rows) + d2t
    if int(kept.max()) >= vocab_size or int(kept.min()) < 0 or kept.unique().numel() != rows:
        raise IncompatibleArtifactError(f"{head_dir}: d2t maps its {rows} draft ids outside the target's vocabulary "
                                        f"or twice onto one id", fix="re-import the head against this target")
    coverage = float(answer_counts[kept].sum()) / total if total else 0.0
    return DraftVocab(rows, kept, d2t, coverage, total, "head")


def warm_start(model, head_dir: Path) -> dict[str, Any]:
    """Copy every tensor of the canonical head in `head_dir` into `model.eagle_module` (converted
    with `head_architecture`); return {tensors, parameters, head_sha256}."""
    import torch

    _, tensors = read_head(head_dir)
    module = model.eagle_module.state_dict()
    expected = {name for name in module if not name.startswith(DERIVED)}
    missing, unexpected = sorted(expected - set(tensors)), sorted(set(tensors) - expected)
    wrong = {name: (list(tensors[name].shape), list(module[name].shape)) for name in set(tensors) & expected
             if tensors[name].shape != module[name].shape}
    if missing or unexpected or wrong:
        raise IncompatibleArtifactError(
            f"{head_dir}: the head does not fit the converted module (missing {missing[:4]}, unexpected "
            f"{unexpected[:4]}, shapes head/module {dict(list(wrong.items())[:3])})",
            fix="fine-tune a head in trtspec's canonical layout (import it first: speculative.eagle3.head alone)")
    with torch.no_grad():
        for name in expected:
            module[name].copy_(tensors[name].to(module[name].dtype))
    parameters = sum(int(tensors[name].numel()) for name in expected if tensors[name].is_floating_point())
    return {"tensors": len(expected), "parameters": parameters, "head_sha256": head_sha256(head_dir)}


def verify_warm_start(model, head_dir: Path, scratch: Path) -> dict[str, Any]:
    """Export the module as convert exports a head and compare it with `head_dir`, tensor by
    tensor, bit for bit; {tensors_equal, tensors, differing}. Raises when any differs."""
    import torch
    from safetensors.torch import load_file

    from trtspec.convert.eagle3.export import export_eagle3

    _, tensors = read_head(head_dir)
    export_eagle3(model, Path(scratch))
    exported = load_file(str(Path(scratch) / HEAD_FILE))
    # a bfloat16 or float16 head trains in float32 (exact widening): compared in the head's dtype
    differing = sorted(name for name in set(tensors) | set(exported)
                       if name not in tensors or name not in exported
                       or not torch.equal(tensors[name], exported[name].to(tensors[name].dtype)))
    if differing:
        raise IncompatibleArtifactError(f"{head_dir}: after the warm start the module exports other tensors "
                                        f"({differing[:4]})", fix="report this: the warm start did not load the head")
    return {"tensors_equal": True, "tensors": len(tensors), "differing": differing}
