"""One meaning of a request on both paths: `text_input` is the prompt as sent.

What Triton's stock llmapi model does with a request (NVIDIA/TensorRT-LLM
triton_backend/all_models/llmapi/tensorrt_llm/1/model.py, `_convert_request`, read at 044a90d2
through the search index; its code is not copied here): `prompt = text_input[0]`, decoded from
UTF-8 when bytes, passed to `LLM.generate_async(prompt, ...)` with no chat template. TensorRT-LLM
then tokenizes it in DefaultInputProcessor (tensorrt_llm/inputs/registry.py):
`tokenizer.encode(prompt, add_special_tokens=sampling_params.add_special_tokens)`, and
SamplingParams.add_special_tokens defaults to true (the stock model's helpers never set it).
`stock_prompt_ids` is exactly that, on the same tokenizer; TensorRT-LLM itself is not installable
here. The cpu model must give the same ids for the same request: in process through its own request
parser and token rule, and through a real tritonserver (the served answer equals the engine's
greedy answer for those ids, and the reported prompt length is theirs).
"""

from __future__ import annotations

import json
import types

import numpy as np
import pytest

from trtspec.triton_model.model import TritonPythonModel
from trtspec.triton_model.request import parse_request

TEXTS = ["The capital of France is",
         "<|im_start|>user\nWhat is 2 + 2?<|im_end|>\n<|im_start|>assistant\n",  # already templated by a client
         "  leading spaces, a tab\tand ünïcode ✓"]


def stock_prompt_ids(tokenizer, values: dict[str, np.ndarray]) -> list[int]:
    """The stock model's reading of text_input, then TensorRT-LLM's DefaultInputProcessor."""
    prompt = values["text_input"][0]
    if isinstance(prompt, bytes):
        prompt = prompt.decode("utf-8")
    return list(tokenizer.encode(prompt, add_special_tokens=True))


def request(text: str, **more: np.ndarray) -> dict[str, np.ndarray]:
    """Inputs as the Python backend hands them to a model (numpy, BYTES as object arrays)."""
    return {"text_input": np.array([text.encode("utf-8")], dtype=np.object_),
            "sampling_param_max_tokens": np.array([8], dtype=np.int32), **more}


def cpu_prompt_ids(engine, values: dict[str, np.ndarray]) -> list[int]:
    """The cpu model's own parser and token rule (TritonPythonModel._token_ids on the real engine)."""
    parsed = parse_request(values, max_seq_len=512)
    return TritonPythonModel._token_ids(types.SimpleNamespace(engine=engine), parsed)


@pytest.fixture(scope="module")
def engine(tiny_llama):
    from trtspec.runtime import Engine

    with Engine.from_checkpoints(tiny_llama, mode="none") as loaded:
        yield loaded


@pytest.mark.parametrize("text", TEXTS)
def test_text_input_gives_the_stock_models_prompt_tokens(engine, text):
    values = request(text)
    assert cpu_prompt_ids(engine, values) == stock_prompt_ids(engine.tokenizer, values)


def test_only_a_request_that_asks_gets_the_chat_template(engine):
    from trtspec.chat import conversation_ids

    tokenizer = engine.tokenizer
    assert tokenizer.chat_template  # the tiny tokenizer has one, so the difference shows
    turn = conversation_ids(tokenizer, [{"role": "user", "content": TEXTS[0]}], add_generation_prompt=True)
    assert cpu_prompt_ids(engine, request(TEXTS[0], chat_template=np.array([True]))) == turn
    messages = json.dumps([{"role": "user", "content": TEXTS[0]}]).encode()
    assert cpu_prompt_ids(engine, request("", messages=np.array([messages], dtype=np.object_))) == turn
    assert turn != stock_prompt_ids(tokenizer, request(TEXTS[0]))


def test_trtspecs_clients_template_client_side_to_the_same_ids(engine):
    # trtspec infer / bench / convert's generate_url render the turn before sending it as
    # text_input; the server then reads those tokens, whichever path serves it
    from trtspec.chat import conversation_ids
    from trtspec.client.prompting import RAW, Renderer

    render = Renderer(engine.tokenizer, "tiny")
    sent = request(render(TEXTS[0]))
    turn = conversation_ids(engine.tokenizer, [{"role": "user", "content": TEXTS[0]}], add_generation_prompt=True)
    assert cpu_prompt_ids(engine, sent) == stock_prompt_ids(engine.tokenizer, sent) == turn
    assert Renderer()(TEXTS[0]) == TEXTS[0] and Renderer().describe() == RAW
    assert "chat template of tiny" in render.describe()


@pytest.mark.e2e
def test_through_tritonserver_the_same_text_input_reads_the_same_tokens(tmp_path, tiny_llama):
    """A stock-style request (text_input + int32 max_tokens, nothing of trtspec's) to the real
    server: its answer is the engine's greedy answer for the stock prompt ids."""
    import tritonclient.grpc as grpcclient
    from tritonclient.utils import np_to_triton_dtype

    from tests.serve.conftest import serving_tiny
    from trtspec.runtime import load_engine

    with serving_tiny(tmp_path, tiny_llama, streaming=False) as (spec, client, engine_dir):
        answers = {}
        with grpcclient.InferenceServerClient(url=f"127.0.0.1:{spec.serve.grpc_port}") as triton:
            for text in TEXTS:
                inputs = []
                for name, array in request(text, sampling_param_return_perf_metrics=np.array([True])).items():
                    tensor = grpcclient.InferInput(name, list(array.shape), np_to_triton_dtype(array.dtype))
                    tensor.set_data_from_numpy(array)
                    inputs.append(tensor)
                result = triton.infer("tensorrt_llm", inputs)
                answers[text] = (result.as_numpy("text_output")[0].decode("utf-8"),
                                 result.as_numpy("num_input_tokens"))
    with load_engine(engine_dir) as engine:
        for text, (answer, num_input_tokens) in answers.items():
            ids = stock_prompt_ids(engine.tokenizer, request(text))
            assert answer == engine.generate(ids, max_new_tokens=8, temperature=0.0).text
            if num_input_tokens is not None:
                assert int(np.asarray(num_input_tokens).reshape(-1)[0]) == len(ids)
