"""The cpu model's request boundary: Triton input arrays -> a checked Request, or InvalidRequest.

Pure (numpy arrays in, a frozen dataclass out): every check a request goes through before it
reaches the engine lives here, so it is tested without a server. The message of InvalidRequest
goes back to the client as a Triton error naming the input and the allowed values.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

DEFAULT_MAX_TOKENS = 128


class InvalidRequest(ValueError):
    """A request the model refuses; the message goes back to the client as a Triton error."""


@dataclass(frozen=True)
class Request:
    prompt: str
    streaming: bool
    max_tokens: int
    temperature: float
    top_p: float
    top_k: int
    seed: int | None
    stop: list[str] | None
    perf_metrics: bool
    speculative: bool


def _scalar(values: dict[str, Any], name: str, kind: type, default: Any) -> Any:
    array = values.get(name)
    if array is None:
        return default
    flat = array.reshape(-1)
    if flat.size != 1:
        raise InvalidRequest(f"{name}: expected one value (got {flat.size})")
    return kind(flat[0].item() if hasattr(flat[0], "item") else flat[0])


def _text(raw: Any, name: str) -> str:
    if isinstance(raw, str):
        return raw
    try:
        return bytes(raw).decode("utf-8")
    except UnicodeDecodeError as error:
        raise InvalidRequest(f"{name}: bytes are not valid UTF-8 ({error.reason} at byte {error.start})") from None


def parse_request(values: dict[str, Any], *, max_seq_len: int) -> Request:
    """Check one request's input arrays (name -> numpy array, missing ones absent) and read them.

    Raises InvalidRequest naming the input and the allowed values. The prompt-length check
    (max_input_len) needs the tokenizer and is the engine's (it raises TrtSpecError).
    """
    if values.get("text_input") is None:
        raise InvalidRequest("text_input: required (send the prompt as BYTES)")
    texts = values["text_input"].reshape(-1)
    if texts.size != 1:
        raise InvalidRequest(f"text_input: send exactly one prompt per request (got {texts.size})")
    prompt = _text(texts[0], "text_input")
    if not prompt.strip():
        raise InvalidRequest("text_input: empty prompt; send some text")
    max_tokens = _scalar(values, "sampling_param_max_tokens", int, DEFAULT_MAX_TOKENS)
    if max_tokens < 1:
        raise InvalidRequest(f"sampling_param_max_tokens: must be at least 1 (got {max_tokens})")
    if max_tokens >= max_seq_len:
        raise InvalidRequest(f"sampling_param_max_tokens: must be below the engine's max_seq_len {max_seq_len} "
                             f"minus the prompt (got {max_tokens})")
    temperature = _scalar(values, "sampling_param_temperature", float, 0.0)
    if not temperature >= 0.0:
        raise InvalidRequest(f"sampling_param_temperature: must be >= 0 (got {temperature})")
    top_p = _scalar(values, "sampling_param_top_p", float, 1.0)
    if not 0.0 < top_p <= 1.0:
        raise InvalidRequest(f"sampling_param_top_p: must be in (0, 1] (got {top_p})")
    top_k = _scalar(values, "sampling_param_top_k", int, 0)
    if top_k < 0:
        raise InvalidRequest(f"sampling_param_top_k: must be >= 0, 0 meaning off (got {top_k})")
    seed = _scalar(values, "sampling_param_seed", int, None)
    stop = None
    if values.get("sampling_param_stop") is not None:
        stop = [_text(s, "sampling_param_stop") for s in values["sampling_param_stop"].reshape(-1)]
        stop = [s for s in stop if s] or None
    return Request(prompt=prompt, streaming=_scalar(values, "streaming", bool, False), max_tokens=max_tokens,
                   temperature=temperature, top_p=top_p, top_k=top_k, seed=seed, stop=stop,
                   perf_metrics=_scalar(values, "sampling_param_return_perf_metrics", bool, False),
                   speculative=_scalar(values, "speculative", bool, True))
