"""When the cpu model sends its gauges and step counters to Triton (trtspec.triton_model.model.gauges_due).

`trtspec bench` reads a block's counters once the gauges say idle. Under load (issue 71) a
speculative cell came out without a single step: the last block had left the gauges idle, this
block's steps waited for the interval, and the bench read the stale idle gauges before the final
idle report. The rules, on the scheduler's real snapshots."""

from __future__ import annotations

from trtspec.runtime.loop.stats import SchedulerStats
from trtspec.triton_model.model import METRICS_INTERVAL_S, gauges_due

SOON = METRICS_INTERVAL_S / 10


def snapshot(steps: int, running: int = 0, waiting: int = 0) -> SchedulerStats:
    return SchedulerStats(running=running, waiting=waiting, num_steps=steps)


def test_idle_to_busy_goes_out_at_once_within_the_interval():
    # the last block ended idle at step 10; a request comes in right after
    assert gauges_due(snapshot(10, running=1), (10, False), sent_at=5.0, now=5.0 + SOON)
    assert gauges_due(snapshot(11, waiting=1), (10, False), sent_at=5.0, now=5.0 + SOON)


def test_busy_to_idle_goes_out_at_once():
    assert gauges_due(snapshot(12), (11, True), sent_at=5.0, now=5.0 + SOON)


def test_busy_steps_wait_for_the_interval():
    assert not gauges_due(snapshot(12, running=2), (11, True), sent_at=5.0, now=5.0 + SOON)
    assert gauges_due(snapshot(12, running=2), (11, True), sent_at=5.0, now=5.0 + 2 * METRICS_INTERVAL_S)


def test_an_older_snapshot_never_undoes_a_newer_one():
    # execute()'s snapshot taken before the loop's last step, sent after the loop's idle report
    assert not gauges_due(snapshot(11, running=1), (12, False), sent_at=5.0, now=9.0)
    # the loop's idle snapshot of step 12 overtaken by execute()'s busy one of the same step: a request came in
    assert not gauges_due(snapshot(12), (12, True), sent_at=5.0, now=9.0)


def test_the_first_snapshot_and_idle_ones_always_go_out():
    assert gauges_due(snapshot(0), None, sent_at=float("-inf"), now=0.0)
    assert gauges_due(snapshot(12), (12, False), sent_at=5.0, now=5.0 + SOON)
