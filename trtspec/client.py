"""tritonclient gRPC streaming for the served LLM, adapting to the model's own input names.

    client = TritonLLMClient("127.0.0.1:8001")
    for event in client.stream("What is the capital of France?", max_tokens=32):
        print(event.text, end="")          # the last event has final=True and the stats
    client.generate("...")                  # dict: text, num_output_tokens, ttft_s, total_s, acceptance stats
    client.server_metrics()                 # Prometheus counters from the metrics port

The client reads the model config from the server once and speaks either the LLM-API names
(`sampling_param_max_tokens`, `streaming`, ...; the cpu and trtllm repositories) or the
tensorrtllm_backend ensemble/BLS names (`max_tokens`, `stream`, `num_draft_tokens`, ...). A server
error becomes a ServerError carrying Triton's message. Closing a stream early cancels the request
on the server, which frees its sequence.
"""

from __future__ import annotations

import queue
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

from trtspec.errors import ServerError

STAT_OUTPUTS = ("acceptance_rate", "total_accepted_draft_tokens", "total_draft_tokens", "num_drafts",
                "num_output_tokens")
# LLM-API name -> ensemble/BLS name (tensorrtllm_backend); None: not sent under that scheme.
ENSEMBLE_NAMES = {"sampling_param_max_tokens": "max_tokens", "streaming": "stream",
                  "sampling_param_temperature": "temperature", "sampling_param_top_p": "top_p",
                  "sampling_param_top_k": "top_k", "sampling_param_seed": "seed",
                  "sampling_param_return_perf_metrics": "return_perf_metrics", "speculative": None}
DTYPES = {"TYPE_STRING": "BYTES", "TYPE_BOOL": "BOOL", "TYPE_INT32": "INT32", "TYPE_INT64": "INT64",
          "TYPE_UINT64": "UINT64", "TYPE_FP32": "FP32"}


@dataclass
class StreamEvent:
    text: str          # new text in this response
    time_s: float      # seconds since the request was sent
    final: bool        # the last response of the request
    stats: dict[str, Any] = field(default_factory=dict)   # perf metrics and finish_reason (final only)


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
    def input_types(self) -> dict[str, str]:
        return {i["name"]: DTYPES.get(i["data_type"], i["data_type"]) for i in self.config.get("input", [])}

    @property
    def llm_api(self) -> bool:
        """True for LLM-API names (sampling_param_*), False for ensemble/BLS names."""
        return "sampling_param_max_tokens" in self.input_types or "max_tokens" not in self.input_types

    @property
    def decoupled(self) -> bool:
        return bool(self.config.get("model_transaction_policy", {}).get("decoupled", False))

    def _name(self, llm_api_name: str) -> str | None:
        name = llm_api_name if self.llm_api else ENSEMBLE_NAMES.get(llm_api_name, llm_api_name)
        return name if name in self.input_types else None

    def build_inputs(self, prompt: str | bytes, *, max_tokens: int, temperature: float | None = None,
                     top_p: float | None = None, top_k: int | None = None, seed: int | None = None,
                     speculative: bool = True, perf_metrics: bool = True, streaming: bool = True,
                     num_draft_tokens: int | None = None, extra: dict[str, Any] | None = None) -> list[Any]:
        """InferInput objects under the served model's names; values the model lacks are dropped."""
        import numpy as np

        batched = int(self.config.get("max_batch_size", 0)) > 0
        values: dict[str, Any] = {"streaming": streaming, "sampling_param_max_tokens": max_tokens,
                                  "sampling_param_temperature": temperature, "sampling_param_top_p": top_p,
                                  "sampling_param_top_k": top_k, "sampling_param_seed": seed,
                                  "sampling_param_return_perf_metrics": perf_metrics,
                                  "speculative": None if speculative else False}
        numpy_types = {"BOOL": np.bool_, "INT32": np.int32, "INT64": np.int64, "UINT64": np.uint64,
                       "FP32": np.float32, "BYTES": np.object_}
        text = prompt if isinstance(prompt, bytes) else prompt.encode("utf-8")
        arrays = {"text_input": np.array([text], dtype=np.object_)}
        for key, value in values.items():
            name = self._name(key)
            if value is not None and name is not None:
                arrays[name] = np.array([value], dtype=numpy_types[self.input_types[name]])
        if num_draft_tokens is not None and "num_draft_tokens" in self.input_types:
            arrays["num_draft_tokens"] = np.array([num_draft_tokens], dtype=np.int32)
        for name, value in (extra or {}).items():
            arrays[name] = value if isinstance(value, np.ndarray) else np.array([value])
        inputs = []
        for name, array in arrays.items():
            if batched:
                array = array.reshape(1, -1)
            dtype = "BYTES" if array.dtype == np.object_ else self.input_types.get(name) or _np_to_triton(array)
            tensor = self._grpc.InferInput(name, list(array.shape), dtype)
            tensor.set_data_from_numpy(array)
            inputs.append(tensor)
        return inputs

    # -- requests ------------------------------------------------------------------------------

    def stream(self, prompt: str | bytes, max_tokens: int = 64, temperature: float | None = None,
               top_p: float | None = None, top_k: int | None = None, seed: int | None = None,
               speculative: bool = True, perf_metrics: bool = True, stream: bool = True,
               extra: dict[str, Any] | None = None) -> Iterator[StreamEvent]:
        """Send one request over a gRPC stream and yield its responses as they arrive.

        stream=False asks the model for the whole answer in one response. Closing the generator
        before the final event cancels the request on the server.
        """
        from tritonclient.utils import InferenceServerException

        inputs = self.build_inputs(prompt, max_tokens=max_tokens, temperature=temperature, top_p=top_p,
                                   top_k=top_k, seed=seed, speculative=speculative, perf_metrics=perf_metrics,
                                   streaming=stream and self.decoupled, extra=extra)
        responses: queue.Queue = queue.Queue()
        client = self._grpc.InferenceServerClient(url=self.url)
        # Stamp arrival in the callback: the consumer may read the queue later than responses arrive.
        client.start_stream(callback=lambda result=None, error=None: responses.put((result, error, time.perf_counter())))
        start = time.perf_counter()
        finished = False
        try:
            client.async_stream_infer(self.model, inputs, enable_empty_final_response=self.decoupled)
            while True:
                try:
                    result, error, arrived = responses.get(timeout=self.timeout_s)
                except queue.Empty:
                    raise ServerError(f"no response from {self.model} within {self.timeout_s:.0f} s") from None
                now = arrived - start
                if error is not None:
                    message = error.message() if isinstance(error, InferenceServerException) else str(error)
                    raise ServerError(f"{self.model}: {message}")
                event = self._event(result, now)
                if event.final:
                    finished = True
                yield event
                if finished:
                    return
        finally:
            # cancel_requests=True on an unfinished stream: the server sees the client go away.
            client.stop_stream(cancel_requests=not finished)
            client.close()

    def _event(self, result: Any, now: float) -> StreamEvent:
        response = result.get_response()
        params = response.parameters
        final = ("triton_final_response" in params and params["triton_final_response"].bool_param) \
            or not self.decoupled
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

    def generate(self, prompt: str, max_tokens: int = 64, stream: bool = True, **kwargs: Any) -> dict[str, Any]:
        """One whole request: text, token counts, time to first token, total time and acceptance stats."""
        pieces, ttft, stats, total = [], None, {}, 0.0
        for event in self.stream(prompt, max_tokens=max_tokens, stream=stream, **kwargs):
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

    # -- server ----------------------------------------------------------------------------------

    def server_metrics(self) -> dict[str, float]:
        """Prometheus text from the metrics port as {'name{label="v",...}': value}."""
        import urllib.request

        try:
            with urllib.request.urlopen(self.metrics_url, timeout=5) as response:
                return parse_prometheus(response.read().decode())
        except OSError as error:
            raise ServerError(f"{self.metrics_url}: metrics not reachable ({error})",
                              fix="pass the metrics port (serve.metrics_port)") from None

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


def parse_prometheus(text: str) -> dict[str, float]:
    """Samples of a Prometheus text exposition: 'name{labels}' (labels as written) -> value."""
    samples: dict[str, float] = {}
    for line in text.splitlines():
        if not line or line.startswith("#"):
            continue
        key, _, value = line.rpartition(" ")
        try:
            samples[key.strip()] = float(value)
        except ValueError:
            continue
    return samples


def metric_total(samples: dict[str, float], name: str) -> float:
    """Sum of every sample of metric `name` over its labels."""
    return sum(v for k, v in samples.items() if k == name or k.startswith(name + "{"))


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


def _np_to_triton(array: Any) -> str:
    from tritonclient.utils import np_to_triton_dtype

    return np_to_triton_dtype(array.dtype)
