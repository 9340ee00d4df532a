"""fused_linears: sibling projections stacked into one row-kernel call, bit for bit the separate calls,
at no extra memory, and only where every member can be stacked."""

from __future__ import annotations

import pytest
import torch

from trtspec.runtime.forward.fused_linears import fuse
from trtspec.runtime.forward.linear_choice import MKL, ROWDOT, ROWDOT_BF16
from trtspec.runtime.forward.prepack import _packed_linear_class, prepacked
from trtspec.runtime.kernels import native, rowdot

pytestmark = pytest.mark.skipif(not native.available(), reason="the row kernel cannot run here")


def _layers(sizes, in_features=40, bias=False, kernels=(ROWDOT,)):
    torch.manual_seed(0)
    packed_linear = _packed_linear_class()
    return tuple(packed_linear(torch.nn.Linear(in_features, size, bias=bias), kernels) for size in sizes)


@pytest.mark.parametrize("kernel", [ROWDOT, ROWDOT_BF16])
@pytest.mark.parametrize("bias", [False, True])
def test_one_call_gives_each_member_its_own_bits(bias, kernel):
    if kernel == ROWDOT_BF16 and rowdot.bfloat16_unavailable():
        pytest.skip(rowdot.bfloat16_unavailable())
    members = _layers((48, 24, 25), in_features=40 if kernel == ROWDOT else 48, bias=bias, kernels=(kernel,))
    in_features = members[0].in_features  # the last member's rows need not fill a group
    separate_weights = [member.rowdot_weight for member in members]
    rows_each = {count: torch.randn(count, in_features) for count in (1, 2, 7, 8, 9, 17)}
    alone = {count: [member.forward(x) for member in members] for count, x in rows_each.items()}
    fused = fuse(members)
    assert fused is not None and fused.usable() and fused.kernel == kernel
    for count, x in rows_each.items():
        for mine, theirs in zip(fused(x), alone[count], strict=True):
            assert torch.equal(mine, theirs)
        for member, theirs in zip(members, alone[count], strict=True):  # the members' own calls, now on slices
            assert torch.equal(member.forward(x), theirs)
    storage = fused.packed.data.untyped_storage().data_ptr()
    for member, before in zip(members, separate_weights, strict=True):
        assert member.rowdot_weight.data.untyped_storage().data_ptr() == storage  # no second copy kept
        assert torch.equal(member.rowdot_weight.data, before.data)


def test_members_that_cannot_share_a_call_are_left_alone():
    assert fuse(_layers((25, 24))) is None  # a member before the last ends inside a group
    assert fuse(_layers((24, 24), bias=True)[:1] + _layers((24,))) is None  # bias on one only
    assert fuse(_layers((24,), in_features=40) + _layers((24,), in_features=48)) is None
    assert fuse(_layers((24,)) + _layers((24,), kernels=(MKL,))) is None  # not on the row kernel
    if rowdot.bfloat16_unavailable() is None:  # one float32 member, one bfloat16: other numbers
        assert fuse(_layers((24,), in_features=48) + _layers((24,), in_features=48, kernels=(ROWDOT_BF16,))) is None
    members = _layers((24, 24))
    members[1].min_rows = 2  # a padded layer keeps its own calls
    assert fuse(members) is None


def test_a_switched_member_turns_the_stack_off(tiny_llama):
    """A borrowed model (prepacked) gets its nn.Linear layers back, stacks included; a member whose
    kernel was switched after stacking makes the stack unusable (the lean path then calls each)."""
    from trtspec.runtime.checkpoints.parts import load_causal_lm

    model = load_causal_lm(tiny_llama)
    attention = model.model.layers[0].self_attn
    with prepacked(model):
        assert type(attention.q_proj).__name__ == "PackedLinear"
    assert type(attention.q_proj) is torch.nn.Linear and not hasattr(attention.q_proj, "fused")
    members = _layers((24, 24))
    fused = fuse(members)
    members[1].kernel = MKL
    assert not fused.usable()
