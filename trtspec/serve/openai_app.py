"""The OpenAI-compatible HTTP API `trtspec deploy` serves beside Triton (serve.openai_port).

    python -m trtspec.serve.openai_app --triton-url 127.0.0.1:8001 --port 9000 --served-model-name tiny

Routes: GET /health (200 when the Triton model is ready, else 503), GET /v1/models,
POST /v1/completions, POST /v1/chat/completions. Bodies are checked by
trtspec.serve.openai_protocol and forwarded to the Triton model over gRPC streaming
(trtspec.serve.openai_triton). With `stream: true` the answer is server-sent events, one
`data: {chunk}` per piece and `data: [DONE]` at the end; errors found before the first token keep
their HTTP status (400, 404, 503, 500), an error after it arrives as a `data: {"error": ...}`
event. FastAPI and uvicorn are imported here only, so `trtspec --help` stays instant.
"""

# No `from __future__ import annotations`: FastAPI reads the route functions' annotations
# (Request) at definition time, and they are imported inside create_app.
import argparse
import json
import sys
import time
from typing import Any

from trtspec.serve.openai_protocol import (
    Forward,
    OpenAIError,
    chat_request,
    chunk,
    completion_request,
    full_response,
    tool_call_chunk,
    usage_chunk,
)
from trtspec.serve.openai_tools import AutoStream, tool_calls


def create_app(triton_url: str, model: str, served_names: tuple[str, ...]) -> Any:
    from contextlib import asynccontextmanager

    from fastapi import FastAPI, Request
    from fastapi.exceptions import RequestValidationError
    from fastapi.responses import JSONResponse, StreamingResponse

    from trtspec.serve.openai_triton import TritonForwarder

    state: dict[str, TritonForwarder] = {}

    @asynccontextmanager
    async def lifespan(_: Any):
        state["triton"] = TritonForwarder(triton_url, model)  # the aio channel binds to this event loop
        yield
        await state["triton"].close()

    app = FastAPI(title="trtspec OpenAI-compatible API", lifespan=lifespan, docs_url=None, redoc_url=None)

    def error(problem: OpenAIError) -> Any:
        return JSONResponse(problem.body(), status_code=problem.status)

    @app.exception_handler(OpenAIError)
    async def _openai_error(_: Request, problem: OpenAIError) -> Any:
        return error(problem)

    @app.exception_handler(RequestValidationError)
    async def _validation(_: Request, problem: RequestValidationError) -> Any:
        return error(OpenAIError(400, f"invalid request: {problem.errors()[0].get('msg')}"))

    @app.exception_handler(Exception)
    async def _internal(_: Request, problem: Exception) -> Any:
        return error(OpenAIError(500, f"internal error: {type(problem).__name__}: {problem}"))

    @app.get("/health")
    async def health() -> Any:
        if await state["triton"].ready():
            return {"status": "ok"}
        return JSONResponse({"status": "unavailable", "triton": triton_url}, status_code=503)

    @app.get("/v1/models")
    async def models() -> Any:
        created = int(time.time())
        return {"object": "list", "data": [{"id": name, "object": "model", "created": created, "owned_by": "trtspec"}
                                           for name in served_names]}

    async def body_of(request: Request) -> Any:
        try:
            return json.loads(await request.body() or b"null")
        except ValueError as problem:
            raise OpenAIError(400, f"the request body is not JSON ({problem})") from None

    @app.post("/v1/completions")
    async def completions(request: Request) -> Any:
        return await answer(completion_request(await body_of(request), served_names))

    @app.post("/v1/chat/completions")
    async def chat_completions(request: Request) -> Any:
        return await answer(chat_request(await body_of(request), served_names))

    async def answer(forward: Forward) -> Any:
        pieces = state["triton"].generate(forward.values)
        # Wait for the first response before answering, so a refusal keeps its HTTP status.
        try:
            first = await anext(pieces)
        except OpenAIError as problem:
            if forward.guide is not None and problem.status == 400 and problem.param is None:
                problem.param = forward.guide.param  # a schema the grammar cannot compile names its field
            raise
        if not forward.stream:
            text, last = [first.text], first
            while not last.final:
                last = await anext(pieces)
                text.append(last.text)
            return full_response(forward, "".join(text), last.stats)
        return StreamingResponse(events(forward, first, pieces), media_type="text/event-stream",
                                 headers={"Cache-Control": "no-cache"})

    async def events(forward: Forward, first: Any, pieces: Any):
        """SSE: (chat: the role first) a chunk per text piece, the finish chunk with the
        speculative statistics, the usage chunk when asked, then [DONE]. A forced tool call is held
        and sent as one tool_calls delta once complete; under tool_choice auto, text streams until a
        call may begin (openai_tools.AutoStream) and the calls follow as one delta at the end."""
        piece = first
        guide = forward.guide
        forced = guide is not None and bool(guide.tools) and not guide.auto
        auto = AutoStream(guide.tools) if guide is not None and guide.auto else None
        held: list[str] = []  # a forced call's text
        try:
            if forward.kind == "chat":
                yield _sse(chunk(forward, "", first=True))
            while True:
                text = auto.feed(piece.text) if auto is not None and piece.text else piece.text
                if piece.text and forced:
                    held.append(piece.text)
                elif text:
                    yield _sse(chunk(forward, text))
                if piece.final:
                    reason = piece.stats.get("finish_reason")
                    calls = tool_calls("".join(held), guide.tools) if forced and guide else None
                    rest = "".join(held)
                    if auto is not None:  # the held tail: content and calls, or all of it text
                        content, found = auto.finish()
                        calls = found or None
                        rest = (content or "") if calls else auto.text[auto.sent:]
                    if rest and not (forced and calls):
                        yield _sse(chunk(forward, rest))
                    if calls is not None:
                        yield _sse(tool_call_chunk(forward, calls))
                        reason = "tool_calls" if reason == "stop" else reason
                    yield _sse(chunk(forward, None, finish_reason=reason, stats=piece.stats))
                    break
                piece = await anext(pieces)
            if forward.include_usage:
                yield _sse(usage_chunk(forward, piece.stats))
        except OpenAIError as problem:
            yield _sse(problem.body())
        finally:
            await pieces.aclose()  # a client that went away cancels the request on the server
        yield "data: [DONE]\n\n"

    return app


def _sse(body: dict[str, Any]) -> str:
    return f"data: {json.dumps(body, separators=(',', ':'))}\n\n"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m trtspec.serve.openai_app", description=__doc__.split("\n")[0])
    parser.add_argument("--triton-url", required=True, help="gRPC host:port of the Triton server")
    parser.add_argument("--model", default="tensorrt_llm", help="Triton model to forward to")
    parser.add_argument("--served-model-name", action="append", required=True,
                        help="name clients send as `model` (repeat for aliases; the first is listed first)")
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, required=True)
    args = parser.parse_args(argv)
    import uvicorn

    app = create_app(args.triton_url, args.model, tuple(args.served_model_name))
    # One worker: the Triton model batches; the frontend only forwards (asyncio, no thread per request).
    uvicorn.run(app, host=args.host, port=args.port, log_level="warning", access_log=False,
                timeout_graceful_shutdown=5)
    return 0


if __name__ == "__main__":
    sys.exit(main())
