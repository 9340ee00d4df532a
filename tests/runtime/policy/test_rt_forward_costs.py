"""T(n) for the load policy (trtspec.runtime.policy.forward_costs): decode steps with and without drafts
are priced apart, because the first drafted row of a step costs more than the next ones."""

from __future__ import annotations

from trtspec.runtime.policy.by_load import CostModel
from trtspec.runtime.policy.forward_costs import ForwardCosts


def _full_batch(observe) -> None:
    """16 sequences: plain steps 76.7 ms; with d drafted rows 85 ms + 2 ms a row (the jump of the
    first drafted row, then a steady price), as measured on 2 cores."""
    for _ in range(40):
        observe(16, 0.0767, 16)
        for drafted in (2, 6, 10, 14):
            observe(16 + drafted, 0.085 + 0.002 * drafted, 16)


def test_plain_steps_have_their_own_mean_and_drafted_steps_their_own_line():
    costs = ForwardCosts(0.98)
    _full_batch(costs.observe)
    assert abs(costs.seconds(16, 16) - 0.0767) < 1e-9          # one line through all would say ~0.081
    assert abs(costs.seconds(24, 16) - (0.085 + 0.002 * 8)) < 1e-6
    # a batch size seen only without drafts: drafted rows along the overall line's shape
    costs.observe(8, 0.050, 8)
    assert abs(costs.seconds(12, 8) / 0.050 - costs.seconds(12) / costs.seconds(8)) < 1e-9


def _half_found_first_passes(model: CostModel) -> None:
    """Half the lookups find a draft; its first token passes 60 % of the time, its second never."""
    model.proposed, model.found = 100.0, 50.0
    model.offered[:2], model.accepted[:2] = [100.0, 60.0], [60.0, 0.0]


def test_the_jump_of_the_first_drafted_row_keeps_a_marginal_chain_off():
    """A chain of 1 then commits 16 x 1.3 tokens in 85 + 2 x 8 ms = 206 tokens/s against
    16 / 76.7 ms = 209 plain: off. Priced by one line through both kinds of steps (as before),
    plain steps look dearer than they are and it drafts."""
    model = CostModel(2, drafts_cost=False)
    _full_batch(model.observe_forward)
    _half_found_first_passes(model)
    assert model.choose(16).length == 0
    single_line = CostModel(2, drafts_cost=False)
    single_line.target.plain = single_line.target.by_batch  # both kinds of steps into one line
    _full_batch(single_line.observe_forward)
    _half_found_first_passes(single_line)
    assert single_line.choose(16).length > 0
