"""Decoupled responses leave the engine loop: one thread per model sends them, in the loop's order.

Why (measured through a real Triton 2.51 server, SmolLM2 n-gram engine, 16 streams of held-back
prompts): a streamed response's `send` waits on the Triton server process (the Python backend
hands it over through shared memory and a message queue): 181 us median, 362 us mean per call.
Sent from the engine loop's sinks, that is ~6 ms of every 16-sequence step spent waiting instead
of computing the next step. Queued here, the loop goes on while this thread waits. On the 2-core
machine it was measured on, that wait was not idle time (Triton's process and the client ran on
those cores), and throughput through Triton did not change beyond run-to-run noise
(docs/BENCHMARKS-log.md, "Per-step costs under load"); where cores are to spare, the loop stops waiting.

Order is kept: one FIFO and one thread, so a request's pieces arrive in order and its final flag
last. `send_now` is the one exception, for a request's first streamed piece only (nothing of that
request is queued before it): sent on the engine loop's thread, so the time to first token does
not wait for this thread to be woken and get the GIL (3.7 ms median through the OpenAI frontend at
load ~6 on 2 cores; docs/BENCHMARKS-log.md, "Where trtspec's first token goes"). A send that fails
(the request already closed on the server's side) is handed to the caller's `on_error`, which ends
that request at the engine's next step (its cancel probe), as a sink failure in the loop did before.
"""

from __future__ import annotations

import queue
import threading
from collections.abc import Callable
from typing import Any

_CLOSE = object()


class Outbox:
    """A FIFO of (sender, response, flags) and the thread that sends them."""

    def __init__(self) -> None:
        self._queue: queue.SimpleQueue = queue.SimpleQueue()
        self._thread: threading.Thread | None = None
        self._lock = threading.Lock()

    def post(self, sender: Any, response: Any = None, flags: int = 0,
             on_error: Callable[[BaseException], None] | None = None) -> None:
        """Send `response` (None: only `flags`, e.g. a bare final flag) on `sender`, after
        everything posted before it."""
        with self._lock:
            if self._thread is None:
                self._thread = threading.Thread(target=self._run, name="trtspec-outbox", daemon=True)
                self._thread.start()
        self._queue.put((sender, response, flags, on_error))

    def send_now(self, sender: Any, response: Any = None, flags: int = 0,
                 on_error: Callable[[BaseException], None] | None = None) -> None:
        """Send on the calling thread, at once: only for a request's first response (module docstring)."""
        _send(sender, response, flags, on_error)

    def close(self, timeout: float = 10.0) -> None:
        """Send what is queued, then stop the thread (Triton's finalize)."""
        with self._lock:
            thread, self._thread = self._thread, None
        if thread is not None:
            self._queue.put(_CLOSE)
            thread.join(timeout)

    def _run(self) -> None:
        while True:
            item = self._queue.get()
            if item is _CLOSE:
                return
            _send(*item)


def _send(sender: Any, response: Any, flags: int, on_error: Callable[[BaseException], None] | None) -> None:
    try:
        if response is None:
            sender.send(flags=flags)
        else:
            sender.send(response, flags=flags)
    except Exception as error:  # noqa: BLE001 - one closed request must not stop the others' responses
        if on_error is not None:
            on_error(error)
