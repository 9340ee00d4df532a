"""A Llama forward pass over a packed batch without transformers' per-call plumbing.

Why (measured on SmolLM2-135M, float32, one thread, AMD EPYC; docs/BENCHMARKS-engine.md): a
decode step is ~28 ms of which the linear layers are ~21.5; the rest is ~65 small torch ops per
layer plus, through transformers, ~13 nn.Module calls per layer, keyword plumbing, output
capture decorators and a mask builder. Calling the same operations directly takes ~2 ms (7 %)
off every step, at every batch size.

Contract: `run` computes exactly what transformers' LlamaForCausalLM computes with trtspec's
paged attention (trtspec.runtime.forward.attention): the same torch operations on the same operands in
the same order, or compiled ones that round every element as those do (a layer's q, k, v and its
gate, up each in one row-kernel call where prepack stacked them: trtspec.runtime.forward.fused_linears;
the rotary embedding and the cache write in one call on the compiled attention route:
rope_write.cpp; every decoder layer in one call where the model and batch allow it and the compiled
norm and SiLU agree with torch's here: trtspec.runtime.forward.native_layers), so logits and hidden states are bit-for-bit equal (tests/runtime/forward/test_rt_llama_forward.py
checks it for prefill, verify passes, several sequences and tree masks). It reads the model's
own modules and parameters and changes nothing. `supports` admits only the exact transformers
classes whose forward this mirrors; any other model goes through transformers (trtspec.runtime.forward.batch).
Module forward hooks are not called: the auxiliary layer outputs a drafter needs are returned
in `aux_outputs` instead.
"""

from __future__ import annotations

from typing import Any

from trtspec.runtime.forward.norms import rms_norm

# transformers classes whose forward `run` repeats operation for operation (transformers 5.x)
_LAYERS = {"LlamaDecoderLayer"}
_NORMS = {"LlamaRMSNorm"}
_ACTIVATIONS = {"SiLUActivation", "SiLU"}
_LINEARS = {"Linear", "PackedLinear"}  # not a quantizing wrapper that might rely on hooks


def supports(model: Any) -> bool:
    """True when `model` is a float32 transformers Llama causal LM whose layers `run` mirrors
    (the caller checks that it is in inference mode: that can change)."""
    import torch

    inner = getattr(model, "model", None)
    layers = getattr(inner, "layers", None)
    if type(model).__name__ != "LlamaForCausalLM" or layers is None:
        return False
    if any(parameter.dtype != torch.float32 for parameter in model.parameters()):
        return False  # _rms_norm leaves out the casts a float32 model does not need
    if getattr(model.config, "pretraining_tp", 1) not in (None, 1):
        return False

    def kinds(layer):
        attention, mlp = layer.self_attn, layer.mlp
        linears = (attention.q_proj, attention.k_proj, attention.v_proj, attention.o_proj,
                   mlp.gate_proj, mlp.up_proj, mlp.down_proj)
        return ({type(layer).__name__} <= _LAYERS and {type(layer.mlp.act_fn).__name__} <= _ACTIVATIONS
                and {type(layer.input_layernorm).__name__, type(layer.post_attention_layernorm).__name__} <= _NORMS
                and {type(linear).__name__ for linear in linears} <= _LINEARS)

    return (all(kinds(layer) for layer in layers) and type(inner.norm).__name__ in _NORMS
            and type(model.lm_head).__name__ in _LINEARS)


def run(model: Any, input_ids: Any, position_ids: Any, layout: Any, keep: Any,
        aux_outputs: Any = None, aux_ids: tuple[int, ...] = ()):
    """Logits of the `keep` rows, storing layer outputs for `aux_ids` in `aux_outputs`.

    # input_ids, position_ids: [1, T] long; keep: [num_logits] long row indices
    Returns [1, num_logits, vocab_size] logits. aux_outputs[i] = [1, T, hidden] output of layer
    i - 1 (transformers' hidden_states index i), as the engine's forward hooks would store it.
    """
    hidden = embed(model, input_ids)
    return head(model, decoder_layers(model, hidden, position_ids, layout, 0, None, aux_outputs, aux_ids), keep)


def embed(model: Any, input_ids: Any):
    """# input_ids: [1, T] long -> [1, T, hidden_size]: the first layer's input"""
    import torch.nn.functional as F

    embeddings = model.model.embed_tokens
    return F.embedding(input_ids, embeddings.weight, embeddings.padding_idx)


def head(model: Any, hidden: Any, keep: Any):
    """The final norm and lm_head on the `keep` rows. # hidden: [1, T, hidden_size] -> [1, len(keep), vocab]"""
    return model.lm_head.forward(rms_norm(hidden, model.model.norm)[:, keep, :])


def decoder_layers(model: Any, hidden: Any, position_ids: Any, layout: Any, first: int = 0, last: int | None = None,
                   aux_outputs: Any = None, aux_ids: tuple[int, ...] = ()):
    """Decoder layers first..last - 1 (None: to the end) over `hidden`, the input of layer `first`;
    returns the output of layer last - 1. A range's rows are the layout's: each writes its keys and
    values in those layers only (trtspec.runtime.forward.batch runs a verify pass in two ranges).
    # hidden: [1, T, hidden_size]; position_ids: [1, T] long; aux_ids: as `run`'s, within the range"""
    import torch.nn.functional as F

    inner = model.model
    last = len(inner.layers) if last is None else last
    row_cos, row_sin = inner.rotary_emb(hidden, position_ids)  # [1, T, head_dim]
    cos, sin = row_cos.unsqueeze(1), row_sin.unsqueeze(1)
    rows = hidden.shape[1]
    wanted = set(aux_ids)
    from trtspec.runtime.forward import native_layers

    compiled = native_layers.run(model, hidden, row_cos, row_sin, layout, aux_outputs, wanted, first, last)
    layers = () if compiled is not None else inner.layers[first:last]  # where the compiled loop ran, it ran them all
    for index, layer in enumerate(layers, start=first + 1):
        attention, mlp = layer.self_attn, layer.mlp
        # 1. attention block
        x = rms_norm(hidden, layer.input_layernorm)
        shape = (1, rows, -1, attention.head_dim)
        query, key, value = _projections(x, attention.q_proj, attention.k_proj, attention.v_proj)
        attended = layout.attend_unrotated(attention.layer_idx, query, key, value, row_cos, row_sin,
                                           attention.head_dim, attention.scaling)
        if attended is None:  # torch's attention route: rotate here
            query, key, value = (y.view(shape).transpose(1, 2) for y in (query, key, value))
            query = (query * cos) + (_rotate_half(query) * sin)
            key = (key * cos) + (_rotate_half(key) * sin)
            attended = layout.attend(attention.layer_idx, query, key, value, attention.scaling)
        hidden = hidden + attention.o_proj.forward(attended.reshape(1, rows, -1).contiguous())
        # 2. MLP block
        x = rms_norm(hidden, layer.post_attention_layernorm)
        gate, up = _projections(x, mlp.gate_proj, mlp.up_proj)
        hidden = hidden + mlp.down_proj.forward(F.silu(gate) * up)
        if index in wanted:
            aux_outputs[index] = hidden
    return hidden


def _projections(x: Any, *linears: Any) -> list[Any]:
    """Each linear layer applied to `x`: in one call where prepack stacked them
    (trtspec.runtime.forward.fused_linears: the same numbers, bit for bit), else one by one."""
    fused = getattr(linears[0], "fused", None)
    if fused is not None and fused.members == linears and fused.usable():
        return fused(x)
    return [linear.forward(x) for linear in linears]


def _rotate_half(x: Any):
    import torch

    half = x.shape[-1] // 2
    return torch.cat((-x[..., half:], x[..., :half]), dim=-1)
