"""The cpu model's cancel probe asks Triton at most every CANCEL_PROBE_INTERVAL_S per request.

Each ask is a round trip to the server process that the engine loop waits on, and the loop asks
for every sequence every step. Triton's sender exists only inside a running model, so this uses a
counting sender and a hand-moved clock; a real server's cancellation is exercised in tests/serve
(a client that leaves a stream is counted as cancelled and its sequence leaves the batch).
"""

from __future__ import annotations

from types import SimpleNamespace

from trtspec.repository import cpu_model
from trtspec.repository.cpu_model import CANCEL_PROBE_INTERVAL_S, Responder


class CountingSender:
    def __init__(self):
        self.asks, self.cancelled = 0, False

    def is_cancelled(self):
        self.asks += 1
        return self.cancelled


def test_triton_is_asked_once_per_interval_and_a_cancel_is_seen_at_the_next_ask(monkeypatch):
    clock = [1000.0]
    monkeypatch.setattr(cpu_model, "time", SimpleNamespace(monotonic=lambda: clock[0]))
    sender = CountingSender()
    responder = Responder(model=None, sender=sender)
    assert not responder.is_cancelled() and sender.asks == 1      # the first step asks
    sender.cancelled = True
    for _ in range(20):                                            # steps within the interval do not
        assert not responder.is_cancelled()
    assert sender.asks == 1
    clock[0] += CANCEL_PROBE_INTERVAL_S
    assert responder.is_cancelled() and sender.asks == 2


def test_a_failed_send_cancels_at_once_without_asking(monkeypatch):
    monkeypatch.setattr(cpu_model, "time", SimpleNamespace(monotonic=lambda: 1000.0))
    sender = CountingSender()
    responder = Responder(model=None, sender=sender)
    responder.is_cancelled()
    responder._on_send_error(RuntimeError("the response sender is closed"))
    assert responder.is_cancelled() and sender.asks == 1
