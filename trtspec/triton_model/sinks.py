"""The cpu model's request sinks: what the engine loop hands each step's output to, per request.

`Responder` (decoupled): streams the steps' pieces through the model's outbox
(trtspec.triton_model.outbox), the first at once (sent from the engine loop's thread) and then
every `serve.stream_interval` steps, and
answers the engine's cancel probe; `Collector` (not decoupled): keeps the whole answer for
`execute` to return. Both end a request with a response or an error and count what it records.

Contract: a sink knows the model only through `Replies`, the few things the model
(trtspec.triton_model.model) hands it at initialize: how to build a response or an error, how to
send one, the counters to bump and the stream interval. It never imports the model.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from trtspec.triton_model.request import InvalidRequest, Request


@dataclass(frozen=True)
class Replies:
    """What a sink is handed instead of the model: the model's response builders, its outbox and
    its counters, bound once at initialize (TritonPythonModel.replies)."""

    # Outbox.post(sender, response, flags, on_error): send after everything posted before
    post: Callable[[Any, Any, int, Callable[[BaseException], None] | None], None]
    # Outbox.send_now: the same, sent on the calling thread at once (a request's first streamed piece only)
    send_now: Callable[[Any, Any, int, Callable[[BaseException], None] | None], None]
    final_flag: int  # pb_utils.TRITONSERVER_RESPONSE_COMPLETE_FINAL
    # (text, finish_reason or None, extra outputs: name -> (value, numpy dtype)) -> a response
    response: Callable[[str, str | None, dict[str, tuple[Any, str]] | None], Any]
    error: Callable[[str, str], Any]      # (message, Triton error code) -> an error response
    record: Callable[[Any], None]         # a finished request's GenerationStats into the counters
    count_failure: Callable[[str], None]  # a failed request, by reason: invalid | busy | internal
    count_cancelled: Callable[[], None]   # a request whose client went away
    stream_interval: int                  # steps a streamed response gathers (serve.stream_interval)


class _Sink:
    """What both sinks do alike: end a failed request."""

    replies: Replies

    def finish(self, response: Any) -> None:
        raise NotImplementedError

    def refuse(self, message: str, reason: str, code: str) -> None:
        """Count a request that failed (by reason) and end it with the error."""
        self.replies.count_failure(reason)
        self.finish(self.replies.error(message, code))


def perf_outputs(stats: Any, num_output_tokens: int, num_input_tokens: int) -> dict[str, tuple[Any, str]]:
    """The perf-metric outputs of a finished request: name -> (value, numpy dtype of its declaration)."""
    return {"acceptance_rate": (float(stats.acceptance_rate), "float32"),
            "total_accepted_draft_tokens": (int(stats.num_accepted_tokens), "int32"),
            "total_draft_tokens": (int(stats.num_draft_tokens), "int32"),
            "num_drafts": (int(stats.num_drafts), "int32"),
            "num_output_tokens": (int(num_output_tokens), "int32"),
            "num_input_tokens": (int(num_input_tokens), "int32")}


class Responder(_Sink):
    """The sink of one decoupled request: called from the engine loop with each step's chunk;
    its responses go out through the model's outbox (trtspec.triton_model.outbox), not from the loop."""

    def __init__(self, replies: Replies, sender: Any):
        self.replies = replies
        self.sender = sender
        self.parsed: Request | None = None
        self.text: list[str] = []
        self.num_tokens = 0
        self.num_input_tokens = 0
        self.send_failed = False
        self.unsent: list[str] = []  # the steps' pieces since the last streamed response, one a step
        self.streamed = False        # a streamed response went out

    def is_cancelled(self) -> bool:
        """The engine's cancel probe: the client went away, or a response could not be sent."""
        return self.send_failed or bool(self.sender.is_cancelled())

    def _on_send_error(self, error: BaseException) -> None:
        self.send_failed = True

    def bind(self, parsed: Request) -> None:
        self.parsed = parsed

    def finish(self, response: Any = None) -> None:
        # without a response, the bare final flag still releases the request in Triton (else it counts as in flight)
        self.replies.post(self.sender, response, self.replies.final_flag, self._on_send_error)

    def __call__(self, item: Any) -> None:
        from trtspec.runtime.loop.request import RequestCancelled

        replies, parsed = self.replies, self.parsed
        # 1. the client went away: the engine dropped the request; close the stream.
        if isinstance(item, RequestCancelled):
            replies.count_cancelled()
            self.finish()
            return
        # 2. the engine failed this request (or shut down): an error with the final flag.
        if isinstance(item, BaseException):
            self.refuse(str(item), "internal", "INTERNAL")
            return
        assert parsed is not None, "bind() runs before the engine is handed the sink"
        self.num_tokens += len(item.token_ids)
        self.text.append(item.text)
        self.unsent.append(item.text)
        # 3. finished: record the statistics, send the last piece with the final flag.
        if item.finish_reason is not None:
            replies.record(item.stats)
            extra = perf_outputs(item.stats, self.num_tokens, self.num_input_tokens) if parsed.perf_metrics else None
            self.finish(replies.response(self._piece(), item.finish_reason, extra))
        # 4. streaming: send what the steps since the last response committed, the first at once
        # and from this thread (time to first token: outbox.send_now), then every stream_interval steps.
        elif parsed.streaming and any(self.unsent) and (not self.streamed or len(self.unsent) >= replies.stream_interval):
            send = replies.post if self.streamed else replies.send_now
            send(self.sender, replies.response(self._piece(), None, None), 0, self._on_send_error)
            self.unsent, self.streamed = [], True

    def _piece(self) -> str:
        """Streamed: the new text since the last response (stream_delta) or, as the stock model
        sends RequestOutput.text, the text so far; not streamed: the whole text once."""
        parsed = self.parsed
        assert parsed is not None, "bind() runs before the engine is handed the sink"
        return "".join(self.unsent if parsed.streaming and parsed.stream_delta else self.text)


class Collector(_Sink):
    """The sink of one non-decoupled request: keeps the whole answer until it is done."""

    def __init__(self, replies: Replies):
        self.replies = replies
        self.done = threading.Event()
        self.result: Any = None
        self.parsed: Request | None = None
        self.text: list[str] = []
        self.num_input_tokens = 0

    def bind(self, parsed: Request) -> None:
        if parsed.streaming:
            raise InvalidRequest("streaming: this model is not decoupled; redeploy with serve.streaming: true")
        self.parsed = parsed

    def finish(self, response: Any) -> None:
        self.result = response
        self.done.set()

    def __call__(self, item: Any) -> None:
        from trtspec.runtime.loop.request import RequestCancelled

        replies = self.replies
        if isinstance(item, RequestCancelled):
            replies.count_cancelled()
            self.finish(replies.error("Request cancelled by client", "CANCELLED"))
            return
        if isinstance(item, BaseException):
            self.refuse(str(item), "internal", "INTERNAL")
            return
        self.text.append(item.text)
        if item.finish_reason is not None:
            replies.record(item.stats)
            num_tokens = item.stats.num_output_tokens
            assert self.parsed is not None, "bind() runs before the engine is handed the sink"
            extra = perf_outputs(item.stats, num_tokens, self.num_input_tokens) if self.parsed.perf_metrics else None
            self.finish(replies.response("".join(self.text), item.finish_reason, extra))

    def wait(self):
        self.done.wait()
        return self.result
