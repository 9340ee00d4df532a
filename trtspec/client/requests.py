"""Which inputs a request sends: the served model's names and data types, read from its config.

The served model speaks either the LLM-API names (`sampling_param_max_tokens`, `streaming`, ...; the
cpu and trtllm repositories) or the tensorrtllm_backend ensemble/BLS names (`max_tokens`, `stream`,
`num_draft_tokens`, ...). `ServedModel` takes the model config as Triton returns it (JSON form) and
builds tritonclient InferInputs under the model's own names and types; values the model lacks are
dropped. It sends nothing: trtspec.client.triton owns the connection.
"""

from __future__ import annotations

from typing import Any

from trtspec.errors import TrtSpecError


class InvalidRequestError(TrtSpecError):
    """A request value the served model's declared inputs cannot carry."""

# LLM-API name -> ensemble/BLS name (tensorrtllm_backend); None: not sent under that scheme.
ENSEMBLE_NAMES = {"sampling_param_max_tokens": "max_tokens", "streaming": "stream",
                  "sampling_param_temperature": "temperature", "sampling_param_top_p": "top_p",
                  "sampling_param_top_k": "top_k", "sampling_param_seed": "seed",
                  "sampling_param_return_perf_metrics": "return_perf_metrics", "speculative": None,
                  "stream_delta": None}
DTYPES = {"TYPE_STRING": "BYTES", "TYPE_BOOL": "BOOL", "TYPE_INT32": "INT32", "TYPE_INT64": "INT64",
          "TYPE_UINT64": "UINT64", "TYPE_FP32": "FP32"}


class ServedModel:
    """A served model's config (Triton's JSON form) and the inputs a request to it carries."""

    def __init__(self, config: dict[str, Any]):
        self.config = config

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

    @property
    def cumulative_stream(self) -> bool:
        """True when streamed responses carry the text so far: the stock llmapi model (it sends
        RequestOutput.text); trtspec's cpu model sends only the new text when asked (stream_delta)."""
        return self.llm_api and "stream_delta" not in self.input_types

    def name(self, llm_api_name: str) -> str | None:
        """The served model's name for an LLM-API input, or None when it has no such input."""
        name = llm_api_name if self.llm_api else ENSEMBLE_NAMES.get(llm_api_name, llm_api_name)
        return name if name in self.input_types else None

    def build_inputs(self, prompt: str | bytes, *, max_tokens: int, temperature: float | None = None,
                     top_p: float | None = None, top_k: int | None = None, seed: int | None = None,
                     speculative: bool = True, perf_metrics: bool = True, streaming: bool = True,
                     num_draft_tokens: int | None = None, extra: dict[str, Any] | None = None) -> list[Any]:
        """InferInput objects under the served model's names; values the model lacks are dropped."""
        import numpy as np
        import tritonclient.grpc as grpcclient

        batched = int(self.config.get("max_batch_size", 0)) > 0
        values: dict[str, Any] = {"streaming": streaming, "sampling_param_max_tokens": max_tokens,
                                  "sampling_param_temperature": temperature, "sampling_param_top_p": top_p,
                                  "sampling_param_top_k": top_k, "sampling_param_seed": seed,
                                  "sampling_param_return_perf_metrics": perf_metrics,
                                  "speculative": None if speculative else False,
                                  "stream_delta": True if streaming else None}
        numpy_types = {"BOOL": np.bool_, "INT32": np.int32, "INT64": np.int64, "UINT64": np.uint64,
                       "FP32": np.float32, "BYTES": np.object_}
        input_types = self.input_types
        text = prompt if isinstance(prompt, bytes) else prompt.encode("utf-8")
        arrays = {"text_input": np.array([text], dtype=np.object_)}
        for key, value in values.items():
            name = self.name(key)
            if value is not None and name is not None:
                arrays[name] = _typed(name, value, input_types[name], numpy_types)
        if num_draft_tokens is not None and "num_draft_tokens" in input_types:
            arrays["num_draft_tokens"] = np.array([num_draft_tokens], dtype=np.int32)
        for name, value in (extra or {}).items():
            arrays[name] = value if isinstance(value, np.ndarray) else np.array([value])
        inputs = []
        for name, array in arrays.items():
            if batched:
                array = array.reshape(1, -1)
            dtype = "BYTES" if array.dtype == np.object_ else input_types.get(name) or _np_to_triton(array)
            tensor = grpcclient.InferInput(name, list(array.shape), dtype)
            tensor.set_data_from_numpy(array)
            inputs.append(tensor)
        return inputs


INT_RANGES = {"INT32": (-2**31, 2**31 - 1), "INT64": (-2**63, 2**63 - 1), "UINT64": (0, 2**64 - 1)}


def _typed(name: str, value: Any, dtype: str, numpy_types: dict[str, Any]) -> Any:
    """One value as a one-element array of the input's declared type; an integer out of the
    type's range is refused here (numpy would raise OverflowError, or wrap)."""
    import numpy as np

    if dtype in INT_RANGES and not isinstance(value, bool):
        low, high = INT_RANGES[dtype]
        if not low <= int(value) <= high:
            raise InvalidRequestError(f"{name}: {value} does not fit the served model's {dtype} input "
                                      f"({low}..{high})", fix=f"send a value in {low}..{high}")
    return np.array([value], dtype=numpy_types[dtype])


def _np_to_triton(array: Any) -> str:
    from tritonclient.utils import np_to_triton_dtype

    return np_to_triton_dtype(array.dtype)
