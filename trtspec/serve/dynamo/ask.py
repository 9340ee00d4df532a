"""One request to a Dynamo stack's OpenAI frontend, for `trtspec infer` when this workdir runs
`deploy --target dynamo` (the frontend speaks OpenAI's API, not Triton's gRPC).

The prompt goes as one user turn (the frontend applies the target's chat template) or, `raw`, as a
completion prompt unchanged; greedy unless a temperature is given; streamed, with the usage at the
end (its completion_tokens_details carry the accepted and rejected draft tokens).
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


def stream(url: str, model: str, prompt: str, *, raw: bool, max_tokens: int, temperature: float | None,
           top_p: float | None, seed: int | None) -> Iterator[tuple[str, dict[str, Any] | None]]:
    """(text piece, None) as it streams, then ("", stats) with the usage, TTFT and total seconds."""
    from openai import OpenAI

    api = OpenAI(base_url=url, api_key="unused", max_retries=0, timeout=600)
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
