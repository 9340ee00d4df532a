"""native_layers: the decoder layers in one compiled call, bit for bit the torch loop's numbers.

test_rt_llama_forward compares the lean forward (this route, where it applies) with transformers;
here the route is shown to run, to equal the torch loop it replaces feed for feed, to keep batch
invariance, and to step aside where it does not apply.
"""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

from tests.runtime.forward.test_rt_batch_invariance import _check_alone_and_batched, _paged_target
from tests.runtime.forward.test_rt_llama_forward import AUX_IDS, _script, _sequences, _target
from trtspec.runtime.cache.paged import BlockAllocator
from trtspec.runtime.forward import batch, native_layers
from trtspec.runtime.forward.linear_choice import ROWDOT, ROWDOT_BF16
from trtspec.runtime.kernels import native, rowdot

pytestmark = pytest.mark.skipif(not native.available(), reason=f"the compiled kernels cannot run here: "
                                                               f"{native.unavailable()}")


@pytest.fixture(scope="module")
def stacked(tmp_path_factory):
    """A tiny Llama whose q, k, v and gate, up prepack stacks on the row kernel: the route applies."""
    from trtspec.testing.tiny import make_tiny_llama

    path = make_tiny_llama(tmp_path_factory.mktemp("stacked"), seed=5, hidden_size=96, intermediate_size=192)
    return path


def _spied(monkeypatch) -> list[bool]:
    """Whether each call of native_layers.run took the compiled route."""
    taken, real = [], native_layers.run

    def spy(*args, **kwargs):
        result = real(*args, **kwargs)
        taken.append(result is not None)
        return result

    monkeypatch.setattr(native_layers, "run", spy)
    return taken


@pytest.mark.parametrize("kernel", [ROWDOT, ROWDOT_BF16])
def test_the_compiled_layers_equal_the_torch_loop_bit_for_bit(stacked, kernel, monkeypatch):
    """Chunked prompts, verify passes, a tree mask, scattered blocks, auxiliary layer outputs:
    every logits row and auxiliary output the same on both routes, and the compiled one ran; with
    the linear layers on the float32 row kernel and on the bfloat16 one (model.dtype bfloat16)."""
    if kernel == ROWDOT_BF16 and rowdot.bfloat16_unavailable():
        pytest.skip(rowdot.bfloat16_unavailable())
    taken = _spied(monkeypatch)
    compiled_model, torch_model = _target(stacked, True, (kernel,)), _target(stacked, True, (kernel,))
    compiled_kvs = _sequences(compiled_model, BlockAllocator(64, 8))
    torch_kvs = _sequences(torch_model, BlockAllocator(64, 8))
    with torch.inference_mode():
        for compiled_feeds, torch_feeds in zip(_script(compiled_kvs), _script(torch_kvs), strict=True):
            monkeypatch.setenv("TRTSPEC_CPU_LAYERS", "compiled")
            mine = batch.forward(compiled_model, compiled_feeds, {}, AUX_IDS)
            monkeypatch.setenv("TRTSPEC_CPU_LAYERS", "torch")
            theirs = batch.forward(torch_model, torch_feeds, {}, AUX_IDS)
            for a, b in zip(mine[0] + mine[1], theirs[0] + theirs[1], strict=True):
                assert torch.equal(a, b)
    assert taken == [True, False] * 6


@pytest.mark.parametrize("threads", [1, 2])
def test_a_sequence_is_the_same_alone_and_batched_on_the_compiled_layers(stacked, threads, monkeypatch):
    """test_rt_batch_invariance's check (chunked prompts of three sequences together, verify passes,
    scattered blocks) with every forward on the compiled layers."""
    taken = _spied(monkeypatch)
    before = torch.get_num_threads()
    torch.set_num_threads(threads)
    try:
        _check_alone_and_batched(*_paged_target(stacked, (ROWDOT,)))
    finally:
        torch.set_num_threads(before)
    assert taken and all(taken)


@pytest.mark.parametrize("hidden,intermediate", [(576, 1536), (96, 192), (100, 200), (100, 208), (4100, 1000)])
def test_the_compiled_norm_and_silu_give_torchs_bits_here(hidden, intermediate):
    """llama_layers.cpp repeats torch 2.13's CPU sum and SiLU kernels element for element: on
    SmolLM2's sizes, a tiny model's, and sizes with scalar tails and a cascade of levels (4100:
    128 steps of 4 vectors), the load-time probe finds them equal, and so does a direct check.
    Intermediates of an odd count of vectors take torch's scalar tail: 200 and 1000 at 8 lanes
    (AVX2), 208 at 16 (AVX-512; ATEN_CPU_CAPABILITY=avx2 shows the AVX2 case on either)."""
    exp = native_layers._torch_exp()
    assert exp is not None, "torch's vector exp was not found in libtorch_cpu"
    plan = native_layers.Plan(None, [], hidden, 1, 1, 8, intermediate, 1e-6, 1.0, [0], {})
    assert native_layers.exact_here(plan, exp)
    generator = torch.Generator().manual_seed(1)
    x, weight = torch.randn(5, hidden, generator=generator) * 4, torch.randn(hidden, generator=generator)
    mine = torch.empty_like(x)
    native.library().llama_rms_norm(x.data_ptr(), weight.data_ptr(), 1e-6, 5, hidden, mine.data_ptr())
    assert torch.equal(mine, weight * (x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + 1e-6)))
    gate_up = torch.randn(5, 2 * intermediate, generator=generator) * 8
    activated = torch.empty(5, intermediate)
    native.library().llama_silu_mul(gate_up.data_ptr(), 5, intermediate, exp[0], exp[1], activated.data_ptr())
    gate, up = gate_up.split([intermediate, intermediate], dim=-1)
    assert torch.equal(activated, F.silu(gate) * up)


def test_the_torch_loop_runs_where_the_route_does_not_apply(stacked, monkeypatch):
    """Linear layers not stacked on the row kernel (nn.Linear, or MKL), or TRTSPEC_CPU_LAYERS=torch:
    run answers None and llama_forward runs its torch loop (and still gives the same logits)."""
    taken = _spied(monkeypatch)
    unstacked = _target(stacked, False)
    mkl = _target(stacked, True, ("mkl",))
    assert native_layers._plan(unstacked) is None and native_layers._plan(mkl) is None
    model = _target(stacked, True, (ROWDOT,))
    assert native_layers._plan(model) is not None
    monkeypatch.setenv("TRTSPEC_CPU_LAYERS", "torch")
    assert native_layers._plan(model) is None
    monkeypatch.delenv("TRTSPEC_CPU_LAYERS")
    kvs = _sequences(model, BlockAllocator(64, 8))
    with torch.inference_mode():
        batch.forward(unstacked, next(_script(_sequences(unstacked, BlockAllocator(64, 8)))))
        batch.forward(model, next(_script(kvs)))
    assert taken == [False, True]
