"""What comes back from the served model: text chunks, the finish reason and speculative statistics.

`event_from` turns one gRPC response into a StreamEvent (`StreamReader`: a request's responses, errors
and cumulative text included); `summarize` folds a request's events into
the dict `TritonLLMClient.generate` returns (text, token counts, time to first token, total time,
acceptance statistics). No connection here.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from trtspec.errors import ServerError

STAT_OUTPUTS = ("acceptance_rate", "total_accepted_draft_tokens", "total_draft_tokens", "num_drafts",
                "num_output_tokens", "num_input_tokens")


@dataclass
class StreamEvent:
    text: str          # new text in this response
    time_s: float      # seconds since the request was sent
    final: bool        # the last response of the request
    stats: dict[str, Any] = field(default_factory=dict)   # perf metrics and finish_reason (final only)


def event_from(result: Any, now: float, decoupled: bool) -> StreamEvent:
    """One tritonclient InferResult as a StreamEvent; `now`: seconds since the request was sent."""
    response = result.get_response()
    params = response.parameters
    final = ("triton_final_response" in params and params["triton_final_response"].bool_param) or not decoupled
    names = {output.name for output in response.outputs}
    text = ""
    if "text_output" in names:
        text = "".join(_text(v) for v in result.as_numpy("text_output").reshape(-1))
    stats: dict[str, Any] = {}
    for name in STAT_OUTPUTS:
        if name in names:
            stats[name] = _number(result.as_numpy(name).reshape(-1)[0].item())
    if "finish_reason" in names:
        stats["finish_reason"] = _text(result.as_numpy("finish_reason").reshape(-1)[0])
    return StreamEvent(text=text, time_s=now, final=final, stats=stats)


class ResponseError(ServerError):
    """An error response from the served model; `detail` is Triton's message as sent (the OpenAI
    frontend maps it to an HTTP status)."""

    def __init__(self, model: str, detail: str):
        self.detail = detail
        super().__init__(f"{model}: {detail}")


class StreamReader:
    """One request's responses as StreamEvents, for both clients (trtspec.client.triton, triton_aio):
    an error response raises ResponseError (a ServerError) with Triton's message, and where the model streams the
    text so far (the stock llmapi model) each event keeps only its new part."""

    def __init__(self, model: str, decoupled: bool, cumulative: bool):
        self.model, self.decoupled, self.cumulative = model, decoupled, cumulative
        self.so_far = ""

    def read(self, result: Any, error: Any, now: float) -> StreamEvent:
        """The event of one (result, error) pair; `now`: seconds since the request was sent."""
        if error is not None:
            message = error.message() if callable(getattr(error, "message", None)) else str(error)
            raise ResponseError(self.model, message)
        event = event_from(result, now, self.decoupled)
        if self.cumulative:
            event.text, self.so_far = event.text[len(self.so_far):], event.text
        return event


def summarize(events: Any) -> dict[str, Any]:
    """A whole request from its events: text, token counts, time to first token, total time and
    acceptance statistics (mean acceptance length, acceptance rate, tokens/s where known)."""
    pieces, ttft, stats, total = [], None, {}, 0.0
    for event in events:
        if event.text and ttft is None:
            ttft = event.time_s
        pieces.append(event.text)
        total = event.time_s
        stats.update(event.stats)
    result = {"text": "".join(pieces), "ttft_s": ttft if ttft is not None else total, "total_s": total,
              "finish_reason": stats.pop("finish_reason", None),
              "num_output_tokens": stats.pop("num_output_tokens", None)}
    result.update(stats)
    draft, accepted = stats.get("total_draft_tokens"), stats.get("total_accepted_draft_tokens")
    if stats.get("num_drafts"):
        result["mean_acceptance_length"] = 1.0 + accepted / stats["num_drafts"]
    if draft:
        result.setdefault("acceptance_rate", accepted / draft)
    if result["num_output_tokens"] and total > 0:
        result["tokens_per_s"] = result["num_output_tokens"] / total
    return result


def _text(value: Any) -> str:
    return value.decode("utf-8", errors="replace") if isinstance(value, bytes) else str(value)


def _number(value: Any) -> Any:
    """A numeric output as a number: TensorRT-LLM's stock llmapi model.py sends its perf metrics as
    BYTES strings ("0.75", "12") although its config.pbtxt types them FP32/INT32."""
    if not isinstance(value, bytes | str):
        return value
    text = _text(value).strip()
    try:
        return int(text)
    except ValueError:
        return float(text)
