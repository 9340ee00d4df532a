"""A Llama forward's decoder layers in one compiled call (llama_layers.cpp, in the library
trtspec.runtime.kernels.native builds), for trtspec.runtime.forward.llama_forward.

Why (docs/BENCHMARKS-log.md, "The decoder layers in one call"): on SmolLM2 a lone sequence's decode
forward spent ~30 % of its time in Python and ~20 small torch operations a layer while the second
core waited; the compiled loop calls the same row kernel, rope_write and paged_attend and does the
norms, SiLU and residual adds itself.

Contract: `run` returns the last layer's hidden states bit for bit as llama_forward's torch loop
computes them (and fills `aux_outputs` as it does), or None where this route does not apply, and the
caller runs the torch loop. It applies where every layer's q, k, v and gate, up are stacked on the
row kernel (float32, or bfloat16 for model.dtype bfloat16: trtspec.runtime.forward.fused_linears), o_proj and
down_proj run on the same kernel unpadded, the
batch takes the compiled attention route (trtspec.runtime.forward.attention_kernel), torch's exp kernel is
found, and `exact_here` has found the compiled norm and SiLU equal to torch's, bit for bit, on the
model's sizes at the current thread count (llama_layers.cpp repeats torch 2.13's CPU kernels
element for element: another torch build may differ, and then the torch loop runs).
TRTSPEC_CPU_LAYERS=torch keeps the torch loop (to compare the two). Reads the model, changes nothing.
"""

from __future__ import annotations

import ctypes
import os
from dataclasses import dataclass
from typing import Any
from weakref import WeakKeyDictionary

FIELDS = 12  # llama_layers.cpp's Field: a layer's row of addresses
_KEYS, _VALUES = 10, 11
_PLANS: WeakKeyDictionary = WeakKeyDictionary()  # model -> Plan, or False where the route does not apply
_EXACT: dict[tuple, bool] = {}  # (hidden, intermediate, eps, threads, exp) -> the probe's answer


@dataclass
class Plan:
    """A model's layers as llama_layers.cpp reads them."""

    table: Any           # [layers, FIELDS] long: addresses (keys and values filled per pool)
    keep: list[Any]      # the tensors the addresses point into (kept alive with the plan)
    hidden_size: int
    heads: int
    kv_heads: int
    head_dim: int
    intermediate: int
    eps: float
    scaling: float
    layer_ids: list[int]  # each layer's cache index (self_attn.layer_idx)
    pool_tables: Any      # WeakKeyDictionary: pool -> (its first and last layers' addresses, the table with its addresses)
    bfloat16: bool = False  # the weights packed for the bfloat16 row kernel (model.dtype bfloat16)


def wanted() -> bool:
    from trtspec.runtime.kernels import native

    return os.environ.get("TRTSPEC_CPU_LAYERS", "compiled") != "torch" and native.available()


def run(model: Any, hidden: Any, row_cos: Any, row_sin: Any, layout: Any, aux_outputs: Any, wanted_ids: set,
        first: int = 0, last: int | None = None):
    """Decoder layers first..last - 1 (None: to the end) of llama_forward.decoder_layers on the
    compiled loop, or None (module docstring).
    # hidden: [1, T, hidden_size] layer `first`'s input (updated in place); row_cos, row_sin: [1, T, head_dim]
    Returns hidden."""
    import torch

    plan = _plan(model)
    if plan is None or hidden.dtype != torch.float32 or row_cos.dtype != torch.float32 or hidden.requires_grad:
        return None  # (a gradient: autograd must see the operations)
    rows = hidden.shape[1]
    if layout.kernel_rows is None:
        from trtspec.runtime.forward.attention_kernel import KernelRows

        layout.kernel_rows = KernelRows.build(layout, hidden.new_empty(1, plan.heads, rows, plan.head_dim)) or False
    exp = _torch_exp()
    if not layout.kernel_rows or exp is None or not exact_here(plan, exp):
        return None
    last = len(plan.layer_ids) if last is None else last
    table = _pool_table(plan, layout.pool)[first:last]  # rows of a contiguous table: its layers' addresses
    aux = None
    if wanted_ids:
        aux = torch.zeros(last - first, dtype=torch.long)
        for index in wanted_ids:
            aux_outputs[index] = torch.empty_like(hidden)
            aux[index - 1 - first] = aux_outputs[index].data_ptr()
    cos, sin, rows_of = row_cos[0].contiguous(), row_sin[0].contiguous(), layout.kernel_rows
    keys, values = layout.pool.keys[plan.layer_ids[0]], layout.pool.values[plan.layer_ids[0]]
    from trtspec.runtime.kernels import native

    native.library().llama_layers(
        last - first, table.data_ptr(), hidden.data_ptr(), rows, plan.hidden_size, plan.heads, plan.kv_heads,
        plan.head_dim, plan.intermediate, plan.eps, plan.scaling, cos.data_ptr(), sin.data_ptr(),
        layout.write_slots.data_ptr(), keys.stride(1), keys.shape[2], values.shape[1], rows_of.base.data_ptr(),
        rows_of.gather.data_ptr(), rows_of.gather_at.data_ptr(), rows_of.key_counts.data_ptr(),
        rows_of.bias.data_ptr(), rows_of.bias_at.data_ptr(), exp[0], exp[1], None if aux is None else aux.data_ptr(),
        int(plan.bfloat16), torch.get_num_threads())
    return hidden


def exact_here(plan: Plan, exp: tuple[int, int]) -> bool:
    """Whether the compiled norm and SiLU x up give torch's numbers, bit for bit, on random inputs
    of the plan's sizes (1, 3 and 64 rows; small, unit and large values) at the current thread
    count; probed once per sizes and thread count."""
    from types import SimpleNamespace

    import torch
    import torch.nn.functional as F

    from trtspec.runtime.forward.norms import rms_norm  # the torch loop's own norm: what this replaces
    from trtspec.runtime.kernels import native

    key = (plan.hidden_size, plan.intermediate, plan.eps, torch.get_num_threads(), exp)
    if key not in _EXACT:
        library, generator, same = native.library(), torch.Generator().manual_seed(0), True
        weight = torch.randn(plan.hidden_size, generator=generator)
        norm = SimpleNamespace(weight=weight, variance_epsilon=plan.eps)
        for rows in (1, 3, 64):
            for scale in (1e-3, 1.0, 30.0):
                x = torch.randn(1, rows, plan.hidden_size, generator=generator) * scale
                mine = torch.empty_like(x)
                library.llama_rms_norm(x.data_ptr(), weight.data_ptr(), plan.eps, rows, plan.hidden_size,
                                       mine.data_ptr())
                theirs = rms_norm(x, norm)
                gate_up = torch.randn(1, rows, 2 * plan.intermediate, generator=generator) * scale * 10
                gate, up = gate_up.split([plan.intermediate, plan.intermediate], dim=-1)
                activated = torch.empty_like(up)
                library.llama_silu_mul(gate_up.data_ptr(), rows, plan.intermediate, exp[0], exp[1],
                                       activated.data_ptr())
                same = same and torch.equal(mine, theirs) and torch.equal(activated, F.silu(gate) * up)
        _EXACT[key] = same
    return _EXACT[key]


def _plan(model: Any) -> Plan | None:
    if not wanted():
        return None
    if model not in _PLANS:
        _PLANS[model] = _planned(model) or False
    return _PLANS[model] or None


def _planned(model: Any) -> Plan | None:
    """The model's addresses, or None where a layer does not run as llama_layers.cpp assumes."""
    import torch

    from trtspec.runtime.forward.linear_choice import ROWDOT, ROWDOT_BF16

    kernel = getattr(model.model.layers[0].self_attn.o_proj, "kernel", None)
    if kernel not in (ROWDOT, ROWDOT_BF16):
        return None
    packed_dtype = torch.bfloat16 if kernel == ROWDOT_BF16 else torch.float32

    def rowdot_fused(first: Any, members: tuple) -> Any:
        fused = getattr(first, "fused", None)
        ok = fused is not None and fused.members == members and fused.usable() and fused.kernel == kernel
        return fused if ok else None

    def rowdot_alone(linear: Any) -> bool:
        return (getattr(linear, "kernel", None) == kernel and getattr(linear, "min_rows", None) == 1
                and getattr(linear, "rowdot_weight", None) is not None)

    def address(tensor: Any) -> int:
        return 0 if tensor is None else tensor.data_ptr()

    layers, rows, keep = model.model.layers, [], []
    first = layers[0].self_attn
    config = model.config
    for layer in layers:
        attention, mlp = layer.self_attn, layer.mlp
        qkv = rowdot_fused(attention.q_proj, (attention.q_proj, attention.k_proj, attention.v_proj))
        gate_up = rowdot_fused(mlp.gate_proj, (mlp.gate_proj, mlp.up_proj))
        if (qkv is None or gate_up is None or not rowdot_alone(attention.o_proj) or not rowdot_alone(mlp.down_proj)
                or attention.scaling != first.scaling or attention.head_dim != first.head_dim
                or layer.input_layernorm.variance_epsilon != layers[0].input_layernorm.variance_epsilon
                or layer.post_attention_layernorm.variance_epsilon != layers[0].input_layernorm.variance_epsilon
                or gate_up.sizes[0] != gate_up.sizes[1]):
            return None
        packs = (qkv.packed.data, attention.o_proj.rowdot_weight.data, gate_up.packed.data,
                 mlp.down_proj.rowdot_weight.data)
        floats = [t for t in (layer.input_layernorm.weight, qkv.bias, attention.o_proj.bias,
                              layer.post_attention_layernorm.weight, gate_up.bias, mlp.down_proj.bias) if t is not None]
        if (any(t.dtype != packed_dtype for t in packs) or any(t.dtype != torch.float32 for t in floats)
                or not all(t.is_contiguous() for t in (*packs, *floats))):
            return None
        keep.extend((*packs, *floats))
        in_order = (layer.input_layernorm.weight, packs[0], qkv.bias, packs[1], attention.o_proj.bias,  # Field's order
                    layer.post_attention_layernorm.weight, packs[2], gate_up.bias, packs[3], mlp.down_proj.bias)
        rows.append([address(t) for t in in_order] + [0] * (FIELDS - len(in_order)))  # keys, values: per pool
    heads = config.num_attention_heads
    kv_heads = getattr(config, "num_key_value_heads", None) or heads
    if layers[0].self_attn.q_proj.fused.sizes != (heads * first.head_dim, kv_heads * first.head_dim,
                                                  kv_heads * first.head_dim):
        return None
    return Plan(torch.tensor(rows, dtype=torch.long), keep, config.hidden_size, heads, kv_heads, first.head_dim,
                layers[0].mlp.gate_proj.fused.sizes[0], float(layers[0].input_layernorm.variance_epsilon),
                float(first.scaling), [layer.self_attn.layer_idx for layer in layers], WeakKeyDictionary(),
                kernel == ROWDOT_BF16)


def _pool_table(plan: Plan, pool: Any) -> Any:
    """The plan's table with `pool`'s keys and values of each layer (kept per pool, while its
    first and last layers' tensors stay where they were)."""
    ends = (pool.keys[plan.layer_ids[0]].data_ptr(), pool.values[plan.layer_ids[-1]].data_ptr())
    known = plan.pool_tables.get(pool)
    if known is None or known[0] != ends:
        table = plan.table.clone()
        for row, layer in enumerate(plan.layer_ids):
            table[row, _KEYS], table[row, _VALUES] = pool.keys[layer].data_ptr(), pool.values[layer].data_ptr()
        known = plan.pool_tables[pool] = (ends, table)
    return known[1]


def _torch_exp() -> tuple[int, int] | None:
    """(address, lanes) of the vector exp torch's float kernels call at this CPU capability, or None."""
    import torch

    if not _EXP:
        lanes = {"AVX512": 16, "AVX2": 8}.get(torch.backends.cpu.get_cpu_capability())
        name = {16: "Sleef_expf16_u10", 8: "Sleef_expf8_u10"}.get(lanes)
        found = None
        if name is not None:
            try:
                library = ctypes.CDLL(os.path.join(os.path.dirname(torch.__file__), "lib", "libtorch_cpu.so"))
                found = (ctypes.cast(getattr(library, name), ctypes.c_void_p).value, lanes)
            except (OSError, AttributeError):
                found = None
        _EXP.append(found)
    return _EXP[0]


_EXP: list = []  # [(address, lanes) or None], once known
