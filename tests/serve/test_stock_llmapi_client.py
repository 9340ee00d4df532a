"""A client written for TensorRT-LLM's stock llmapi model talks to the cpu server unchanged.

The requests are built the way triton_backend/tools/llmapi_client.py does (NVIDIA/TensorRT-LLM):
tritonclient.grpc `async_infer` (unary ModelInfer) with `text_input` and an int32
`sampling_param_max_tokens`, a request id and the request parameter `Streaming`; against the
default decoupled server, a gRPC stream with the stock `streaming` input; and the stock `stop`
input (an empty text_input and stop=true under the same request id) to end a running request.
"""

from __future__ import annotations

import queue

import numpy as np
import pytest

pytestmark = pytest.mark.e2e


def _tensor(name: str, array: np.ndarray):
    import tritonclient.grpc as grpcclient
    from tritonclient.utils import np_to_triton_dtype

    tensor = grpcclient.InferInput(name, list(array.shape), np_to_triton_dtype(array.dtype))
    tensor.set_data_from_numpy(array)
    return tensor


def _stock_inputs(prompt: str, output_len: int, **more: np.ndarray) -> list:
    inputs = [_tensor("text_input", np.array([prompt], dtype=object)),
              _tensor("sampling_param_max_tokens", np.array([output_len], dtype=np.int32))]
    return inputs + [_tensor(name, array) for name, array in more.items()]


@pytest.fixture(scope="module")
def unary_served(tmp_path_factory, tiny_llama):
    """The tiny cpu engine served with serve.streaming false (the stock model.yaml's decoupled: False)."""
    from tests.serve.conftest import serving_tiny

    with serving_tiny(tmp_path_factory.mktemp("unary"), tiny_llama, streaming=False) as running:
        yield running


def test_unary_model_infer_with_int32_max_tokens_like_llmapi_client(unary_served):
    import tritonclient.grpc as grpcclient

    spec, client, _ = unary_served
    answers: queue.Queue = queue.Queue()
    with grpcclient.InferenceServerClient(url=f"127.0.0.1:{spec.serve.grpc_port}") as triton:
        triton.async_infer("tensorrt_llm", _stock_inputs("Born in north-east France, Soyer trained as a", 8),
                           outputs=None, request_id="1", callback=lambda result, error: answers.put((result, error)),
                           parameters={"Streaming": False})
        result, error = answers.get(timeout=120)
    assert error is None, error
    text = result.as_numpy("text_output")[0].decode("utf-8")
    # The same request through trtspec's own client (which reads the config) gives the same greedy text.
    assert text and text == client.generate("Born in north-east France, Soyer trained as a", max_tokens=8,
                                            stream=False)["text"]


def test_stream_with_the_stock_streaming_input(served):
    import tritonclient.grpc as grpcclient

    spec, client, _ = served
    prompt = "Born in north-east France, Soyer trained as a"
    responses: queue.Queue = queue.Queue()
    triton = grpcclient.InferenceServerClient(url=f"127.0.0.1:{spec.serve.grpc_port}")
    triton.start_stream(callback=lambda result=None, error=None: responses.put((result, error)))
    pieces = []
    try:
        triton.async_stream_infer("tensorrt_llm", _stock_inputs(prompt, 12, streaming=np.array([True])),
                                  request_id="s1", enable_empty_final_response=True)
        while True:
            result, error = responses.get(timeout=120)
            assert error is None, error
            response = result.get_response()
            if "text_output" in {o.name for o in response.outputs}:
                pieces.append(result.as_numpy("text_output")[0].decode("utf-8"))
            if response.parameters["triton_final_response"].bool_param:
                break
    finally:
        triton.stop_stream()
        triton.close()
    # As the stock model sends RequestOutput.text: each response holds the text so far.
    assert len(pieces) > 1 and all(later.startswith(earlier) for earlier, later in zip(pieces, pieces[1:], strict=False))
    assert pieces[-1] == client.generate(prompt, max_tokens=12)["text"]   # trtspec's client asks for deltas


def test_stock_stop_input_ends_a_running_request(served):
    import tritonclient.grpc as grpcclient

    spec, client, _ = served
    url = f"127.0.0.1:{spec.serve.grpc_port}"
    # The tiny model can write its 400 tokens before the stop arrives on a loaded machine; then the
    # request ends on its own (with a finish_reason) and the attempt says nothing: try again under a
    # new id. A stop that never cancels fails all three.
    with grpcclient.InferenceServerClient(url=url) as other:
        for attempt in range(3):
            tokens, final_outputs = _stop_after_first_response(url, other, f"stop-me-{attempt}")
            if "finish_reason" not in final_outputs:
                break
    # cancelled: an empty final response, no finish_reason (EOS or length would send one)
    assert "finish_reason" not in final_outputs
    assert tokens < 400  # ended early, and the server serves on
    assert client.generate("hello", max_tokens=2)["num_output_tokens"] >= 1


def _stop_after_first_response(url: str, other, request_id: str) -> tuple[int, set[str]]:
    """Stream a 400-token request, send the stock stop for its id (on `other`) once its first
    response is in, and read it to its final response: (responses, the final response's outputs)."""
    import tritonclient.grpc as grpcclient
    from tritonclient.utils import InferenceServerException

    responses: queue.Queue = queue.Queue()
    triton = grpcclient.InferenceServerClient(url=url)
    triton.start_stream(callback=lambda result=None, error=None: responses.put((result, error)))
    try:
        triton.async_stream_infer("tensorrt_llm", _stock_inputs("Count slowly", 400, streaming=np.array([True])),
                                  request_id=request_id, enable_empty_final_response=True)
        first = responses.get(timeout=120)
        assert first[1] is None
        stop = [_tensor("text_input", np.empty([1], dtype=np.bytes_)), _tensor("stop", np.array([True]))]
        with pytest.raises(InferenceServerException, match="Request cancelled by client"):
            _stream_once(other, stop, request_id)
        tokens = 1
        while True:
            result, error = responses.get(timeout=60)
            assert error is None, error
            response = result.get_response()
            if response.parameters["triton_final_response"].bool_param:
                return tokens, {output.name for output in response.outputs}
            tokens += 1
    finally:
        triton.stop_stream()
        triton.close()


def _stream_once(triton, inputs, request_id):
    """One request over a stream; raise its error (a decoupled model takes no unary ModelInfer)."""
    answers: queue.Queue = queue.Queue()
    triton.start_stream(callback=lambda result=None, error=None: answers.put(error))
    try:
        triton.async_stream_infer("tensorrt_llm", inputs, request_id=request_id)
        error = answers.get(timeout=60)
    finally:
        triton.stop_stream()
    if error is not None:
        raise error


def test_trtspec_client_reads_a_stock_style_stream_as_new_text(served):
    """trtspec's client against a model without the stream_delta addition (the stock llmapi model
    on the GPU): it receives the text so far and yields only the new part of each response."""
    from trtspec.client.triton import TritonLLMClient

    spec, client, _ = served
    stock = TritonLLMClient(client.url)
    config = dict(stock.config)
    config["input"] = [i for i in config["input"] if i["name"] != "stream_delta"]
    stock._config = config   # the served model as the stock config declares it
    try:
        events = list(stock.stream("Born in north-east France, Soyer trained as a", max_tokens=12))
    finally:
        stock.close()
    assert len(events) > 2 and "".join(e.text for e in events) == \
        client.generate("Born in north-east France, Soyer trained as a", max_tokens=12)["text"]
