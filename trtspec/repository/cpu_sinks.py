"""The cpu model's request sinks: what the engine loop hands each step's output to, per request.

`Responder` (decoupled): streams the steps' pieces through the model's outbox
(trtspec.repository.outbox), the first at once and then every `serve.stream_interval` steps, and
answers the engine's cancel probe; `Collector` (not decoupled):
keeps the whole answer for `execute` to return. Both end a request with the model's response or
error (trtspec.repository.cpu_model.TritonPythonModel builds them) and count what it records.
"""

from __future__ import annotations

import threading
from typing import TYPE_CHECKING, Any

from trtspec.repository.cpu_request import InvalidRequest, Request

if TYPE_CHECKING:
    from trtspec.repository.cpu_model import TritonPythonModel



def perf_outputs(stats: Any, num_output_tokens: int, num_input_tokens: int) -> dict[str, tuple[Any, str]]:
    """The perf-metric outputs of a finished request: name -> (value, numpy dtype of its declaration)."""
    return {"acceptance_rate": (float(stats.acceptance_rate), "float32"),
            "total_accepted_draft_tokens": (int(stats.num_accepted_tokens), "int32"),
            "total_draft_tokens": (int(stats.num_draft_tokens), "int32"),
            "num_drafts": (int(stats.num_drafts), "int32"),
            "num_output_tokens": (int(num_output_tokens), "int32"),
            "num_input_tokens": (int(num_input_tokens), "int32")}



class Responder:
    """The sink of one decoupled request: called from the engine loop with each step's chunk;
    its responses go out through the model's outbox (trtspec.repository.outbox), not from the loop."""

    def __init__(self, model: Any, sender: Any):
        self.model = model
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
        self.model.outbox.post(self.sender, response, self.model.pb.TRITONSERVER_RESPONSE_COMPLETE_FINAL,
                               self._on_send_error)

    def __call__(self, item: Any) -> None:
        from trtspec.runtime.loop.request import RequestCancelled

        model, parsed = self.model, self.parsed
        # 1. the client went away: the engine dropped the request; close the stream.
        if isinstance(item, RequestCancelled):
            model.cancelled.increment(1)
            self.finish()
            return
        # 2. the engine failed this request (or shut down): an error with the final flag.
        if isinstance(item, BaseException):
            model.refuse(self, str(item), "internal", "INTERNAL")
            return
        self.num_tokens += len(item.token_ids)
        self.text.append(item.text)
        self.unsent.append(item.text)
        # 3. finished: record the statistics, send the last piece with the final flag.
        if item.finish_reason is not None:
            model.record(item.stats)
            extra = perf_outputs(item.stats, self.num_tokens, self.num_input_tokens) if parsed.perf_metrics else None
            self.finish(model.response(self._piece(), item.finish_reason, extra))
        # 4. streaming: send what the steps since the last response committed, the first at once
        # (time to first token) and then every stream_interval steps.
        elif parsed.streaming and any(self.unsent) and (not self.streamed or len(self.unsent) >= model.stream_interval):
            model.outbox.post(self.sender, model.response(self._piece(), None), 0, self._on_send_error)
            self.unsent, self.streamed = [], True

    def _piece(self) -> str:
        """Streamed: the new text since the last response (stream_delta) or, as the stock model
        sends RequestOutput.text, the text so far; not streamed: the whole text once."""
        parsed = self.parsed
        return "".join(self.unsent if parsed.streaming and parsed.stream_delta else self.text)


class Collector:
    """The sink of one non-decoupled request: keeps the whole answer until it is done."""

    def __init__(self, model: TritonPythonModel):
        self.model = model
        self.done = threading.Event()
        self.result = None
        self.parsed = None
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

        model = self.model
        if isinstance(item, RequestCancelled):
            model.cancelled.increment(1)
            self.finish(model.error_response("Request cancelled by client", "CANCELLED"))
            return
        if isinstance(item, BaseException):
            model.refuse(self, str(item), "internal", "INTERNAL")
            return
        self.text.append(item.text)
        if item.finish_reason is not None:
            model.record(item.stats)
            num_tokens = item.stats.num_output_tokens
            extra = perf_outputs(item.stats, num_tokens, self.num_input_tokens) if self.parsed.perf_metrics else None
            self.finish(model.response("".join(self.text), item.finish_reason, extra))

    def wait(self):
        self.done.wait()
        return self.result
