"""The cpu model's request checks, without a server (the e2e tests send the same through Triton)."""

from __future__ import annotations

import json

import numpy as np
import pytest

from trtspec.triton_model.request import InvalidRequest, StopRequest, parse_request


def _req(**values):
    arrays = {"text_input": np.array([b"hello"], dtype=np.object_)}
    for name, value in values.items():
        arrays[name] = value if isinstance(value, np.ndarray) else np.array([value])
    return arrays


def test_defaults_and_values_are_read():
    parsed = parse_request(_req(sampling_param_max_tokens=np.array([5], np.int32), streaming=np.array([True]),
                                sampling_param_top_p=np.array([0.5], np.float32), speculative=np.array([False]),
                                sampling_param_seed=np.array([7], np.uint64),
                                sampling_param_stop=np.array([b"\n", b""], dtype=np.object_)), max_seq_len=512)
    assert (parsed.prompt, parsed.max_tokens, parsed.streaming, parsed.top_p, parsed.speculative, parsed.seed) == \
        ("hello", 5, True, 0.5, False, 7)
    assert parsed.stop == ["\n"] and parsed.temperature == 0.0 and not parsed.perf_metrics


@pytest.mark.parametrize("values, message", [
    ({"text_input": np.array([b"  "], dtype=np.object_)}, "text_input: empty"),
    ({"text_input": np.array([b"\xff\xfe"], dtype=np.object_)}, "not valid UTF-8"),
    ({"sampling_param_max_tokens": np.array([0], np.int32)}, "at least 1"),
    ({"sampling_param_max_tokens": np.array([-4], np.int32)}, "at least 1"),
    ({"sampling_param_max_tokens": np.array([600], np.int32)}, "max_seq_len 512"),
    ({"sampling_param_temperature": np.array([-0.1], np.float32)}, "temperature: must be >= 0"),
    ({"sampling_param_temperature": np.array([np.nan], np.float32)}, "temperature: must be a finite number"),
    ({"sampling_param_temperature": np.array([np.inf], np.float32)}, "temperature: must be a finite number"),
    ({"sampling_param_temperature": np.array([1e-40], np.float32)}, "temperature: must be 0 .greedy. or at least"),
    ({"sampling_param_top_p": np.array([0.0], np.float32)}, r"top_p: must be in \(0, 1\]"),
    ({"sampling_param_top_p": np.array([1.01], np.float32)}, r"top_p: must be in \(0, 1\]"),
    ({"sampling_param_top_k": np.array([-1], np.int32)}, "top_k"),
    ({"sampling_param_max_tokens": np.array([1, 2], np.int32)}, "expected one value"),
])
def test_bad_requests_name_the_problem(values, message):
    with pytest.raises(InvalidRequest, match=message):
        parse_request(_req(**values), max_seq_len=512)


def test_missing_text_input():
    with pytest.raises(InvalidRequest, match="text_input: required"):
        parse_request({}, max_seq_len=512)


def test_temperature_rule_is_the_engines():
    """Zero and finite values from MIN_TEMPERATURE up pass both the server boundary and the engine."""
    from trtspec.runtime.loop.request import MIN_TEMPERATURE, InvalidRequestError, validate

    for ok in (0.0, MIN_TEMPERATURE, 0.7, 1e30):
        assert parse_request(_req(sampling_param_temperature=np.array([ok], np.float64)), max_seq_len=512).temperature == ok
        validate(num_prompt_tokens=1, max_input_len=8, max_new_tokens=1, temperature=ok, top_k=0, top_p=1.0)
    for bad in (MIN_TEMPERATURE / 2, float("inf"), float("nan"), -1.0):
        with pytest.raises(InvalidRequestError, match="temperature"):
            validate(num_prompt_tokens=1, max_input_len=8, max_new_tokens=1, temperature=bad, top_k=0, top_p=1.0)


@pytest.mark.parametrize("parameters", [{"bogus": 3}, '{"max_tokens": 4}', {"triton_x": 1, "sampling_param_n": 2}])
def test_unknown_request_parameters_are_refused(parameters):
    with pytest.raises(InvalidRequest, match="unknown input"):
        parse_request(_req(), max_seq_len=512, parameters=parameters)


def test_tritons_own_parameters_pass():
    parse_request(_req(), max_seq_len=512, parameters='{"triton_enable_empty_final_response": true}')
    parse_request(_req(), max_seq_len=512, parameters="{}")


def test_prompt_over_the_byte_limit_is_refused_before_decoding():
    # Invalid UTF-8 too: the byte check comes first, nothing is decoded.
    with pytest.raises(InvalidRequest, match=r"text_input: 11 bytes .* \(10 bytes\)"):
        parse_request(_req(text_input=np.array([b"\xff" * 11], dtype=np.object_)), max_seq_len=512, max_prompt_bytes=10)
    assert parse_request(_req(), max_seq_len=512, max_prompt_bytes=5).prompt == "hello"


@pytest.mark.parametrize("source", ["tiny", "smollm2"])
def test_prompt_byte_limit_is_sound(source, request):
    """No text over the limit fits max_input_len tokens: for prompts a little over the limit the
    token count (chat template included) always exceeds max_input_len, on random bytes, on text
    made of the longest tokens, and on long runs of spaces (the longest SmolLM2 tokens)."""
    import random

    from transformers import AutoTokenizer

    from trtspec.chat import prompt_ids
    from trtspec.triton_model.request import prompt_byte_limit

    tokenizer = AutoTokenizer.from_pretrained(request.getfixturevalue("tiny_llama" if source == "tiny" else source))
    max_input_len = 64
    limit = prompt_byte_limit(tokenizer, max_input_len)
    assert limit is not None
    vocab = sorted(tokenizer.get_vocab(), key=lambda t: -len(tokenizer.convert_tokens_to_string([t]).encode()))
    longest_text = tokenizer.convert_tokens_to_string(vocab[:1])
    rng = random.Random(0)
    samples = [" " * (limit + 1), (longest_text * (limit // max(1, len(longest_text.encode())) + 2)),
               bytes(rng.randrange(256) for _ in range(limit + 1)).decode("utf-8", errors="replace"),
               "".join(chr(rng.randrange(0x20, 0x3000)) for _ in range(limit + 1))]
    for text in samples:
        assert len(text.encode()) > limit
        assert len(prompt_ids(tokenizer, text, None)) > max_input_len, text[:40]


def test_stock_stop_input_asks_to_cancel_before_anything_else_is_read():
    # The stock client (llmapi_client.py prepare_stop_signals) sends an empty text_input with stop.
    values = {"text_input": np.array([b""], dtype=np.object_), "stop": np.array([True])}
    assert isinstance(parse_request(values, max_seq_len=512), StopRequest)


@pytest.mark.parametrize("name, value, reason", [
    ("sampling_param_frequency_penalty", np.float32(0.5), "applies no penalties"),
    ("sampling_param_presence_penalty", np.float32(-1.0), "applies no penalties"),
    ("sampling_param_best_of", np.int32(2), "one sequence per request"),
    ("return_cumulative_logprob", True, "log probabilities"),
    ("return_stop_reason", True, "which stop string"),
])
def test_stock_inputs_the_engine_cannot_honour_are_refused_with_the_reason(name, value, reason):
    with pytest.raises(InvalidRequest, match=f"^{name}: only .* is served \\(.*{reason}"):
        parse_request(_req(**{name: np.array([value])}), max_seq_len=512)


def test_stock_inputs_at_their_default_pass():
    parsed = parse_request(_req(sampling_param_frequency_penalty=np.float32(0.0), sampling_param_best_of=np.int32(1),
                                sampling_param_exclude_input_from_output=True, return_finish_reason=True,
                                sampling_param_top_k=np.int32(4)), max_seq_len=512)
    # text_input as the stock model reads it: no chat template unless the request asks for one
    assert parsed.top_k == 4 and not parsed.chat_template
    assert parse_request(_req(chat_template=np.array([True])), max_seq_len=512).chat_template


def test_messages_addition_replaces_text_input():
    messages = [{"role": "system", "content": "be brief"}, {"role": "user", "content": "hi"}]
    values = _req(messages=np.array([json.dumps(messages).encode()], dtype=np.object_))
    assert parse_request(values, max_seq_len=512).messages == messages
    with pytest.raises(InvalidRequest, match="^messages: must be a non-empty array"):
        parse_request(_req(messages=np.array([b'[{"role": "robot", "content": "x"}]'], dtype=np.object_)),
                      max_seq_len=512)
    with pytest.raises(InvalidRequest, match="^messages: 40 bytes of content is more than"):
        parse_request(_req(messages=np.array([json.dumps([{"role": "user", "content": "x" * 40}]).encode()],
                                             dtype=np.object_)), max_seq_len=512, max_prompt_bytes=39)


def test_int32_max_tokens_that_wrapped_negative_is_refused():
    # Over HTTP Triton truncates 4294967295 to INT32 -1 before the model sees it.
    with pytest.raises(InvalidRequest, match="^sampling_param_max_tokens: must be at least 1 \\(got -1\\)"):
        parse_request(_req(sampling_param_max_tokens=np.array([-1], np.int32)), max_seq_len=512)


def test_the_llmapi_clients_streaming_parameter_is_accepted_and_ignored():
    # triton_backend/tools/llmapi_client.py sends parameters={'Streaming': flag}; the stock model ignores it.
    parsed = parse_request(_req(), max_seq_len=512, parameters={"Streaming": True})
    assert parsed.streaming is False
