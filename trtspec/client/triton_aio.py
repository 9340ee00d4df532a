"""Many streamed requests on one gRPC channel and one event loop (tritonclient.grpc.aio): bench's client.

    async with AsyncStreams(client) as streams:          # client: a TritonLLMClient (its url, model, config)
        async for event in streams.stream("Hello", max_tokens=32):
            print(event.text, end="")

Why: the load generator runs on the machine it measures. The blocking client (TritonLLMClient.stream)
opens a channel per request and hands every response across three threads (gRPC's, tritonclient's
stream thread, the caller's queue); at concurrency 8 against the cpu backend on 2 cores it used
0.08-0.09 of a core, this one 0.055-0.06 (docs/BENCHMARKS-log.md), cycles the server's engine gets back.
The requests and the events are the same as the blocking client's (trtspec.client.requests, events).
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncGenerator, AsyncIterator
from typing import Any

from trtspec.client.events import StreamEvent, StreamReader
from trtspec.client.requests import ServedModel
from trtspec.errors import ServerError


class AsyncStreams:
    """One aio channel to the server `client` talks to; `stream` sends one request on it. Open it
    inside the event loop that uses it (`async with`): a gRPC aio channel belongs to one loop."""

    def __init__(self, client: Any):
        self.client = client
        self._channel: Any = None

    async def __aenter__(self) -> AsyncStreams:
        import tritonclient.grpc.aio as aio

        self._served = self.client.served  # read (blocking) once, before any request is in flight
        self._channel = aio.InferenceServerClient(url=self.client.url)
        return self

    async def __aexit__(self, *exc: Any) -> None:
        await self._channel.close()

    async def stream(self, prompt: str | bytes, max_tokens: int = 64, temperature: float | None = None,
                     seed: int | None = None, speculative: bool = True, perf_metrics: bool = True
                     ) -> AsyncIterator[StreamEvent]:
        """Send one streamed request and yield its responses as they arrive (TritonLLMClient.stream's
        events); leaving early cancels the request on the server."""
        served = self._served
        inputs = served.build_inputs(prompt, max_tokens=max_tokens, temperature=temperature, seed=seed,
                                     speculative=speculative, perf_metrics=perf_metrics, streaming=served.decoupled)
        async for event in stream_events(self._channel, served, self.client.model, inputs,
                                         timeout_s=self.client.timeout_s):
            yield event


async def stream_events(channel: Any, served: ServedModel, model: str, inputs: list[Any], *,
                        timeout_s: float | None) -> AsyncGenerator[StreamEvent, None]:
    """The one asyncio stream loop: send one request on `channel` (a tritonclient.grpc.aio client)
    and yield its responses as StreamEvents until the final one (bench's AsyncStreams and the OpenAI
    frontend both use it).

    An error response raises ResponseError; no response within `timeout_s` (None: no limit), or a
    stream that ends before the final response, raises ServerError; transport errors propagate as
    tritonclient raises them. Leaving early cancels the request on the server.
    """
    async def one_request():
        yield {"model_name": model, "inputs": inputs, "enable_empty_final_response": served.decoupled}

    call = channel.stream_infer(one_request())
    responses = call.__aiter__()
    start = time.perf_counter()
    reader = StreamReader(model, served.decoupled, served.decoupled and served.cumulative_stream)
    try:
        while True:
            try:
                async with asyncio.timeout(timeout_s):  # a timer, not a task a response
                    result, error = await responses.__anext__()
            except TimeoutError:
                raise ServerError(f"no response from {model} within {timeout_s:.0f} s") from None
            except StopAsyncIteration:
                raise ServerError(f"{model}: the stream ended before the final response") from None
            event = reader.read(result, error, time.perf_counter() - start)
            yield event
            if event.final:
                return
    finally:
        # after the final response this only closes the gRPC stream; before it, the server
        # sees the client go away and frees the request's sequence
        call.cancel()
