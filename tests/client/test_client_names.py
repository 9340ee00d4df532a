"""The client speaks the served model's names: LLM-API (cpu, trtllm) or ensemble/BLS (trtllm-engine).

The model configs are the golden repositories' own config.pbtxt files (trtllm-engine: upstream's
templates filled with the golden fills.json), in the JSON form Triton's get_model_config(as_json=True)
returns; no server is needed to build the request tensors.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from trtspec.client.metrics import metric_total, parse_prometheus
from trtspec.client.triton import TritonLLMClient
from trtspec.repository import pbtxt

GOLDEN = Path(__file__).resolve().parents[1] / "golden" / "repository"


def _client(config_path: Path) -> TritonLLMClient:
    from google.protobuf import json_format

    client = TritonLLMClient("127.0.0.1:1", "m")
    client._config = json_format.MessageToDict(pbtxt.check(config_path.read_text()),
                                               preserving_proto_field_name=True)
    return client


def _filled_client(case: str, model: str) -> TritonLLMClient:
    """A trtllm-engine model as the container serves it: upstream's template (contract) with the
    golden fills.json applied."""
    import json

    from google.protobuf import json_format

    from trtspec.repository import trtllm_engine_contract as contract

    data = json.loads((GOLDEN / case / "fills.json").read_text())
    config = contract.filled(contract.section(data["tensorrt_llm_version"]), data["models"])[model]
    client = TritonLLMClient("127.0.0.1:1", "m")
    client._config = json_format.MessageToDict(pbtxt.to_message(config), preserving_proto_field_name=True)
    return client


def _sent(inputs) -> dict:
    return {i.name(): (i.datatype(), i.shape()) for i in inputs}


def test_llm_api_names_for_the_cpu_model():
    client = _client(GOLDEN / "cpu" / "tensorrt_llm" / "config.pbtxt")
    assert client.llm_api and client.decoupled
    sent = _sent(client.build_inputs("hi", max_tokens=5, temperature=0.0, top_p=0.9, seed=3, speculative=False))
    assert sent == {"text_input": ("BYTES", [1]), "streaming": ("BOOL", [1]), "sampling_param_max_tokens": ("INT32", [1]),
                    "sampling_param_temperature": ("FP32", [1]), "sampling_param_top_p": ("FP32", [1]),
                    "sampling_param_seed": ("UINT64", [1]), "sampling_param_return_perf_metrics": ("BOOL", [1]),
                    "speculative": ("BOOL", [1]), "stream_delta": ("BOOL", [1])}


@pytest.mark.parametrize("model", ["ensemble", "tensorrt_llm_bls"])
def test_ensemble_and_bls_names_with_batch_dimension(model):
    client = _filled_client("trtllm-engine-draft-target-tp2", model)
    assert not client.llm_api
    sent = _sent(client.build_inputs("hi", max_tokens=5, temperature=0.5, top_k=4, num_draft_tokens=4,
                                     streaming=False))
    assert sent["max_tokens"] == ("INT32", [1, 1]) and sent["stream"] == ("BOOL", [1, 1])
    assert sent["top_k"] == ("INT32", [1, 1]) and sent["return_perf_metrics"] == ("BOOL", [1, 1])
    assert "speculative" not in sent and "sampling_param_max_tokens" not in sent
    assert ("num_draft_tokens" in sent) == (model == "tensorrt_llm_bls")


def test_prometheus_parsing_sums_labels():
    text = ('# HELP x\n# TYPE trtspec:spec_decode_num_drafts counter\n'
            'trtspec:spec_decode_num_drafts{model="m",version="1"} 3\n'
            'trtspec:spec_decode_num_accepted_tokens_per_pos{model="m",position="0",version="1"} 2\n'
            'trtspec:spec_decode_num_accepted_tokens_per_pos{model="m",position="1",version="1"} 1\n')
    samples = parse_prometheus(text)
    assert metric_total(samples, "trtspec:spec_decode_num_drafts") == 3
    assert metric_total(samples, "trtspec:spec_decode_num_accepted_tokens_per_pos") == 3


def test_an_integer_beyond_the_stock_int32_is_refused_in_the_client():
    from trtspec.client.requests import InvalidRequestError

    client = _client(GOLDEN / "cpu" / "tensorrt_llm" / "config.pbtxt")
    with pytest.raises(InvalidRequestError, match=r"^sampling_param_max_tokens: 4294967312 does not fit .* INT32"):
        client.build_inputs("hi", max_tokens=2**32 + 16)
    assert _sent(client.build_inputs("hi", max_tokens=2**31 - 1))["sampling_param_max_tokens"] == ("INT32", [1])


def test_streams_of_the_stock_model_are_read_as_text_so_far():
    assert _client(GOLDEN / "trtllm-ngram" / "tensorrt_llm" / "config.pbtxt").served.cumulative_stream
    assert not _client(GOLDEN / "cpu" / "tensorrt_llm" / "config.pbtxt").served.cumulative_stream
