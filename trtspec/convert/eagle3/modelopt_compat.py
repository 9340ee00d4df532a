"""The ModelOpt differences EAGLE-3 conversion meets, in one place.

trtspec pins ModelOpt 0.47 for itself, but `trtspec convert` must also run inside the Triton
TensorRT-LLM containers, whose TensorRT-LLM (1.1, 1.2) requires `nvidia-modelopt[torch]~=0.37.0`
(version table: trtspec/builders/contract_data/containers.json). The two differ where convert
touches ModelOpt's EAGLE model (read from modelopt/torch/speculative/plugins/transformers.py of
0.37.0 and from the installed 0.47):

| what                         | 0.37.0                                   | 0.47                                   |
|------------------------------|------------------------------------------|----------------------------------------|
| mtsp.convert eagle keys      | no eagle_use_torch_compile / ..._rope_... | both (extra keys forbidden in 0.37)    |
| architecture from the target | hidden/vocab sizes are the preset's      | filled in from the base model          |
| default auxiliary layers     | (no public helper)                       | hf_eagle.default_eagle_aux_layer_ids   |
| embedding norm of layer 0    | eagle_module.input_embeds_norm           | layers[0].input_layernorm              |
| head / target lm_head        | eagle_lm_head / model.lm_head            | lm_head / _base_model_lm_head          |
| decoder stack of the target  | model.model                              | model.get_submodule(base_model_path)   |
| target forward for features  | _base_model_forward + aux-layer hooks    | _eagle_base_model_forward              |
| train-time-test steps        | 4, fixed                                 | model.eagle_ttt_steps                  |
| _eagle_loss                  | (hidden, logits, eagle hidden, eagle     | (softmax, tokens, eagle logits, mask)  |
|                              | logits, mask) -> (reg, cls, acc float)   | -> (loss, acc tensor)                  |
| export                       | export_hf_checkpoint, midlayer.* names   | export_speculative_decoding            |

Only this module (and eagle3_export.py for the export) knows; the rest of convert asks it.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any


def default_aux_layer_ids(num_layers: int) -> list[int]:
    """ModelOpt's default EAGLE-3 auxiliary layers, (1, n/2 - 1, n - 4) clipped at 0: the rule both
    0.37 (HFEagleModel._set_default_aux_hidden_state_layers) and 0.47 (default_eagle_aux_layer_ids)
    apply, and the layers TensorRT-LLM captures by default."""
    return sorted({1, max(0, num_layers // 2 - 1), max(0, num_layers - 4)})


def eagle_config(config: dict[str, Any], target_config: dict[str, Any]) -> dict[str, Any]:
    """The `mtsp.convert(model, [("eagle", ...)])` config the installed ModelOpt accepts."""
    from modelopt.torch.speculative.config import EagleConfig

    known = set(EagleConfig.model_fields)
    accepted = {key: value for key, value in config.items() if key in known}
    if "eagle_use_torch_compile" not in known:  # 0.37: the preset's sizes are Llama-3.1-8B's
        arch = dict(accepted["eagle_architecture_config"])
        arch.update(hidden_size=target_config["hidden_size"], vocab_size=target_config["vocab_size"],
                    max_position_embeddings=target_config.get("max_position_embeddings", 2048))
        arch.setdefault("draft_vocab_size", target_config["vocab_size"])
        if arch["draft_vocab_size"] > target_config["vocab_size"]:
            arch["draft_vocab_size"] = target_config["vocab_size"]
        accepted["eagle_architecture_config"] = arch
    return accepted


@dataclass
class HeadParts:
    """The modules convert initialises: the EAGLE head and the target it reads."""

    head: Any             # model.eagle_module
    layer: Any            # the head's first decoder layer
    embeds_norm: Any      # the norm applied to the token embeddings before layer 0's attention
    head_lm_head: Any     # the head's own lm_head (reduced vocabulary), or None
    target_layers: Any    # the target's decoder layers
    target_norm: Any      # the target's final norm
    target_lm_head: Any


def head_parts(model) -> HeadParts:
    head = model.eagle_module
    layer = head.layers[0]
    embeds_norm = getattr(head, "input_embeds_norm", None)
    if embeds_norm is None or hasattr(layer.input_layernorm, "weight"):
        embeds_norm = layer.input_layernorm
    base = model.get_submodule(model.base_model_path) if hasattr(model, "base_model_path") else model.model
    target_lm_head = getattr(model, "_base_model_lm_head", None) or model.lm_head
    return HeadParts(head=head, layer=layer, embeds_norm=embeds_norm,
                     head_lm_head=getattr(head, "lm_head", None) or getattr(head, "eagle_lm_head", None),
                     target_layers=base.layers, target_norm=base.norm, target_lm_head=target_lm_head)


@dataclass
class BaseOutputs:
    """The frozen target's forward, as offline EAGLE-3 training reads it."""

    aux_hiddens: Any      # [B, L, k*H] the k auxiliary layers' hidden states
    out_hiddens: Any      # [B, L, H] final (post-norm) hidden states
    input_embeds: Any     # [B, L, H] token embeddings
    logits: Any           # [B, L, V] full-vocabulary logits


def base_model_forward(model, input_ids, attention_mask) -> BaseOutputs:
    """Run the target once under no_grad with ModelOpt's own hooks picking the auxiliary layers."""
    import torch

    with torch.no_grad():
        if hasattr(model, "_eagle_base_model_forward"):  # 0.47
            outputs, _ = model._eagle_base_model_forward(input_ids, attention_mask, None, None, True, None)
            return BaseOutputs(outputs.aux_hiddens, outputs.out_hiddens, outputs.input_embeds, outputs.logits)
        # 0.37: the forward hooks on the auxiliary layers fill model._aux_hidden_states
        hidden, logits, _, _ = model._base_model_forward(input_ids, attention_mask, None, None, True, None)
        aux = torch.cat(model.pop_aux_hidden_states(), dim=-1)
        return BaseOutputs(aux, hidden, model.model.embed_tokens(input_ids), logits)


def ttt_steps(model) -> int:
    """Train-time-test steps of one EAGLE forward (0.37 always runs four)."""
    return int(getattr(model, "eagle_ttt_steps", 4))


def wrap_eagle_loss(model, length: int, share):
    """model._eagle_loss wrapped so each step's loss is scaled by `share(step, accuracy)`.

    `share` returns the weight of that step's loss and records the accuracy (a 0-d tensor).
    0.47 passes eagle_logits[:, k:-1] at step k, so the step is read from its length; 0.37 calls
    its loss once per step, in order, within one forward, so the step is counted.
    """
    import inspect

    import torch

    original = model._eagle_loss
    if len(inspect.signature(original).parameters) == 4:  # 0.47
        def scaled(base_softmax, base_tokens, eagle_logits, loss_mask):
            loss, accuracy = original(base_softmax, base_tokens, eagle_logits, loss_mask)
            weight = share(length - 1 - eagle_logits.shape[1], accuracy.detach())
            return loss * weight, accuracy
        return scaled
    calls = {"n": 0}

    def scaled_037(base_hidden, base_logits, eagle_hidden, eagle_logits, loss_mask):
        regression, classification, accuracy = original(base_hidden, base_logits, eagle_hidden, eagle_logits,
                                                        loss_mask)
        step = calls["n"] % ttt_steps(model)
        calls["n"] += 1
        weight = share(step, torch.as_tensor(float(accuracy)))
        return regression * weight, classification * weight, accuracy
    return scaled_037
