"""The OpenAI protocol layer without a server: request bodies -> the Triton model's inputs, errors."""

from __future__ import annotations

import json

import pytest

from trtspec.serve.openai_protocol import (
    OpenAIError,
    chat_request,
    chunk,
    completion_request,
    triton_error,
    usage,
    usage_chunk,
)

SERVED = ("tiny", "tensorrt_llm")


def test_chat_body_becomes_messages_for_the_model():
    forward = chat_request({"model": "tiny", "messages": [
        {"role": "developer", "content": "be brief"},
        {"role": "user", "content": [{"type": "text", "text": "hi "}, {"type": "text", "text": "there"}]}],
        "max_completion_tokens": 5, "temperature": 0, "stop": "\n", "seed": 7, "stream": True,
        "stream_options": {"include_usage": True}}, SERVED)
    assert json.loads(forward.values.pop("messages")) == [{"role": "system", "content": "be brief"},
                                                          {"role": "user", "content": "hi there"}]
    assert forward.values == {"text_input": "", "sampling_param_max_tokens": 5, "sampling_param_temperature": 0.0,
                              "sampling_param_seed": 7, "sampling_param_stop": ["\n"], "streaming": True,
                              "stream_delta": True, "sampling_param_return_perf_metrics": True}
    assert forward.stream and forward.include_usage
    assert chunk(forward, "x")["usage"] is None  # include_usage: every chunk says usage null


def test_usage_carries_the_draft_tokens_as_completion_tokens_details():
    forward = chat_request({"model": "tiny", "messages": [{"role": "user", "content": "hi"}], "stream": True,
                            "stream_options": {"include_usage": True}}, SERVED)
    # the cpu model's final response: 9 draft tokens, 4 kept by the target
    stats = {"num_input_tokens": 11, "num_output_tokens": 6, "total_draft_tokens": 9, "total_accepted_draft_tokens": 4,
             "num_drafts": 3}
    assert usage(stats) == {"prompt_tokens": 11, "completion_tokens": 6, "total_tokens": 17,
                            "completion_tokens_details": {"accepted_prediction_tokens": 4,
                                                          "rejected_prediction_tokens": 5}}
    assert usage_chunk(forward, stats)["usage"] == usage(stats)
    # a request that drafted nothing says 0 and 0 (as the Dynamo worker does)
    nothing = usage({**stats, "total_draft_tokens": 0, "total_accepted_draft_tokens": 0})
    assert nothing["completion_tokens_details"] == {"accepted_prediction_tokens": 0, "rejected_prediction_tokens": 0}
    # a model that sent no perf metrics: no details rather than zeros nobody counted
    assert "completion_tokens_details" not in usage({"num_input_tokens": 11, "num_output_tokens": 6})


def test_completion_defaults_are_openais():
    forward = completion_request({"model": "tensorrt_llm", "prompt": ["Once"]}, SERVED)
    assert forward.values["text_input"] == "Once" and forward.values["chat_template"] is False
    assert forward.values["sampling_param_max_tokens"] == 16 and forward.values["sampling_param_temperature"] == 1.0


@pytest.mark.parametrize("body, status, words", [
    ({"model": "tiny", "prompt": ["a", "b"]}, 400, "prompt: one string per request"),
    ({"model": "tiny", "prompt": "a", "stream_options": {"include_usage": True}}, 400, "only allowed with stream"),
    ({"model": "tiny", "prompt": "a", "max_tokens": 2**31}, 400, "max_tokens: must be in [1, 2147483647]"),
    ({"model": "tiny", "prompt": "a", "seed": -1}, 400, "seed: must be in [0,"),
    ({"model": "tiny", "prompt": "a", "stop": ["1", "2", "3", "4", "5"]}, 400, "at most 4 strings"),
    ({"model": "tiny", "prompt": "a", "logprobs": 2}, 400, "logprobs: not served"),
    # the engine's ranges (trtspec.sampling_rules), refused here before the model sees them
    ({"model": "tiny", "prompt": "a", "top_p": 0}, 400, "top_p: must be in (0, 1] (got 0.0)"),
    ({"model": "tiny", "prompt": "a", "top_p": 1.5}, 400, "top_p: must be in (0, 1] (got 1.5)"),
    ({"model": "tiny", "prompt": "a", "top_k": -1}, 400, "top_k: must be >= 0, 0 meaning off (got -1)"),
    ({"model": "tiny", "prompt": "a", "temperature": 1e-7}, 400, "temperature: must be 0 (greedy) or at least 1e-05"),
    ({"model": "tiny", "prompt": "a", "temperature": 2.5}, 400, "temperature: must be in [0, 2]"),
    ({"prompt": "a"}, 400, "model: required"),
    ([1, 2], 400, "must be a JSON object"),
])
def test_bad_completion_bodies(body, status, words):
    with pytest.raises(OpenAIError) as raised:
        completion_request(body, SERVED)
    assert raised.value.status == status and words in raised.value.message
    assert raised.value.body()["error"]["type"] == "invalid_request_error"


def test_chat_refuses_images():
    with pytest.raises(OpenAIError, match=r"messages\[0\].content: a string or a list of text parts"):
        chat_request({"model": "tiny", "messages": [{"role": "user", "content": [{"type": "image_url"}]}]}, SERVED)


@pytest.mark.parametrize("message, status", [
    ("server busy: 8 requests running and 64 queued (serve.max_queue_size 64); retry later", 503),
    ("internal error: RuntimeError: boom", 500),
    ("sampling_param_max_tokens: must be below the engine's max_seq_len 512 minus the prompt (got 600)", 400),
])
def test_triton_errors_map_to_http_statuses(message, status):
    error = triton_error(message)
    assert error.status == status and error.message == message
    assert error.body()["error"]["type"] == ("invalid_request_error" if status == 400 else "server_error")
