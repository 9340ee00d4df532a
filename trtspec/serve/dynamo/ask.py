"""One request to a Dynamo stack's OpenAI frontend, for `trtspec infer` when this workdir runs
`deploy --target dynamo` (the frontend speaks OpenAI's API, not Triton's gRPC).

The prompt goes as one user turn (the frontend applies the target's chat template) or, `raw`, as a
completion prompt unchanged; greedy unless a temperature is given; streamed, with the usage at the
end (its completion_tokens_details carry the accepted and rejected draft tokens). bench's OpenAI
target (trtspec.bench.openai_target) sends its requests through `stream` too, on one `client`.

An error answer becomes one line (`error_line`): Dynamo 1.6.1's frontend writes its errors flat,
`{"message", "type", "code"}` (lib/llm/src/http/service/openai.rs; ai-dynamo/frontend-crates#208),
not OpenAI's `{"error": {...}}`, and no frontend flag or DYN_* setting of that release changes it;
the official client keeps either body as `error.body`, so both read the same here.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from typing import Any


def base_url(layout: Any) -> str:
    from trtspec.serve.dynamo.launcher import record_path
    from trtspec.serve.supervisor import read_record

    record = read_record(record_path(layout)) or {}
    host = "127.0.0.1" if record.get("host") in (None, "", "0.0.0.0") else record["host"]
    return f"http://{host}:{record.get('openai_port')}/v1"


def client(url: str, timeout: float = 600) -> Any:
    """The official `openai` client for the frontend at `url` (.../v1), no retries."""
    try:
        from openai import OpenAI
    except ImportError:
        from trtspec.errors import ToolMissingError

        raise ToolMissingError("the `openai` client is not installed (Dynamo's frontend speaks OpenAI's API)",
                               fix="pip install 'openai==3.57.*' (or install trtspec[dev])") from None
    return OpenAI(base_url=url, api_key="unused", max_retries=0, timeout=timeout)


def error_line(error: Exception, url: str) -> Exception:
    """An OpenAI-API error answer as trtspec's one line (ServerError); other exceptions unchanged.
    Reads OpenAI's nested shape and Dynamo's flat one alike (the client's `body` is the inner dict)."""
    from trtspec.errors import ServerError

    status = getattr(error, "status_code", None)
    if status is None:
        if type(error).__name__ in ("APIConnectionError", "APITimeoutError"):
            return ServerError(f"no answer from the OpenAI API at {url} ({type(error).__name__})",
                               fix="check the stack with `trtspec deploy status`")
        return error
    body = getattr(error, "body", None)
    body = body.get("error", body) if isinstance(body, dict) else body
    message = body.get("message") if isinstance(body, dict) else None
    message = " ".join(str(message or body or error).split())[:300]
    fix = ("check the request's options (a 4xx is the request's fault)" if 400 <= int(status) < 500
           else "read the frontend's and workers' logs (`trtspec deploy status` lists them)")
    return ServerError(f"{url} answered {status}: {message}", fix=fix)


def stream(url: str, model: str, prompt: str, *, raw: bool, max_tokens: int, temperature: float | None,
           top_p: float | None, seed: int | None, api: Any = None) -> Iterator[tuple[str, dict[str, Any] | None]]:
    """(text piece, None) as it streams, then ("", stats) with the usage, TTFT and total seconds.
    `api`: an open `client(url)` (bench sends every request on one); an error answer raises one line."""
    try:
        yield from _stream(api or client(url), model, prompt, raw=raw, max_tokens=max_tokens,
                           temperature=temperature, top_p=top_p, seed=seed)
    except Exception as error:
        line = error_line(error, url)
        if line is error:
            raise
        raise line from None


def _stream(api: Any, model: str, prompt: str, *, raw: bool, max_tokens: int, temperature: float | None,
            top_p: float | None, seed: int | None) -> Iterator[tuple[str, dict[str, Any] | None]]:
    options: dict[str, Any] = {"model": model, "max_tokens": max_tokens, "stream": True,
                               "stream_options": {"include_usage": True},
                               "temperature": 0.0 if temperature is None else temperature,
                               **({"top_p": top_p} if top_p is not None else {}),
                               **({"seed": seed} if seed is not None else {})}
    start, first, usage, finish = time.perf_counter(), None, None, None
    if raw:
        chunks = api.completions.create(prompt=prompt, **options)
    else:
        chunks = api.chat.completions.create(messages=[{"role": "user", "content": prompt}], **options)
    for chunk in chunks:
        if chunk.usage is not None:
            usage = chunk.usage
        for choice in chunk.choices:
            text = choice.text if raw else (choice.delta.content or "")
            finish = choice.finish_reason or finish
            if text:
                first = first if first is not None else time.perf_counter() - start
                yield text, None
    details = getattr(usage, "completion_tokens_details", None) if usage is not None else None
    yield "", {"num_output_tokens": getattr(usage, "completion_tokens", None),
               "num_input_tokens": getattr(usage, "prompt_tokens", None), "finish_reason": finish,
               "accepted_prediction_tokens": getattr(details, "accepted_prediction_tokens", None),
               "rejected_prediction_tokens": getattr(details, "rejected_prediction_tokens", None),
               "ttft_s": first, "time_s": time.perf_counter() - start}
