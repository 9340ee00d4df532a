"""linear_choice.choose: a layer's kernel is the fastest one whose rows round alike, by a margin.

The kernels here are stand-ins with known behaviour (exact row-wise products, a row-count-dependent
rounding, a 2 ms sleep), so the rule itself is checked, not this CPU's kernels; the real kernels
are checked by tests/runtime/forward/test_rt_batch_invariance.py.
"""

from __future__ import annotations

import time

import pytest

from trtspec.artifacts import linear_timings_file
from trtspec.runtime.forward import linear_choice
from trtspec.runtime.forward.linear_choice import choose

IN_FEATURES = 16


@pytest.fixture(autouse=True)
def own_timings(tmp_path, monkeypatch):
    """Each test its own timing cache: empty in this process and on disk."""
    monkeypatch.setenv("TRTSPEC_CACHE", str(tmp_path))
    monkeypatch.setattr(linear_choice, "_SECONDS", {})


def exact(x):
    return x * 2.0  # each row by itself: the same at any row count


def slow(x):
    time.sleep(0.002)
    return exact(x)


def alike_from_4(x):
    return exact(x) + (1e-3 if x.shape[0] < 4 else 0.0)  # 1-3 rows round apart


def never_alike(x):
    return exact(x) + x.shape[0] * 1e-6  # every count rounds its own way


@pytest.mark.parametrize("calls,expected", [
    ({"default": slow, "other": exact}, ("other", 1)),
    ({"default": exact, "other": slow}, ("default", 1)),
    ({"default": slow, "other": slow}, ("default", 1)),  # within the margin: the default stays
    ({"default": slow, "other": never_alike}, ("default", 1)),  # faster, but rows round apart
    ({"default": slow, "other": alike_from_4}, ("other", 4)),  # faster even padded to 4 rows
    ({"default": never_alike, "other": slow}, ("other", 1)),  # the only one that rounds alike
    ({"default": never_alike}, ("default", None)),
], ids=["faster-other", "slower-other", "as-fast", "rounds-apart", "padded", "default-apart", "none-alike"])
def test_the_fastest_kernel_whose_rows_round_alike_wins(calls, expected, request):
    assert choose(calls, IN_FEATURES, (request.node.callspec.id,)) == expected



def test_one_slow_timing_of_the_default_does_not_hand_the_layer_to_another_kernel(monkeypatch):
    """Timings scripted per kernel, in the order choose asks for them (1 row, 8 rows; first the
    plain timings, then CONFIRM_ROUNDS rounds of both): the default's first timings are twice its
    real time (another process had the core), the challenger looks 2x faster; in the rounds the
    default is as fast as it is, and keeps the layer. Every round is recorded, so a later load
    decides alike without timing."""
    rounds = linear_choice.CONFIRM_ROUNDS
    timings = {"default": [2e-3, 2e-3] + [1e-3, 1e-3] * rounds, "other": [0.9e-3, 0.9e-3] * (1 + rounds)}
    monkeypatch.setattr(linear_choice, "seconds_per_call", lambda call, rows, in_features: timings[call.name].pop(0))
    calls = {name: _named(exact, name) for name in timings}
    assert choose(calls, IN_FEATURES, ("noisy",)) == ("default", 1)
    assert timings == {"default": [], "other": []}
    recorded = linear_timings_file().read_text()
    assert recorded.count(f"{linear_choice.TIMING} | round ") == 2 * 2 * rounds  # two kernels, two row counts
    monkeypatch.setattr(linear_choice, "_SECONDS", {})  # a new process: timing again would fail (lists empty)
    assert choose(calls, IN_FEATURES, ("noisy",)) == ("default", 1)
    timings.update(default=[2e-3] * 2 * (1 + rounds), other=[0.9e-3] * 2 * (1 + rounds))  # slow throughout: it loses
    monkeypatch.setattr(linear_choice, "_SECONDS", {})
    assert choose(calls, IN_FEATURES, ("really-slower",)) == ("other", 1)


def test_the_median_round_decides(monkeypatch):
    """One round where the default is slow again (a second slow spell) is outvoted by the other two;
    a challenger faster in two rounds of three takes the layer."""
    slow_round = [2e-3, 2e-3]
    timings = {"default": [2e-3, 2e-3] + slow_round + [1e-3, 1e-3] * 2, "other": [0.9e-3, 0.9e-3] * 4}
    monkeypatch.setattr(linear_choice, "seconds_per_call", lambda call, rows, in_features: timings[call.name].pop(0))
    calls = {name: _named(exact, name) for name in timings}
    assert choose(calls, IN_FEATURES, ("one-slow-round",)) == ("default", 1)
    timings.update(default=[2e-3] * 2 + slow_round * 2 + [1e-3, 1e-3], other=[0.9e-3] * 8)
    monkeypatch.setattr(linear_choice, "_SECONDS", {})
    assert choose(calls, IN_FEATURES, ("two-slow-rounds",)) == ("other", 1)


def _named(function, name):
    def call(x):
        return function(x)
    call.name = name
    return call


def test_the_first_timings_on_a_machine_decide_every_later_load(tmp_path, monkeypatch):
    """A later load (a new process: nothing timed in memory) reads the recorded times and chooses
    what the first load chose, without timing again; the file names the machine and the shape."""
    calls = {"default": slow, "other": alike_from_4}
    first = choose(calls, IN_FEATURES, ("recorded",))
    recorded = linear_timings_file().read_text()
    assert linear_timings_file().parent == tmp_path
    assert "recorded" in recorded and linear_choice._machine() in recorded

    def no_timing(*args):
        raise AssertionError("timed again")

    monkeypatch.setattr(linear_choice, "_SECONDS", {})
    monkeypatch.setattr(linear_choice, "seconds_per_call", no_timing)
    assert choose(calls, IN_FEATURES, ("recorded",)) == first == ("other", 4)


def test_a_cache_that_cannot_be_written_still_chooses(tmp_path, monkeypatch):
    """TRTSPEC_CACHE on a file (not a folder): nothing is recorded, nothing is left behind, the
    choice is made from this process's timings."""
    blocker = tmp_path / "not-a-folder"
    blocker.write_text("")
    monkeypatch.setenv("TRTSPEC_CACHE", str(blocker))
    assert choose({"default": slow, "other": exact}, IN_FEATURES, ("unwritable",)) == ("other", 1)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["not-a-folder"]
