"""Requests a hostile or careless client sends, over HTTP (Triton's generate extension) and gRPC,
against a real tritonserver serving the tiny cpu engine (issue 15, finding 4).

Docstrings of the form "Fault: ... / Behaviour: ..." feed the Reliability table in docs/DEPLOY.md.
"""

from __future__ import annotations

import json
import urllib.error
import urllib.request

import numpy as np
import pytest

from trtspec.errors import ServerError

pytestmark = pytest.mark.e2e


def _generate(spec, body: bytes | dict, timeout: float = 60) -> tuple[int, dict]:
    data = body if isinstance(body, bytes) else json.dumps(body).encode()
    request = urllib.request.Request(f"http://127.0.0.1:{spec.serve.http_port}/v2/models/tensorrt_llm/generate",
                                     data=data, headers={"Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(request, timeout=timeout) as response:
            return response.status, json.loads(response.read())
    except urllib.error.HTTPError as error:
        return error.code, json.loads(error.read() or b"{}")


def _still_serves(spec) -> None:
    status, answer = _generate(spec, {"text_input": "hello there", "sampling_param_max_tokens": 2})
    assert status == 200 and answer["text_output"], answer


def test_http_unknown_json_key_is_refused(served):
    """Fault: an HTTP generate request with a JSON key the model does not take.
    Behaviour: 400 naming the key and the inputs the model takes (Triton passes such keys as
    request parameters; the model refuses every parameter but Triton's own triton_*)."""
    spec, _, _ = served
    status, answer = _generate(spec, {"text_input": "hello", "sampling_param_max_tokens": 2, "max_tokens": 5})
    assert status == 400 and answer["error"].startswith("max_tokens: unknown input")
    assert "sampling_param_max_tokens" in answer["error"]
    _still_serves(spec)


@pytest.mark.parametrize("value, seen", [(2**31, -2**31), (2**32 - 1, -1), (2**32 + 2**31 + 5, -2**31 + 5)])
def test_http_integer_that_wraps_negative_is_refused(served, value, seen):
    """Fault: max_tokens beyond INT32 over HTTP (2**31, 2**32 - 1, ...): Triton's JSON conversion
    truncates it to the stock INT32 input's width, so the model sees a negative number.
    Behaviour: 400 naming sampling_param_max_tokens, "must be at least 1", and the value the model
    saw; the server keeps serving."""
    spec, _, _ = served
    status, answer = _generate(spec, {"text_input": "hello", "sampling_param_max_tokens": value})
    assert status == 400, answer
    assert answer["error"] == f"sampling_param_max_tokens: must be at least 1 (got {seen})"
    _still_serves(spec)


@pytest.mark.parametrize("value, seen", [(2**32 + 16, 16), (-2**32 + 6, 6)])
def test_http_integer_that_wraps_into_range_is_served_as_wrapped(served, value, seen):
    """Fault: max_tokens 4294967312 (2**32 + 16) or -4294967290 over HTTP, which Triton's JSON
    conversion truncates to the stock INT32 input's width: 16 and 6.
    Behaviour: served as max_tokens 16 and 6 (measured; the model cannot tell a wrapped value
    from a sent one; gRPC clients send typed INT32 and trtspec's client refuses such values)."""
    spec, _, _ = served
    status, answer = _generate(spec, {"text_input": "hello", "sampling_param_max_tokens": value,
                                      "sampling_param_return_perf_metrics": True})
    assert status == 200 and answer["finish_reason"] == "length", answer
    assert answer["num_output_tokens"] == seen


def test_http_integer_beyond_int64_is_refused_by_triton(served):
    # Beyond the 64-bit range (2**64 + 16) Triton's JSON parser refuses the request before the
    # model sees it (Triton 2.51 answers 500 with its message); the server keeps serving.
    spec, _, _ = served
    status, answer = _generate(spec, b'{"text_input": "hello", "sampling_param_max_tokens": 18446744073709551632}')
    assert status >= 400 and "parse" in answer["error"]
    _still_serves(spec)


@pytest.mark.parametrize("temperature, message", [(1e-40, "must be 0 (greedy) or at least"),
                                                  (1e39, "must be a finite number")])
def test_http_temperature_that_underflows_or_overflows_is_refused(served, temperature, message):
    """Fault: a positive temperature below float32's range of safe division (1e-40), or one that
    becomes inf as FP32 (1e39).
    Behaviour: 400 naming sampling_param_temperature and the allowed range (0 for greedy, or
    1e-5 and up, finite), not an internal inf/nan error or a served answer."""
    spec, _, _ = served
    status, answer = _generate(spec, {"text_input": "hello", "sampling_param_temperature": temperature,
                                      "sampling_param_max_tokens": 2})
    assert status == 400 and answer["error"].startswith("sampling_param_temperature: " + message), answer
    _still_serves(spec)


@pytest.mark.parametrize("temperature", [1e-40, float("inf"), float("nan")])
def test_grpc_temperature_out_of_range_is_refused(served, temperature):
    _, client, _ = served
    with pytest.raises(ServerError, match="sampling_param_temperature: must be"):
        client.generate("hello", max_tokens=2, temperature=temperature)
    assert client.generate("hello", max_tokens=2)["num_output_tokens"] >= 1


def test_ten_megabyte_prompt_is_refused_by_its_byte_length(served):
    """Fault: a 10 MB prompt (used to be tokenized in full: 10 s and +1.3 GB in the stub).
    Behaviour: refused from its byte length before decoding or tokenizing, with the limit in
    the message (max_input_len x the longest token's bytes)."""
    _, client, _ = served
    with pytest.raises(ServerError, match=r"text_input: 10485760 bytes is more than .* refused before tokenizing"):
        client.generate(b"a" * (10 << 20), max_tokens=2)
    assert client.generate("hello", max_tokens=2)["num_output_tokens"] >= 1


def test_grpc_unknown_parameter_is_refused(served):
    _, client, _ = served
    inputs = client.build_inputs("hello", max_tokens=2)
    import queue

    import tritonclient.grpc as grpcclient

    responses: queue.Queue = queue.Queue()
    stream = grpcclient.InferenceServerClient(client.url)
    stream.start_stream(callback=lambda result=None, error=None: responses.put(error))
    try:
        stream.async_stream_infer("tensorrt_llm", inputs, parameters={"beam_width": 4})
        error = responses.get(timeout=60)
    finally:
        stream.stop_stream()
        stream.close()
    assert error is not None and "beam_width: unknown input" in error.message()
    assert np.isfinite(client.generate("hello", max_tokens=2)["num_output_tokens"])
