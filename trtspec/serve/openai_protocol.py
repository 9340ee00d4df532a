"""OpenAI's API as trtspec serves it: request bodies in, the served Triton model's inputs out,
and the response, chunk and error objects back. Pure (dicts in, dicts out): no server here.

`completion_request` / `chat_request` check a body of /v1/completions or /v1/chat/completions and
return a `Forward` (what to send to the Triton model), or raise `OpenAIError` with OpenAI's error
shape and an HTTP status. The Triton model is the cpu (or stock llmapi) model: `text_input` and
`sampling_param_*`; a chat goes as trtspec's `messages` input, so the chat template is applied in
the served model through trtspec/chat.py, the one rule training and serving share; a completion's
prompt goes as plain text (`chat_template: false`), as OpenAI completions are not chat turns.

Parameters served: model, prompt / messages, max_tokens (max_completion_tokens for chat),
temperature (default 1, OpenAI's), top_p, top_k (vLLM's extension), seed, stop (a string or up to
4), n (1 only), stream, stream_options.include_usage, presence/frequency_penalty (0 only: the
cpu engine has no penalties), response_format (text, json_object, json_schema) and, for chats,
tools with tool_choice and parallel_tool_calls (trtspec.serve.openai_tools: both become the
model's guided-decoding inputs), and trtspec's `speculative` (false: this request without speculation). Known OpenAI
features the engine does not have (logprobs, functions, echo, best_of above 1, logit_bias, n
above 1) are refused with 400; keys OpenAI does not define are ignored, as vLLM and trtllm-serve do.
"""

from __future__ import annotations

import secrets
import time
from dataclasses import dataclass, field
from typing import Any

from trtspec.sampling_rules import sampling_problem
from trtspec.serve.openai_tools import (
    FormatProblem,
    Guide,
    response_format_guide,
    split_calls,
    tool_calls,
    tools_guide,
)

COMPLETION_DEFAULT_MAX_TOKENS = 16   # OpenAI's documented default for /v1/completions
MAX_STOP = 4
ROLES = ("system", "user", "assistant", "developer")
# (key, value that means "off"): features a request may name only in their off state.
REFUSED: dict[str, tuple[Any, ...]] = {"logprobs": (None, False, 0), "top_logprobs": (None, 0), "echo": (None, False), "suffix": (None, ""),
           "best_of": (None, 1), "functions": (None, []), "logit_bias": (None, {}),
           "presence_penalty": (None, 0, 0.0), "frequency_penalty": (None, 0, 0.0)}
WHY = {"presence_penalty": "the cpu engine's sampler applies no penalties",
       "frequency_penalty": "the cpu engine's sampler applies no penalties",
       "best_of": "the engine returns one sequence per request", "logprobs": "the engine returns no log probabilities",
       "top_logprobs": "the engine returns no log probabilities",
       "functions": "function calls are not served", "echo": "the prompt is not echoed",
       "suffix": "insertion (suffix) is not served", "logit_bias": "the sampler takes no logit bias"}


class OpenAIError(Exception):
    """An error answered as OpenAI's error object with an HTTP status."""

    def __init__(self, status: int, message: str, *, param: str | None = None, kind: str | None = None,
                 code: str | None = None):
        super().__init__(message)
        self.status, self.message, self.param, self.code = status, message, param, code
        self.kind = kind or ("invalid_request_error" if status < 500 else "server_error")

    def body(self) -> dict[str, Any]:
        return {"error": {"message": self.message, "type": self.kind, "param": self.param, "code": self.code}}


@dataclass
class Forward:
    """One request for the Triton model, and how to answer it."""

    kind: str                       # "completion" | "chat"
    model: str
    values: dict[str, Any]          # Triton input name -> Python value (typed by the client)
    stream: bool = False
    include_usage: bool = False
    guide: Guide | None = None      # the grammar the output follows (response_format or tools)
    id: str = field(default_factory=lambda: secrets.token_hex(12))
    created: int = field(default_factory=lambda: int(time.time()))


def _bad(message: str, param: str | None = None) -> OpenAIError:
    return OpenAIError(400, message, param=param)


def _number(body: dict[str, Any], key: str, kind: type, low: float | None, high: float | None,
            default: Any = None) -> Any:
    value = body.get(key)
    if value is None:
        return default
    if isinstance(value, bool) or not isinstance(value, int | float) or (kind is int and not isinstance(value, int)):
        raise _bad(f"{key}: must be {'an integer' if kind is int else 'a number'} (got {value!r})", key)
    if (low is not None and value < low) or (high is not None and value > high):
        raise _bad(f"{key}: must be in [{low}, {high}] (got {value})", key)
    return kind(value)


def _common(body: Any, served: tuple[str, ...], *, max_key: str, default_max: int | None) -> tuple[str, dict]:
    if not isinstance(body, dict):
        raise _bad("the request body must be a JSON object")
    model = body.get("model")
    if not isinstance(model, str) or not model:
        raise _bad("model: required (GET /v1/models lists the served name)", "model")
    if model not in served:
        raise OpenAIError(404, f"model {model!r} does not exist; this server serves {', '.join(served)}",
                          param="model", code="model_not_found")
    for key, off in REFUSED.items():
        if key in body and body[key] not in off:
            raise _bad(f"{key}: not served ({WHY[key]}); leave it out", key)
    n = _number(body, "n", int, 1, None, 1)
    if n != 1:
        raise _bad(f"n: only 1 is served (got {n}); send n separate requests", "n")
    guide = _guide(lambda: response_format_guide(body.get("response_format")))
    max_tokens = _number(body, max_key, int, 1, 2**31 - 1, None)
    if max_tokens is None and max_key == "max_completion_tokens":
        max_tokens = _number(body, "max_tokens", int, 1, 2**31 - 1, None)
    max_tokens = max_tokens if max_tokens is not None else default_max
    values: dict[str, Any] = {
        # OpenAI's range for temperature ([0, 2]); within it, the engine's (trtspec.sampling_rules) below
        "sampling_param_temperature": _number(body, "temperature", float, 0, 2, 1.0),
        "sampling_param_top_p": _number(body, "top_p", float, None, None, None),
        "sampling_param_top_k": _number(body, "top_k", int, None, 2**31 - 1, None),
        "sampling_param_seed": _number(body, "seed", int, 0, 2**64 - 1, None),
        "sampling_param_return_perf_metrics": True,
    }
    problem = sampling_problem(temperature=values["sampling_param_temperature"],
                               top_p=values["sampling_param_top_p"], top_k=values["sampling_param_top_k"])
    if problem:
        raise _bad(f"{problem[0]}: {problem[1]}", problem[0])
    if max_tokens is not None:
        values["sampling_param_max_tokens"] = max_tokens
    stop = body.get("stop")
    if stop is not None:
        stops = [stop] if isinstance(stop, str) else stop
        if not isinstance(stops, list) or not all(isinstance(s, str) for s in stops) or len(stops) > MAX_STOP:
            raise _bad(f"stop: a string or a list of at most {MAX_STOP} strings", "stop")
        if [s for s in stops if s]:
            values["sampling_param_stop"] = [s for s in stops if s]
    if body.get("speculative") is False:
        values["speculative"] = False
    stream = body.get("stream") or False
    if not isinstance(stream, bool):
        raise _bad("stream: must be true or false", "stream")
    options = body.get("stream_options")
    if options is not None and not stream:
        raise _bad("stream_options: only allowed with stream: true", "stream_options")
    values["streaming"] = stream
    values["stream_delta"] = True  # each streamed response: only the new text (trtspec's addition)
    return model, {"values": {k: v for k, v in values.items() if v is not None}, "stream": stream,
                   "include_usage": bool((options or {}).get("include_usage")), "guide": guide}


def _guide(read: Any) -> Any:
    """Run an openai_tools reader, its FormatProblem as a 400 naming the field."""
    try:
        return read()
    except FormatProblem as problem:
        raise _bad(*problem.args) from None


def _guided(common: dict[str, Any]) -> dict[str, Any]:
    """The guided-decoding inputs of a Forward's guide, added to its values."""
    guide = common["guide"]
    if guide is not None:
        common["values"]["guided_decoding_guide_type"] = guide.guide_type
        if guide.guide is not None:
            common["values"]["guided_decoding_guide"] = guide.guide
    return common


def completion_request(body: Any, served: tuple[str, ...]) -> Forward:
    model, common = _common(body, served, max_key="max_tokens", default_max=COMPLETION_DEFAULT_MAX_TOKENS)
    prompt = body.get("prompt")
    if isinstance(prompt, list) and len(prompt) == 1 and isinstance(prompt[0], str):
        prompt = prompt[0]
    if not isinstance(prompt, str):
        raise _bad("prompt: one string per request (lists of prompts and token ids are not served)", "prompt")
    if not prompt:
        raise _bad("prompt: empty; send some text", "prompt")
    if body.get("tools"):
        raise _bad("tools: served on /v1/chat/completions only", "tools")
    common["values"].update(text_input=prompt, chat_template=False)
    return Forward(kind="completion", model=model, **_guided(common))


def chat_request(body: Any, served: tuple[str, ...]) -> Forward:
    """A chat: the messages go to the model as JSON; it renders them through the chat template."""
    import json

    model, common = _common(body, served, max_key="max_completion_tokens", default_max=None)
    messages = body.get("messages")
    if not isinstance(messages, list) or not messages:
        raise _bad("messages: a non-empty list of {\"role\", \"content\"}", "messages")
    from trtspec.serve.openai_tools import history_message, tools_message

    tools_guide_, functions = _guide(lambda: tools_guide(body.get("tools"), body.get("tool_choice"),
                                                         body.get("parallel_tool_calls")))
    if tools_guide_ is not None and common["guide"] is not None:
        raise _bad("response_format: not with tools (the tool call's arguments follow the tool's schema)",
                   "response_format")
    common["guide"] = common["guide"] or tools_guide_
    plain = []
    for i, message in enumerate(messages):
        role = message.get("role") if isinstance(message, dict) else None
        if role not in ROLES + ("tool",):
            raise _bad(f"messages[{i}].role: one of {', '.join(ROLES + ('tool',))} (got {role!r})", "messages")
        message = history_message(message)
        plain.append({"role": "system" if message["role"] == "developer" else message["role"],
                      "content": _content(message.get("content"), i)})
    if functions:
        described = tools_message(functions, auto=tools_guide_ is not None and tools_guide_.auto)
        if plain[0]["role"] == "system":
            plain[0]["content"] = plain[0]["content"] + "\n\n" + described
        else:
            plain.insert(0, {"role": "system", "content": described})
    common["values"].update(text_input="", messages=json.dumps(plain))
    return Forward(kind="chat", model=model, **_guided(common))


def _content(content: Any, index: int) -> str:
    """A message's text: a string, or a list of text parts (OpenAI's content parts) joined."""
    from trtspec.chat import content_text

    text = content_text(content)
    if text is not None:
        return text
    raise _bad(f"messages[{index}].content: a string or a list of text parts (images and audio are not served)",
               "messages")


# -- responses -----------------------------------------------------------------------------------

def completion_usage(prompt_tokens: int, completion_tokens: int, accepted: int | None = None,
                     drafted: int | None = None) -> dict[str, Any]:
    """OpenAI's `usage` of one answer, with `completion_tokens_details` when the engine counted its
    draft tokens: accepted_prediction_tokens (drafted and kept by the target) and
    rejected_prediction_tokens (drafted and refused), so accepted + rejected is the request's draft
    tokens; 0 and 0 for an answer that drafted nothing. Shared by trtspec's OpenAI endpoint and its
    Dynamo worker, so both servers say it alike."""
    body: dict[str, Any] = {"prompt_tokens": prompt_tokens, "completion_tokens": completion_tokens,
                            "total_tokens": prompt_tokens + completion_tokens}
    if accepted is not None and drafted is not None:
        body["completion_tokens_details"] = {"accepted_prediction_tokens": int(accepted),
                                             "rejected_prediction_tokens": int(drafted) - int(accepted)}
    return body


def usage(stats: dict[str, Any]) -> dict[str, Any]:
    """The usage of an answer from the Triton model's final response: the token counts and, where the
    model sent them (its perf metrics), the draft counts (`total_draft_tokens`,
    `total_accepted_draft_tokens`) as completion_tokens_details."""
    prompt, completion = int(stats.get("num_input_tokens") or 0), int(stats.get("num_output_tokens") or 0)
    accepted, drafted = stats.get("total_accepted_draft_tokens"), stats.get("total_draft_tokens")
    return completion_usage(prompt, completion, None if accepted is None else int(accepted),
                            None if drafted is None else int(drafted))


def speculative_stats(stats: dict[str, Any]) -> dict[str, Any]:
    """trtspec's extension field: this response's speculative-decoding counters."""
    drafts = int(stats.get("num_drafts") or 0)
    accepted = int(stats.get("total_accepted_draft_tokens") or 0)
    return {"num_drafts": drafts, "num_draft_tokens": int(stats.get("total_draft_tokens") or 0),
            "num_accepted_tokens": accepted, "acceptance_rate": float(stats.get("acceptance_rate") or 0.0),
            "mean_acceptance_length": 1.0 + accepted / drafts if drafts else None}


def _head(forward: Forward, chunk: bool) -> dict[str, Any]:
    kind = {("completion", False): "text_completion", ("completion", True): "text_completion",
            ("chat", False): "chat.completion", ("chat", True): "chat.completion.chunk"}[forward.kind, chunk]
    prefix = "cmpl-" if forward.kind == "completion" else "chatcmpl-"
    return {"id": prefix + forward.id, "object": kind, "created": forward.created, "model": forward.model}


def full_response(forward: Forward, text: str, stats: dict[str, Any]) -> dict[str, Any]:
    reason = stats.get("finish_reason") or "stop"
    content: str | None = None
    calls: list[dict[str, Any]] | None
    if forward.guide is not None and forward.guide.auto:
        content, found = split_calls(text, forward.guide.tools)
        calls = found or None
        content = content if calls else text
    else:
        calls = tool_calls(text, forward.guide.tools) if forward.guide is not None and forward.guide.tools else None
    if calls is not None:
        choice = {"index": 0, "message": {"role": "assistant", "content": content, "tool_calls": calls},
                  "logprobs": None, "finish_reason": "tool_calls" if reason == "stop" else reason}
    elif forward.kind == "chat":
        choice = {"index": 0, "message": {"role": "assistant", "content": text}, "logprobs": None,
                  "finish_reason": reason}
    else:
        choice = {"index": 0, "text": text, "logprobs": None, "finish_reason": reason}
    return {**_head(forward, False), "choices": [choice], "usage": usage(stats),
            "speculative_decoding": speculative_stats(stats)}


def chunk(forward: Forward, text: str | None, *, first: bool = False, finish_reason: str | None = None,
          stats: dict[str, Any] | None = None) -> dict[str, Any]:
    """One streamed chunk; the last (finish_reason set) carries the speculative statistics."""
    if forward.kind == "chat":
        delta: dict[str, Any] = {"role": "assistant", "content": text or ""} if first else (
            {"content": text} if text else {})
        choice = {"index": 0, "delta": delta, "logprobs": None, "finish_reason": finish_reason}
    else:
        choice = {"index": 0, "text": text or "", "logprobs": None, "finish_reason": finish_reason}
    body = {**_head(forward, True), "choices": [choice]}
    if forward.include_usage:
        body["usage"] = None
    if stats is not None:
        body["speculative_decoding"] = speculative_stats(stats)
    return body


def tool_call_chunk(forward: Forward, calls: list[dict[str, Any]]) -> dict[str, Any]:
    """A streamed tool call: the whole call in one delta (sent once the call is complete)."""
    delta = {"tool_calls": [{"index": i, **call} for i, call in enumerate(calls)]}
    return {**_head(forward, True), "choices": [{"index": 0, "delta": delta, "logprobs": None, "finish_reason": None}]}


def usage_chunk(forward: Forward, stats: dict[str, Any]) -> dict[str, Any]:
    return {**_head(forward, True), "choices": [], "usage": usage(stats)}


def triton_error(message: str) -> OpenAIError:
    """A Triton error message as OpenAI's error: busy 503, the model's internal errors 500,
    the rest (the model's checks of the request) 400."""
    text = " ".join(message.split())
    if "server busy" in text or "engine is shut down" in text:
        return OpenAIError(503, text, code="server_busy")
    if text.startswith("internal error") or "Stub process" in text or "failed to connect" in text.lower():
        return OpenAIError(500, text)
    return OpenAIError(400, text)
