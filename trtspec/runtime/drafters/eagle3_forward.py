"""The EAGLE-3 head's layers over a packed batch without transformers' per-call plumbing.

Why (profiled on SmolLM2-135M's shape, float32, in process, AMD EPYC; docs/BENCHMARKS-log.md,
"Where an EAGLE-3 draft step goes"): a draft position is one head forward, a single decoder layer
and a 4,096-row lm_head, about a twentieth of the target's weights, yet it cost ~2x its weight
share: ~1.6 ms CPU of linear layers and ~1.4 ms of small torch operations and Python, among them
~15 nn.Module calls, seven separate linear calls (q, k, v, o, gate, up, down), a rotary embedding
and cache write in torch and keyword plumbing. This route takes ~0.3 ms (~10 %) off a head forward
alone (the rest of the small operations remain). This module calls the same operations directly,
as trtspec.runtime.forward.llama_forward does for the target: q, k and v in one row-kernel call
and gate and up in one where prepack stacked them (trtspec.runtime.forward.fused_linears: the same
numbers, bit for bit), the rotary embedding and cache write in one compiled call where the batch
takes the kernel attention route (Layout.attend_unrotated, proven equal by llama_forward's tests),
the norms and SiLU x up compiled where native_layers' probe finds them exact here, and the rotary
cos and sin read from a table of the module's own rows (`_rotary`).

Contract: `layers` returns exactly what Eagle3Drafter.forward_modules computes through the
head's transformers modules (tests/runtime/drafters/test_rt_eagle3_forward.py checks it bit for
bit, one and several sessions, catch-up rows and tree masks, every HEAD_FORWARDS kind). It reads
the head's own modules and parameters and changes nothing. `supports` admits only heads built
of the transformers classes whose forward this repeats; any other goes through the modules.
TRTSPEC_EAGLE3_FORWARD=modules keeps the module path (to compare the two).
"""

from __future__ import annotations

import os
from typing import Any

from trtspec.runtime.forward.llama_forward import _projections, _rotate_half
from trtspec.runtime.forward.norms import rms_norm

_LAYERS = {"LlamaDecoderLayer"}
_NORMS = {"LlamaRMSNorm"}
_ACTIVATIONS = {"SiLUActivation", "SiLU"}
_LINEARS = {"Linear", "PackedLinear"}


def supports(head: Any) -> bool:
    """True when every layer of `head` is a float32 transformers Llama decoder layer (the first
    with its hidden_norm) whose forward `layers` repeats, and the switch does not ask for modules."""
    import torch

    if os.environ.get("TRTSPEC_EAGLE3_FORWARD", "direct") == "modules":
        return False
    if any(parameter.dtype != torch.float32 for parameter in head.parameters()):
        return False
    if getattr(head.config, "pretraining_tp", 1) not in (None, 1):
        return False

    def kinds(layer: Any) -> bool:
        attention, mlp = layer.self_attn, layer.mlp
        linears = (attention.q_proj, attention.k_proj, attention.v_proj, attention.o_proj,
                   mlp.gate_proj, mlp.up_proj, mlp.down_proj)
        return (type(layer).__name__ in _LAYERS and type(mlp.act_fn).__name__ in _ACTIVATIONS
                and {type(layer.input_layernorm).__name__, type(layer.post_attention_layernorm).__name__} <= _NORMS
                and {type(linear).__name__ for linear in linears} <= _LINEARS)

    return (all(kinds(layer) for layer in head.layers) and type(head.layers[0].hidden_norm).__name__ in _NORMS
            and type(head.norm).__name__ in _NORMS)


def layers(head: Any, layout: Any, embeds: Any, h: Any, positions: Any):
    """The EAGLE layers over packed rows; returns every row's pre-norm output.
    # embeds, h: [1, T, hidden] (the tokens' embeddings, the paired hidden rows); positions: [1, T] long"""
    import torch
    import torch.nn.functional as F

    row_cos, row_sin = _rotary(head.rotary_emb, h, positions)  # [1, T, head_dim]
    rows = h.shape[1]
    compiled = _compiled(head)
    norm = rms_norm if compiled is None else compiled.norm
    for index, layer in enumerate(head.layers):
        attention, mlp = layer.self_attn, layer.mlp
        residual = h
        if index == 0:  # HEAD_FORWARDS (eagle3.py): where the hidden norm sits, what the residual is
            hidden = norm(norm(h, layer.input_layernorm) if head.forward_kind == "modelopt" else h, layer.hidden_norm)
            if head.forward_kind == "norm_before_residual":
                residual = hidden
            x = torch.cat([norm(embeds, layer.input_layernorm), hidden], dim=-1)
        else:
            x = norm(h, layer.input_layernorm)
        query, key, value = _projections(x, attention.q_proj, attention.k_proj, attention.v_proj)
        attended = layout.attend_unrotated(attention.layer_idx, query, key, value, row_cos, row_sin,
                                           attention.head_dim, attention.scaling)
        if attended is None:  # torch's attention route: rotate here
            shape = (1, rows, -1, attention.head_dim)
            query, key, value = (y.view(shape).transpose(1, 2) for y in (query, key, value))
            cos, sin = row_cos.unsqueeze(1), row_sin.unsqueeze(1)
            query = (query * cos) + (_rotate_half(query) * sin)
            key = (key * cos) + (_rotate_half(key) * sin)
            attended = layout.attend(attention.layer_idx, query, key, value, attention.scaling)
        h = residual + attention.o_proj.forward(attended.reshape(1, rows, -1).contiguous())
        x = norm(h, layer.post_attention_layernorm)
        activated = compiled.silu_mul(x, mlp) if compiled is not None else None
        if activated is None:
            gate, up = _projections(x, mlp.gate_proj, mlp.up_proj)
            activated = F.silu(gate) * up
        h = h + mlp.down_proj.forward(activated)
    return h


def readout(head: Any, rows: Any):
    """Head logits of kept pre-norm rows: lm_head(norm(rows)). # rows: [N, hidden] -> [N, draft_vocab]"""
    compiled = _compiled(head)
    return head.lm_head.forward((rms_norm if compiled is None else compiled.norm)(rows, head.norm))


TABLE_ROWS = 4096  # positions in the first rotary table (it doubles when a position passes it)


def _rotary(rotary: Any, h: Any, positions: Any):
    """rotary(h, positions), read from a table of every position that `rotary` computed once: its
    ~10 small operations a forward become one index. Each row of the table is the module's own
    output for that position (the product of one inverse frequency and one position, then cos and
    sin, elementwise), checked at build on single positions and a batch; where a check differs or
    the rope type depends on the sequence (anything but default), the module runs every forward.
    # h: [1, T, hidden] float32; positions: [1, T] long -> cos, sin [1, T, head_dim]"""
    table = getattr(rotary, "trtspec_table", None)
    last = int(positions.max())
    if table is None or (table is not False and table[0].shape[1] <= last):
        size = max(last + 1, TABLE_ROWS if table is None else 2 * table[0].shape[1])
        table = rotary.trtspec_table = _rotary_table(rotary, h, size)
    if table is False:
        return rotary(h, positions)
    return table[0][:, positions[0]], table[1][:, positions[0]]


def _rotary_table(rotary: Any, h: Any, size: int):
    """(cos, sin) [1, size, head_dim] of positions 0..size - 1, or False (`_rotary`)."""
    import torch

    if getattr(rotary, "rope_type", "default") != "default" or h.dtype != torch.float32:
        return False
    cos, sin = rotary(h, torch.arange(size)[None])
    probe = torch.tensor([[0, 1, 2, 3, 63, 255, size // 2, size - 1]])
    checks = [(rotary(h, probe[:, i:i + 1]), probe[0, i:i + 1]) for i in range(probe.shape[1])]
    checks.append((rotary(h, probe), probe[0]))
    same = all(torch.equal(c, cos[:, at]) and torch.equal(s, sin[:, at]) for (c, s), at in checks)
    return (cos, sin) if same else False


class _Compiled:
    """The RMS norm and SiLU x up of llama_layers.cpp (trtspec.runtime.forward.native_layers), one
    foreign call each instead of 6 and 2 torch operations: where native_layers' probe found them
    equal to torch's, bit for bit, on the head's sizes at this thread count."""

    def __init__(self, library: Any, exp: tuple[int, int], eps: float, intermediate: int):
        self.library, self.exp, self.eps, self.intermediate = library, exp, eps, intermediate

    def norm(self, x: Any, module: Any):
        """rms_norm(x, module). # x: [..., hidden] float32"""
        import torch

        if module.variance_epsilon != self.eps or x.dtype != torch.float32:
            return rms_norm(x, module)
        x = x if x.is_contiguous() else x.contiguous()
        out = torch.empty_like(x)
        size = x.shape[-1]
        self.library.llama_rms_norm(x.data_ptr(), module.weight.data_ptr(), self.eps, x.numel() // size, size,
                                    out.data_ptr())
        return out

    def silu_mul(self, x: Any, mlp: Any):
        """F.silu(gate_proj(x)) * up_proj(x) from gate and up in one row-kernel call, or None where
        prepack did not stack them (the caller runs torch's). # x: [1, T, hidden] -> [1, T, intermediate]"""
        import torch

        from trtspec.runtime.kernels import rowdot

        fused = getattr(mlp.gate_proj, "fused", None)
        if (fused is None or fused.members != (mlp.gate_proj, mlp.up_proj) or not fused.usable()
                or fused.sizes != (self.intermediate, self.intermediate) or fused.bias is not None):
            return None
        gate_up = rowdot.linear(x, fused.packed, None)  # what Fused.__call__ computes, not yet split
        out = torch.empty(*gate_up.shape[:-1], self.intermediate, dtype=gate_up.dtype)
        self.library.llama_silu_mul(gate_up.data_ptr(), gate_up.numel() // (2 * self.intermediate),
                                    self.intermediate, self.exp[0], self.exp[1], out.data_ptr())
        return out


def _compiled(head: Any) -> _Compiled | None:
    """`_compiled_now(head)`, asked once per thread count and TRTSPEC_CPU_LAYERS value and kept on
    the head: a forward asks twice (its layers and its readout)."""
    import torch

    key = (torch.get_num_threads(), os.environ.get("TRTSPEC_CPU_LAYERS"))
    known = getattr(head, "trtspec_compiled", None)
    if known is None or known[0] != key:
        known = head.trtspec_compiled = (key, _compiled_now(head))
    return known[1]


def _compiled_now(head: Any) -> _Compiled | None:
    """The compiled norm and SiLU x up for `head`, or None: the library is missing, TRTSPEC_CPU_LAYERS=torch,
    torch's exp kernel is not found, or the probe (native_layers.exact_here) found a difference here."""
    from types import SimpleNamespace

    from trtspec.runtime.forward import native_layers
    from trtspec.runtime.kernels import native

    if not native_layers.wanted():
        return None
    exp = native_layers._torch_exp()
    config = head.config
    sizes = SimpleNamespace(hidden_size=config.hidden_size, intermediate=config.intermediate_size,
                            eps=float(config.rms_norm_eps))
    if exp is None or not native_layers.exact_here(sizes, exp):
        return None
    return _Compiled(native.library(), exp, sizes.eps, sizes.intermediate)
