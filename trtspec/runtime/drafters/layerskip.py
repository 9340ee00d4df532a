"""Self-speculation (LayerSkip): the target's first E decoder layers, its final norm and its
lm_head draft for it; no second model is loaded and no second cache kept.

The drafter is a draft model (trtspec.runtime.drafters.draft_model) whose model is a view of the
target: a LlamaForCausalLM of E layers whose modules ARE the target's (embeddings, layers 0..E-1,
norm, lm_head, rotary embedding: the same objects, prepacked as the target's), so it costs no
weight memory, and it runs through the same fast forward (llama_forward). Chains are drafted token
by token (argmax, or a sample under sampling, whose probabilities go to the rejection sampler):
lossless as every draft model; dynamic trees as a draft model grows them.

One cache (`shares_target_kv`): each session drafts in the TARGET's pool, its layers 0..E-1 (the
view's layers are the target's, cache indices 0..E-1), through a SeqKV of its own over the
sequence's block table. Below the committed length those layers hold the target's verified keys
and values, exactly what the draft would compute for them, so a proposal's catch-up is the pending
token alone (a decoding sequence's cache holds every committed token but the last). The draft
writes only past that, in the sequence's own blocks, reserved at admission for the widest draft
(prefix reuse copies kept rows into a sequence's blocks and out of them, never shares one), and
the next verify pass writes those positions again.

Verification from the exit layer (LayerSkip's `forward_remainder`): a chain's rows the draft fed
([pending] + d1..d_{k-1}; d_k too when a confidence stop ended the chain after feeding it) carry
layer E-1's output (Draft.hidden), and the verify pass runs only layers E..L-1 for them
(trtspec.runtime.forward.batch); the rest of its rows (d_k, other sequences', prompt chunks,
trees) go through layers 0..E-1 first. Their keys and values in layers 0..E-1 are the draft's.

Exactness: that is the verify pass's own numbers only where a row's do not depend on which rows
share its call. `reuse_problem` checks it where the engine decides it (per thread count): the
target runs through llama_forward; every linear layer of layers 0..E-1 runs on a kernel whose
rows round alike at every row count (PackedLinear.rows_alike, the probe of
trtspec.runtime.forward.linear_choice, padded to the rows it needs); attention is the compiled
kernel (batch-invariant by construction) or torch's products where gemm_rows' probe finds a row
count that rounds alike and no single key head splits over threads. Elsewhere every row is
verified through every layer (one line on stderr says why, and `reuse_off` keeps it), which is
exact whatever the kernels do, as verification overwrites the draft's rows. The rejection sampler
is unchanged: the target's logits are the same numbers either way.

E is `speculative.layerskip.exit_layer`; empty: a quarter of the layers (at least one).
"""

from __future__ import annotations

from typing import Any

from trtspec.errors import IncompatibleArtifactError
from trtspec.runtime.drafters.draft_model import DraftModelDrafter, DraftModelSession


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


class LayerSkipSession(DraftModelSession):
    """A draft model's session on the target's own cache: the committed positions are cached already."""

    def __init__(self, *args: Any, **kwargs: Any):
        super().__init__(*args, **kwargs)
        self.hidden: list[Any] = []  # this proposal's fed rows' layer-E inputs, per draft forward: [rows, hidden_size]

    def backlog(self, num_tokens: int) -> int:
        return 0  # the pending token alone is fed

    def catch_up(self, tokens: list[int]) -> list[int]:
        """The pending token, at the target's cache length (every committed token but the last)."""
        self.cached.clear()
        self.kv.length = len(tokens) - 1
        return tokens[-1:]


class LayerSkipDrafter(DraftModelDrafter):
    kind = "layerskip"
    shares_target_kv = True
    session_class = LayerSkipSession

    def __init__(self, target: Any, exit_layer: int | None = None):
        self.exit_layer = exit_layer or default_exit_layer(len(target.model.layers))
        super().__init__(early_exit_view(target, self.exit_layer))
        self.kv_config = None  # no pool of its own: the target's (module docstring)
        self.target = target
        self.reuse_off: str | None = None  # why the last proposal's rows were not reused, or None
        self._problems: dict[int, str | None] = {}  # thread count -> reuse_problem's answer
        self._said: set[str] = set()

    def propose_batch(self, sessions, tokens, max_lens):
        import torch

        self.reuse_off = self._reuse_problem()
        drafts = super().propose_batch(sessions, tokens, max_lens)
        for session, draft in zip(sessions, drafts, strict=True):
            if self.reuse_off is None and draft is not None and draft.tree is None and session.hidden:
                draft.hidden, draft.hidden_layer = torch.cat(session.hidden), self.exit_layer
            session.hidden = []
        return drafts

    def _forward(self, sessions, feeds):
        """The draft forward, keeping each fed row's layer-E input for verification where reusing it is exact."""
        if self.reuse_off is not None:
            return super()._forward(sessions, feeds)
        from trtspec.runtime.forward.batch import forward

        logits, hidden = forward(self.model, feeds, {}, (self.exit_layer,))
        for session, rows in zip(sessions, hidden, strict=True):
            session.hidden.append(rows)
        return logits

    def _reuse_problem(self) -> str | None:
        import sys

        import torch

        threads = torch.get_num_threads()
        if threads not in self._problems:
            self._problems[threads] = reuse_problem(self.target, self.exit_layer)
        why = self._problems[threads]
        if why is not None and why not in self._said:
            self._said.add(why)
            print(f"trtspec: layerskip verifies every layer (its first {self.exit_layer} layers' rows are not "
                  f"reused): {why}", file=sys.stderr)
        return why


def reuse_problem(target: Any, exit_layer: int) -> str | None:
    """Why a row's first `exit_layer` layers could compute other numbers in the draft's call than
    in the verify pass's at the current thread count, or None where they cannot (module docstring)."""
    import torch

    from trtspec.runtime.forward import attention_kernel, gemm_rows, llama_forward

    if target.training or not llama_forward.supports(target):
        return "the target does not run through llama_forward (a float32 transformers Llama)"
    for index, layer in enumerate(target.model.layers[:exit_layer]):
        attention, mlp = layer.self_attn, layer.mlp
        for name, linear in (("q_proj", attention.q_proj), ("k_proj", attention.k_proj), ("v_proj", attention.v_proj),
                             ("o_proj", attention.o_proj), ("gate_proj", mlp.gate_proj), ("up_proj", mlp.up_proj),
                             ("down_proj", mlp.down_proj)):
            if not getattr(linear, "rows_alike", False):
                return (f"layer {index}'s {name} runs on a kernel whose rows round apart at some row counts "
                        "(prepack is off, or no kernel rounds alike on this CPU)")
    first = target.model.layers[0].self_attn
    if attention_kernel.wanted() and first.head_dim % 8 == 0:
        return None  # the compiled attention: every row one fixed order of operations
    config, threads = target.config, torch.get_num_threads()
    kv_heads = getattr(config, "num_key_value_heads", None) or config.num_attention_heads
    if kv_heads == 1 and threads > 1:
        return f"one key head on {threads} threads: torch's attention products may round a row by the rows beside it"
    if gemm_rows.probe(gemm_rows.CANDIDATES) is None:
        return "no row count makes torch's attention products round rows alike on this CPU (gemm_rows' probe)"
    return None


def make(parts: Any) -> LayerSkipDrafter:
    """The mode's factory (trtspec.modes row `layerskip`)."""
    return LayerSkipDrafter(parts.target, parts.options.get("exit_layer"))
