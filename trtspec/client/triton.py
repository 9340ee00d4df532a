"""tritonclient gRPC streaming for the served LLM: the connection, one stream per request, health.

    client = TritonLLMClient("127.0.0.1:8001")
    for event in client.stream("What is the capital of France?", max_tokens=32):
        print(event.text, end="")          # the last event has final=True and the stats
    client.generate("...")                  # dict: text, num_output_tokens, ttft_s, total_s, acceptance stats
    client.server_metrics()                 # Prometheus counters from the metrics port

The client reads the model config from the server once; which inputs a request carries is
trtspec.client.requests (the served model's own names), what comes back is trtspec.client.events.
A server error becomes a ServerError carrying Triton's message. Closing a stream early cancels the
request on the server, which frees its sequence.
"""

from __future__ import annotations

import queue
import time
from collections.abc import Iterator
from typing import Any

from trtspec.client.events import StreamEvent, StreamReader, summarize
from trtspec.client.metrics import fetch_metrics
from trtspec.client.requests import ServedModel
from trtspec.errors import ServerError

# Which served model to talk to when none is named, in order of preference: the BLS and ensemble
# of a trtllm-engine repository wrap tensorrt_llm, which the cpu and trtllm repositories serve alone.
MODEL_PREFERENCE = ("tensorrt_llm_bls", "ensemble", "tensorrt_llm")


def pick_model(url: str) -> str:
    """The preferred ready model on the server at `url` (gRPC host:port); tensorrt_llm if none answers.

    Asks each name's readiness (a health call) rather than the repository index, which
    trtspec's servers close to clients (serve.open_apis).
    """
    import tritonclient.grpc as grpcclient

    client = grpcclient.InferenceServerClient(url=url)
    try:
        for name in MODEL_PREFERENCE:
            try:
                if client.is_model_ready(name):
                    return name
            except Exception:  # noqa: BLE001 - unknown model or no server: try the next, then default
                continue
        return "tensorrt_llm"
    finally:
        client.close()


class TritonLLMClient:
    """One gRPC connection to a Triton server serving a trtspec LLM model."""

    def __init__(self, url: str = "127.0.0.1:8001", model: str = "tensorrt_llm", *,
                 metrics_url: str | None = None, timeout_s: float = 600.0):
        import tritonclient.grpc as grpcclient

        self.url, self.model, self.timeout_s = url, model, timeout_s
        host = url.rsplit(":", 1)[0]
        self.metrics_url = metrics_url or f"http://{host}:8002/metrics"
        self._grpc = grpcclient
        self._client = grpcclient.InferenceServerClient(url=url)
        self._config: dict[str, Any] | None = None

    # -- the served model --------------------------------------------------------------------

    @property
    def config(self) -> dict[str, Any]:
        if self._config is None:
            from tritonclient.utils import InferenceServerException

            try:
                self._config = self._client.get_model_config(self.model, as_json=True)["config"]
            except InferenceServerException as error:
                raise ServerError(f"{self.url}: cannot read model {self.model!r} ({error.message()})",
                                  fix="check --url/--model and that `trtspec deploy status` says ready") from None
        return self._config

    @property
    def served(self) -> ServedModel:
        return ServedModel(self.config)

    # Read-only views of the served model, for callers that ask the client.
    input_types = property(lambda self: self.served.input_types)
    llm_api = property(lambda self: self.served.llm_api)
    decoupled = property(lambda self: self.served.decoupled)

    def build_inputs(self, prompt: str | bytes, **options: Any) -> list[Any]:
        """InferInput objects under the served model's names (ServedModel.build_inputs)."""
        return self.served.build_inputs(prompt, **options)

    # -- requests ------------------------------------------------------------------------------

    def stream(self, prompt: str | bytes, max_tokens: int = 64, temperature: float | None = None,
               top_p: float | None = None, top_k: int | None = None, seed: int | None = None,
               speculative: bool = True, perf_metrics: bool = True, stream: bool = True,
               extra: dict[str, Any] | None = None) -> Iterator[StreamEvent]:
        """Send one request over a gRPC stream and yield its responses as they arrive.

        stream=False asks the model for the whole answer in one response. Closing the generator
        before the final event cancels the request on the server.
        """
        served = self.served
        inputs = served.build_inputs(prompt, max_tokens=max_tokens, temperature=temperature, top_p=top_p,
                                     top_k=top_k, seed=seed, speculative=speculative, perf_metrics=perf_metrics,
                                     streaming=stream and served.decoupled, extra=extra)
        responses: queue.Queue = queue.Queue()
        client = self._grpc.InferenceServerClient(url=self.url)
        # Stamp arrival in the callback: the consumer may read the queue later than responses arrive.
        client.start_stream(callback=lambda result=None, error=None: responses.put((result, error, time.perf_counter())))
        start = time.perf_counter()
        finished = False
        reader = StreamReader(self.model, served.decoupled, stream and served.decoupled and served.cumulative_stream)
        try:
            client.async_stream_infer(self.model, inputs, enable_empty_final_response=served.decoupled)
            while True:
                try:
                    result, error, arrived = responses.get(timeout=self.timeout_s)
                except queue.Empty:
                    raise ServerError(f"no response from {self.model} within {self.timeout_s:.0f} s") from None
                event = reader.read(result, error, arrived - start)
                if event.final:
                    finished = True
                yield event
                if finished:
                    return
        finally:
            # cancel_requests=True on an unfinished stream: the server sees the client go away.
            client.stop_stream(cancel_requests=not finished)
            client.close()

    def generate(self, prompt: str, max_tokens: int = 64, stream: bool = True, **kwargs: Any) -> dict[str, Any]:
        """One whole request: text, token counts, time to first token, total time and acceptance stats."""
        return summarize(self.stream(prompt, max_tokens=max_tokens, stream=stream, **kwargs))

    # -- server ----------------------------------------------------------------------------------

    def server_metrics(self) -> dict[str, float]:
        """Prometheus text from the metrics port as {'name{label="v",...}': value}."""
        return fetch_metrics(self.metrics_url)

    def is_ready(self) -> bool:
        try:
            return self._client.is_server_ready() and self._client.is_model_ready(self.model)
        except Exception:  # noqa: BLE001 - any transport error means not ready
            return False

    def close(self) -> None:
        self._client.close()


def probe(url: str, model: str | None = None, timeout_s: float = 30.0) -> dict[str, Any]:
    """A one-token inference: the health check that tells the truth.

    Triton's /v2/health/ready and model-ready stay 200 after the model's Python stub died; only a
    request that comes back proves the model serves. Returns {"ok", "model", "seconds"} and
    "error" when it failed (a server error, no answer within timeout_s, nothing listening).
    """
    start = time.perf_counter()
    client = None
    try:
        model = model or pick_model(url)
        client = TritonLLMClient(url, model, timeout_s=timeout_s)
        client.generate("ping", max_tokens=1, stream=False, perf_metrics=False)
    except Exception as error:  # noqa: BLE001 - any failure is the answer
        message = getattr(error, "message", None)
        text = message() if callable(message) else str(error)
        return {"ok": False, "model": model, "seconds": round(time.perf_counter() - start, 3),
                "error": " ".join(text.split())[:500]}
    finally:
        if client is not None:
            client.close()
    return {"ok": True, "model": model, "seconds": round(time.perf_counter() - start, 3)}
