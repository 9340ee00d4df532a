"""Self-speculation (LayerSkip): the target's first E decoder layers, its final norm and its
lm_head draft for it; no second model is loaded.

The drafter is a draft model (trtspec.runtime.drafters.draft_model) whose model is a view of the
target: a LlamaForCausalLM of E layers whose modules ARE the target's (embeddings, layers 0..E-1,
norm, lm_head, rotary embedding: the same objects, prepacked as the target's), so it costs no
weight memory, and it runs through the same fast forward (llama_forward). It keeps its own paged
cache of E layers (kv_config), rolled back and caught up as a draft model's is: the early layers'
keys and values are computed again by the draft's catch-up rather than shared with the target's
verification pass (exact either way; sharing them is the saving LayerSkip's own code makes, left
for later). Chains are drafted token by token (argmax, or a sample under sampling, whose
probabilities go to the rejection sampler): lossless as every draft model.

E is `speculative.layerskip.exit_layer`; empty: a quarter of the layers (at least one).
"""

from __future__ import annotations

from typing import Any

from trtspec.errors import IncompatibleArtifactError
from trtspec.runtime.drafters.draft_model import DraftModelDrafter


def default_exit_layer(num_layers: int) -> int:
    """A quarter of the layers, at least one (LayerSkip's Llama 2 7B recipe exits at 8 of 32)."""
    return max(1, num_layers // 4)


def early_exit_view(target: Any, exit_layer: int) -> Any:
    """A causal LM of the target's first `exit_layer` layers sharing every module with it."""
    import copy

    import torch
    from torch import nn

    layers = target.model.layers
    if not 1 <= exit_layer < len(layers):
        raise IncompatibleArtifactError(
            f"speculative.layerskip.exit_layer {exit_layer} must lie in 1..{len(layers) - 1} "
            f"(the target has {len(layers)} decoder layers)", fix="set it below num_hidden_layers, or leave it empty")
    config = copy.deepcopy(target.config)
    config.num_hidden_layers = exit_layer
    if isinstance(getattr(config, "layer_types", None), list):
        config.layer_types = config.layer_types[:exit_layer]
    with torch.device("meta"):  # the view's own modules are placeholders, replaced below
        view = type(target)(config)
    view.model.embed_tokens = target.model.embed_tokens
    view.model.layers = nn.ModuleList(list(layers[:exit_layer]))
    view.model.norm = target.model.norm
    view.model.rotary_emb = target.model.rotary_emb
    view.lm_head = target.lm_head
    left = [name for name, tensor in [*view.named_parameters(), *view.named_buffers()] if tensor.is_meta]
    if left:
        raise IncompatibleArtifactError(f"layerskip: the early-exit view of {type(target).__name__} left {left[:3]} "
                                        "unshared", fix="use mode draft-target with a first-layers copy instead")
    return view.eval()


class LayerSkipDrafter(DraftModelDrafter):
    kind = "layerskip"

    def __init__(self, target: Any, exit_layer: int | None = None):
        self.exit_layer = exit_layer or default_exit_layer(len(target.model.layers))
        super().__init__(early_exit_view(target, self.exit_layer))


def make(parts: Any) -> LayerSkipDrafter:
    """The mode's factory (trtspec.modes row `layerskip`)."""
    return LayerSkipDrafter(parts.target, parts.options.get("exit_layer"))
