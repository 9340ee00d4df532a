"""The cpu model's outbox (trtspec.triton_model.outbox): responses leave in the order they were posted.

Triton's response sender exists only inside a running model, so this checks the queue's own rules
with a recording sender; the real one is exercised by every streaming test through a real Triton
server (tests/serve), which checks the pieces' order and the final flag.
"""

from __future__ import annotations

import threading

from trtspec.triton_model.outbox import Outbox

FINAL = 1


class RecordingSender:
    """Records (response, flags); fails every send once `closed` (as a finished request's sender does)."""

    def __init__(self, log: list, lock: threading.Lock, name: str):
        self.log, self.lock, self.name, self.closed = log, lock, name, False

    def send(self, response=None, flags=0):
        if self.closed:
            raise RuntimeError("the response sender is closed")
        with self.lock:
            self.log.append((self.name, response, flags))


def test_every_posted_response_is_sent_in_order_and_close_flushes():
    log, lock, outbox = [], threading.Lock(), Outbox()
    senders = [RecordingSender(log, lock, name) for name in "ab"]
    expected = []
    for piece in range(200):
        sender = senders[piece % 2]
        outbox.post(sender, f"{sender.name}{piece}")
        expected.append((sender.name, f"{sender.name}{piece}", 0))
    for sender in senders:
        outbox.post(sender, None, FINAL)  # a bare final flag
        expected.append((sender.name, None, FINAL))
    outbox.close()
    assert log == expected


def test_a_failed_send_reaches_its_error_handler_and_the_others_still_go_out():
    log, lock, outbox = [], threading.Lock(), Outbox()
    closed, open_ = RecordingSender(log, lock, "closed"), RecordingSender(log, lock, "open")
    closed.closed = True
    errors = []
    outbox.post(closed, "lost", 0, errors.append)
    outbox.post(open_, "kept", FINAL, errors.append)
    outbox.close()
    assert [str(error) for error in errors] == ["the response sender is closed"]
    assert log == [("open", "kept", FINAL)]


def test_a_closed_outbox_starts_again_when_posted_to():
    log, lock, outbox = [], threading.Lock(), Outbox()
    sender = RecordingSender(log, lock, "s")
    outbox.close()  # never started: nothing to flush
    outbox.post(sender, "after", FINAL)
    outbox.close()
    assert log == [("s", "after", FINAL)]
