"""The OpenAI frontend's way to the Triton model: one gRPC stream per request (tritonclient.grpc.aio).

Every OpenAI request becomes one request to the served model over Triton's gRPC streaming API, so
the model's in-flight batching, queue limit and request checks apply exactly as to any other
client. The inputs are the one builder's (trtspec.client.requests.ServedModel.inputs), the responses
the one stream loop's (trtspec.client.triton_aio.stream_events), as (text, final, stats) pieces;
a Triton error becomes an OpenAIError. A request whose HTTP client goes away is cancelled on the
server (the gRPC call is cancelled).
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from trtspec.errors import ServerError
from trtspec.serve.openai_protocol import OpenAIError, triton_error

if TYPE_CHECKING:
    from trtspec.client.requests import ServedModel


@dataclass
class Piece:
    text: str
    final: bool
    stats: dict[str, Any]


class TritonForwarder:
    """An asyncio gRPC channel to the Triton server and the served model's config."""

    def __init__(self, url: str, model: str):
        import tritonclient.grpc.aio as grpcclient

        self.url, self.model = url, model
        self.client = grpcclient.InferenceServerClient(url=url)
        self._served: ServedModel | None = None

    async def served(self) -> ServedModel:
        """The served model's config, read once (its names and types type every request)."""
        if self._served is None:
            from trtspec.client.requests import ServedModel

            self._served = ServedModel((await self.client.get_model_config(self.model, as_json=True))["config"])
        return self._served

    async def ready(self) -> bool:
        try:
            return bool(await self.client.is_server_ready() and await self.client.is_model_ready(self.model))
        except Exception:  # noqa: BLE001 - any transport error means not ready
            return False

    async def generate(self, values: dict[str, Any]) -> AsyncIterator[Piece]:
        """The model's responses to one request; the last has final=True (it carries finish_reason).

        The inputs are ServedModel.inputs' (values the model lacks, such as trtspec's additions on
        the stock llmapi model, are dropped); the responses are trtspec.client's one stream loop.
        """
        from tritonclient.utils import InferenceServerException

        from trtspec.client.events import ResponseError
        from trtspec.client.requests import InvalidRequestError
        from trtspec.client.triton_aio import stream_events

        try:
            served = await self.served()
        except InferenceServerException as error:
            raise OpenAIError(503, f"the Triton model is not reachable: {error.message()}") from None
        if "guided_decoding_guide_type" in values and served.name("guided_decoding_guide_type") is None:
            raise OpenAIError(400, f"structured output is not served: the Triton model {self.model!r} has no "
                                   "guided_decoding_guide_type input (trtspec's cpu model has it)")
        try:
            inputs = served.inputs(values)
        except InvalidRequestError as error:
            raise OpenAIError(400, str(error)) from None
        events = stream_events(self.client, served, self.model, inputs, timeout_s=None)
        try:
            async for event in events:
                # the cpu model sends finish_reason with its final response: that piece ends the answer
                piece = Piece(text=event.text, final="finish_reason" in event.stats, stats=event.stats)
                yield piece
                if piece.final:
                    return
            raise OpenAIError(500, "the Triton model ended the request without a finish reason")
        except ResponseError as error:
            raise triton_error(error.detail) from None
        except ServerError:
            raise OpenAIError(500, "the Triton model closed the stream before its final response") from None
        except InferenceServerException as error:
            raise triton_error(error.message()) from None
        finally:
            await events.aclose()  # before the final response (the HTTP client went away, or an error): cancelled

    async def close(self) -> None:
        await self.client.close()
