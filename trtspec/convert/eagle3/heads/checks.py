"""Every check of an imported head against its target, before anything is written.

`check_head(head, target_dir, target_config, max_seq_len=...)` refuses with one line each
(IncompatibleArtifactError: the field, what it holds, what the target needs, and the fix):

  unsupported     settings whose math the cpu engine does not run (norm_before_fc, fc_norm, ...)
  tensors         the decoder layer, fc and norm present; lm_head rows = draft_vocab_size
  hidden_size     the head's (and fc's input, 3 x target_hidden_size) against the target's
  vocab_size      the head's target vocabulary against the target's embedding rows
  draft_vocab     not above the target's vocabulary
  d2t             length draft_vocab_size; target id = i + d2t[i] inside the vocabulary, distinct,
                  and inside t2d where the head has it (a d2t of absolute ids is named as such)
  embed_tokens    where the head carries one: equal to the target's (a placeholder embedding is
                  the known silent failure: TorchSpec issue #38)
  max_position_embeddings   (with rope scaling: its reach) at least build.max_seq_len
  rope            rope_theta written; rope_type one transformers knows, its parameters complete
  layer ids       as many as fc reads, distinct, inside the target's depth (canonical OUTPUT ids)

It returns a `Checked`: the canonical layer ids and the tensors to write (t2d and a checked
embed_tokens dropped, lm_head from the target where the head has none, d2t from t2d where
only t2d is written), with a note for each such change. Reads the target's config and its
embedding / lm_head tensors only.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from trtspec.convert.eagle3.heads import conventions as conv
from trtspec.convert.eagle3.heads.layouts import Head
from trtspec.errors import IncompatibleArtifactError

LAYER_TENSORS = ("self_attn.q_proj.weight", "self_attn.k_proj.weight", "self_attn.v_proj.weight",
                 "self_attn.o_proj.weight", "mlp.gate_proj.weight", "mlp.up_proj.weight", "mlp.down_proj.weight",
                 "input_layernorm.weight", "post_attention_layernorm.weight")
FIRST_LAYER_TENSORS = (*LAYER_TENSORS, "hidden_norm.weight")


@dataclass
class Checked:
    layer_ids: list[int]                      # canonical: outputs of target layers
    tensors: dict[str, Any]                   # what the canonical head holds
    notes: list[str] = field(default_factory=list)


def refuse(what: str, fix: str) -> IncompatibleArtifactError:
    return IncompatibleArtifactError(f"EAGLE-3 head: {what}", fix=fix)


def check_head(head: Head, target_dir: Path, target_config: dict[str, Any], *, max_seq_len: int) -> Checked:
    """Refuse (one line) what does not fit the target; return the canonical ids and tensors."""
    import torch

    tensors, notes = dict(head.tensors), []
    if head.unsupported:
        raise refuse(f"needs {', '.join(head.unsupported)}, which trtspec's cpu engine does not compute",
                     fix="use a head without these settings (Llama EAGLE-3 heads have none)")
    hidden, vocab = int(target_config["hidden_size"]), int(target_config["vocab_size"])
    _check_tensors(head, tensors)
    _check_hidden(head, tensors, hidden)
    if int(head.llama["vocab_size"]) != vocab:
        raise refuse(f"vocab_size {head.llama['vocab_size']} (the vocabulary it was trained for) but the target's "
                     f"is {vocab}", fix="use a head trained for this target (same tokenizer and embedding rows)")
    draft_vocab = head.draft_vocab_size
    if draft_vocab > vocab:
        raise refuse(f"draft_vocab_size {draft_vocab} is above the target's vocabulary {vocab}",
                     fix="use a head for this target (draft_vocab_size at most vocab_size)")
    target_tensors = _target_tensors(target_dir, target_config)
    if "lm_head.weight" not in tensors:
        if draft_vocab != vocab:
            raise refuse(f"no lm_head.weight, and its draft vocabulary ({draft_vocab}) is smaller than the target's",
                         fix="use a complete export of the head")
        tensors["lm_head.weight"] = target_tensors["lm_head"].to(tensors["fc.weight"].dtype).clone()
        notes.append("lm_head.weight: the head has none; the target's copied in (as ModelOpt's export does)")
    rows = tensors["lm_head.weight"].shape[0]
    if rows != draft_vocab:
        raise refuse(f"lm_head.weight has {rows} rows but draft_vocab_size is {draft_vocab}",
                     fix="fix draft_vocab_size in config.json to the lm_head's rows")
    _check_vocab_map(tensors, draft_vocab, vocab, notes)
    embed = tensors.pop("embed_tokens.weight", None)
    if embed is not None:
        reference = target_tensors["embed"]
        low = embed.dtype if embed.element_size() <= reference.element_size() else reference.dtype
        if embed.shape != reference.shape or not torch.equal(embed.to(low), reference.to(low)):
            diff = "shape " + "x".join(map(str, embed.shape)) if embed.shape != reference.shape else \
                f"max difference {float((embed.float() - reference.float()).abs().max()):.3g}"
            raise refuse(f"embed_tokens.weight differs from the target's ({diff}): a placeholder or another "
                         "model's embedding", fix="remove embed_tokens.weight from the head (trtspec uses the "
                         "target's) or pair the head with the target it was trained on")
        notes.append("embed_tokens.weight: equal to the target's; not kept (the target's is used)")
    if tensors.pop("t2d", None) is not None:
        notes.append("t2d: consistent with d2t; not kept (export-head writes it from d2t)")
    _check_positions(head, max_seq_len)
    _check_rope(head)
    ids = _check_layer_ids(head, tensors, target_config)
    return Checked(layer_ids=ids, tensors=tensors, notes=notes)


def _check_tensors(head: Head, tensors: dict[str, Any]) -> None:
    layers = int(head.llama.get("num_hidden_layers") or 1)
    wanted = ["fc.weight", "norm.weight"] + [f"layers.0.{n}" for n in FIRST_LAYER_TENSORS]
    wanted += [f"layers.{i}.{n}" for i in range(1, layers) for n in LAYER_TENSORS]
    missing = [name for name in wanted if name not in tensors]
    if missing:
        raise refuse(f"tensors {', '.join(missing[:4])}{' ...' if len(missing) > 4 else ''} missing "
                     f"(read as {head.layout}: {', '.join(head.files)})",
                     fix="give a complete EAGLE-3 head export (the decoder layer, fc, norm, lm_head)")


def _check_hidden(head: Head, tensors: dict[str, Any], hidden: int) -> None:
    own = int(head.llama["hidden_size"])
    target_hidden = int(head.llama.get("target_hidden_size") or own)
    if own != hidden or target_hidden != hidden:
        raise refuse(f"hidden_size {own} (target_hidden_size {target_hidden}) but the target's is {hidden}",
                     fix="use a head trained for this target (the cpu engine feeds it the target's embeddings)")
    q = tensors["layers.0.self_attn.q_proj.weight"]
    if q.shape[1] != 2 * hidden:
        raise refuse(f"layers.0.self_attn.q_proj.weight takes {q.shape[1]} inputs, not 2 x hidden_size ({2 * hidden})",
                     fix="give an EAGLE-3 head (EAGLE-1/2 heads do not concatenate embeddings and hidden states)")


def _check_vocab_map(tensors: dict[str, Any], draft_vocab: int, vocab: int, notes: list[str]) -> None:
    import torch

    d2t, t2d = tensors.get("d2t"), tensors.get("t2d")
    if t2d is not None and (t2d.dim() != 1 or t2d.shape[0] != vocab):
        raise refuse(f"t2d has shape {list(t2d.shape)}, not [{vocab}] (one flag per target token)",
                     fix="use a head made for this target's vocabulary")
    if d2t is None and draft_vocab < vocab:
        if t2d is None or int(t2d.bool().sum()) != draft_vocab:
            raise refuse(f"no d2t, and the draft vocabulary ({draft_vocab}) is smaller than the target's ({vocab})",
                         fix="use a complete export of the head (with d2t: target id = i + d2t[i])")
        kept = torch.nonzero(t2d.bool()).flatten()
        tensors["d2t"] = d2t = kept - torch.arange(draft_vocab)
        notes.append("d2t: derived from t2d (target id = i + d2t[i])")
    if d2t is None:
        return
    d2t = d2t.long()
    if d2t.dim() != 1 or d2t.shape[0] != draft_vocab:
        raise refuse(f"d2t has shape {list(d2t.shape)}, not [{draft_vocab}] (one offset per draft token)",
                     fix="use a complete export of the head (d2t: target id = i + d2t[i])")
    ids = torch.arange(draft_vocab) + d2t
    if draft_vocab == vocab and not bool(d2t.any()):
        tensors.pop("d2t")
        notes.append("d2t: all zeros with the full vocabulary; not kept")
        return
    valid = bool(((ids >= 0) & (ids < vocab)).all()) and ids.unique().numel() == draft_vocab
    if t2d is not None and valid:
        valid = bool(t2d.bool()[ids].all()) and int(t2d.bool().sum()) == draft_vocab
    if not valid:
        absolute = bool(((d2t >= 0) & (d2t < vocab)).all()) and d2t.unique().numel() == draft_vocab and (
            t2d is None or bool(t2d.bool()[d2t].all()))
        what = "holds target ids, not offsets" if absolute else "maps draft tokens outside the target vocabulary, " \
            "twice onto one token, or off t2d"
        raise refuse(f"d2t {what} (target id = i + d2t[i] must be distinct and below {vocab})",
                     fix="store offsets: d2t[i] = target_id[i] - i" if absolute else
                     "use a head made for this target's vocabulary")
    tensors["d2t"] = d2t


def _check_positions(head: Head, max_seq_len: int) -> None:
    positions = int(head.llama["max_position_embeddings"])
    scaling = head.llama.get("rope_scaling") or {}
    reach = positions
    if scaling.get("factor") and scaling.get("original_max_position_embeddings"):
        reach = max(positions, int(float(scaling["factor"]) * int(scaling["original_max_position_embeddings"])))
    if reach < max_seq_len:
        raise refuse(f"max_position_embeddings {positions} (rope scaling reaches {reach}) is below build.max_seq_len "
                     f"{max_seq_len}: its drafts fail past that many tokens",
                     fix=f"set build.max_seq_len to at most {reach}, or use a head trained for longer contexts")


def _check_rope(head: Head) -> None:
    if not head.llama.get("rope_theta"):
        raise refuse("rope_theta is not written in its config.json (consumers would fall back to 10000)",
                     fix="write the rope_theta it was trained with into config.json (usually the target's)")
    scaling = head.llama.get("rope_scaling")
    if not scaling:
        return
    from transformers import LlamaConfig
    from transformers.models.llama.modeling_llama import LlamaRotaryEmbedding

    rope_type = scaling.get("rope_type") or scaling.get("type")
    try:  # rope_scaling + rope_theta: what transformers 4 reads, and 5 maps onto rope_parameters
        config = LlamaConfig(hidden_size=head.llama["hidden_size"], num_attention_heads=head.llama["num_attention_heads"],
                             head_dim=head.llama["head_dim"], max_position_embeddings=head.llama["max_position_embeddings"],
                             rope_scaling={**scaling, "rope_type": rope_type}, rope_theta=head.llama["rope_theta"])
        LlamaRotaryEmbedding(config=config)
    except (KeyError, ValueError, TypeError) as error:
        raise refuse(f"rope_scaling {scaling} is not a rope transformers can compute ({error})",
                     fix="fix rope_scaling in config.json (rope_type and its parameters)") from None


def _check_layer_ids(head: Head, tensors: dict[str, Any], target_config: dict[str, Any]) -> list[int]:
    layers = int(target_config["num_hidden_layers"])
    fc_inputs = tensors["fc.weight"].shape[1] // int(target_config["hidden_size"])
    written = head.layer_ids if head.layer_ids else "default"
    ids = head.output_layer_ids(layers)
    told = f"{head.ids_from} {written}, read as {conv.DESCRIBE[head.convention]}"
    if len(ids) != fc_inputs or len(set(ids)) != len(ids):
        raise refuse(f"{told}: {len(ids)} layers, fc reads {fc_inputs} distinct ones",
                     fix="write the layers the head was trained on into its config.json")
    outside = [i for i in ids if not 0 <= i < layers]
    if outside:
        raise refuse(f"{told} = outputs of layers {ids}, outside the target's {layers} layers (0..{layers - 1})",
                     fix="use a head for this target, or set speculative.eagle3.head_layer_convention to the "
                         "convention the ids were written in")
    return sorted(ids)


def _target_tensors(target_dir: Path, target_config: dict[str, Any]) -> dict[str, Any]:
    """The target's embedding and lm_head (its embedding when tied), read from its safetensors."""
    from safetensors import safe_open

    found: dict[str, Any] = {}
    for file in sorted(Path(target_dir).glob("*.safetensors")):
        with safe_open(str(file), "pt") as handle:
            for key, name in (("model.embed_tokens.weight", "embed"), ("lm_head.weight", "lm_head")):
                if key in handle.keys():
                    found[name] = handle.get_tensor(key)
    if "embed" not in found:
        raise refuse(f"the target {target_dir} has no model.embed_tokens.weight", fix="use a Llama-style target")
    found.setdefault("lm_head", found["embed"])  # tie_word_embeddings
    return found
