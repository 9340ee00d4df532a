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
        values: dict[str, Any] = {"text_input": prompt, "streaming": streaming, "sampling_param_max_tokens": max_tokens,
                                  "sampling_param_temperature": temperature, "sampling_param_top_p": top_p,
                                  "sampling_param_top_k": top_k, "sampling_param_seed": seed,
                                  "sampling_param_return_perf_metrics": perf_metrics,
                                  "speculative": None if speculative else False,
                                  "stream_delta": True if streaming else None, "num_draft_tokens": num_draft_tokens}
        return self.inputs(values, extra=extra)

    def inputs(self, values: dict[str, Any], *, extra: dict[str, Any] | None = None) -> list[Any]:
        """The one builder of a request's InferInputs (the bench, infer and OpenAI clients all use it).

        `values`: LLM-API input name -> a Python value, or a list of them for a list input such as
        `sampling_param_stop`; each is sent under the served model's name for it, typed as the
        model declares it, with the batch dimension where the model batches. None values and
        inputs the model lacks are dropped (the stock llmapi model lacks trtspec's additions).
        `extra`: input name -> value or numpy array, sent as given whether declared or not.
        """
        import numpy as np
        import tritonclient.grpc as grpcclient

        input_types = self.input_types
        arrays = {}
        for key, value in values.items():
            name = self.name(key)
            if value is not None and name is not None:
                arrays[name] = _typed(name, value, input_types[name])
        for name, value in (extra or {}).items():
            arrays[name] = value if isinstance(value, np.ndarray) else np.array([value])
        batched = int(self.config.get("max_batch_size", 0)) > 0
        inputs = []
        for name, array in arrays.items():
            if batched:
                array = array.reshape(1, -1)
            dtype = "BYTES" if array.dtype == np.object_ else input_types.get(name) or _np_to_triton(array)
            tensor = grpcclient.InferInput(name, list(array.shape), dtype)
            tensor.set_data_from_numpy(array)
            inputs.append(tensor)
        return inputs


NUMPY_TYPES = {"BOOL": "bool", "INT32": "int32", "INT64": "int64", "UINT64": "uint64", "FP32": "float32"}
INT_RANGES = {"INT32": (-2**31, 2**31 - 1), "INT64": (-2**63, 2**63 - 1), "UINT64": (0, 2**64 - 1)}


def _typed(name: str, value: Any, dtype: str) -> Any:
    """A value (or a list of them) as an array of the input's declared type: text as UTF-8 bytes;
    an integer out of the type's range is refused here (numpy would raise OverflowError, or wrap)."""
    import numpy as np

    items = value if isinstance(value, list) else [value]
    if dtype == "BYTES":
        return np.array([v.encode("utf-8") if isinstance(v, str) else v for v in items], dtype=np.object_)
    if dtype in INT_RANGES:
        low, high = INT_RANGES[dtype]
        for item in items:
            if not isinstance(item, bool) and not low <= int(item) <= high:
                raise InvalidRequestError(f"{name}: {item} does not fit the served model's {dtype} input "
                                          f"({low}..{high})", fix=f"send a value in {low}..{high}")
    return np.array(items, dtype=NUMPY_TYPES[dtype])


def _np_to_triton(array: Any) -> str:
    from tritonclient.utils import np_to_triton_dtype

    return np_to_triton_dtype(array.dtype)
