"""The OpenAI frontend's way to the Triton model: one gRPC stream per request (tritonclient.grpc.aio).

Every OpenAI request becomes one request to the served model over Triton's gRPC streaming API, so
the model's in-flight batching, queue limit and request checks apply exactly as to any other
client. The inputs are typed from the model's own config (trtspec.client.requests.ServedModel);
responses come back as (text, final, stats) pieces; a Triton error becomes an OpenAIError. A
request whose HTTP client goes away is cancelled on the server (the gRPC call is cancelled).
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from dataclasses import dataclass
from typing import Any

from trtspec.serve.openai_protocol import OpenAIError, triton_error


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
        self._types: dict[str, str] | None = None

    async def input_types(self) -> dict[str, str]:
        if self._types is None:
            from trtspec.client.requests import ServedModel

            config = (await self.client.get_model_config(self.model, as_json=True))["config"]
            self._types = ServedModel(config).input_types
        return self._types

    async def ready(self) -> bool:
        try:
            return bool(await self.client.is_server_ready() and await self.client.is_model_ready(self.model))
        except Exception:  # noqa: BLE001 - any transport error means not ready
            return False

    async def _inputs(self, values: dict[str, Any]) -> list[Any]:
        import numpy as np
        import tritonclient.grpc.aio as grpcclient

        types = await self.input_types()
        numpy_types = {"BOOL": np.bool_, "INT32": np.int32, "INT64": np.int64, "UINT64": np.uint64,
                       "FP32": np.float32, "BYTES": np.object_}
        inputs = []
        for name, value in values.items():
            if name not in types:
                continue  # a model without trtspec's additions (the stock llmapi model) lacks them
            items = value if isinstance(value, list) else [value]
            if types[name] == "BYTES":
                array = np.array([v.encode("utf-8") if isinstance(v, str) else v for v in items], dtype=np.object_)
            else:
                array = np.array(items, dtype=numpy_types[types[name]])
            tensor = grpcclient.InferInput(name, list(array.shape), types[name])
            tensor.set_data_from_numpy(array)
            inputs.append(tensor)
        return inputs

    async def generate(self, values: dict[str, Any]) -> AsyncIterator[Piece]:
        """The model's responses to one request; the last has final=True (it carries finish_reason)."""
        from tritonclient.utils import InferenceServerException

        try:
            inputs = await self._inputs(values)
        except InferenceServerException as error:
            raise OpenAIError(503, f"the Triton model is not reachable: {error.message()}") from None
        request = {"model_name": self.model, "inputs": inputs}

        async def requests():
            yield request

        call = self.client.stream_infer(requests())
        finished = False
        try:
            async for result, failure in call:
                if failure is not None:
                    raise triton_error(failure.message() if isinstance(failure, InferenceServerException)
                                       else str(failure))
                piece = _piece(result)
                finished = piece.final
                yield piece
                if finished:
                    return
            raise OpenAIError(500, "the Triton model closed the stream before its final response")
        except InferenceServerException as error:
            raise triton_error(error.message()) from None
        finally:
            if not finished:
                call.cancel()  # the HTTP client went away (or an error): the server drops the request

    async def close(self) -> None:
        await self.client.close()


def _piece(result: Any) -> Piece:
    """One response as a Piece (trtspec.client.events reads the outputs); the last one is the
    response that carries finish_reason (the model sends it with the final flag)."""
    from trtspec.client.events import event_from

    event = event_from(result, 0.0, True)
    return Piece(text=event.text, final="finish_reason" in event.stats, stats=event.stats)
