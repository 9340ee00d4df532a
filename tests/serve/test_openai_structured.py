"""Structured output and tool calls through the OpenAI endpoint, a real tritonserver serving the
tiny cpu engine (n-gram speculation): JSON-schema answers and tool calls are valid and equal
to the same request without speculation, one at a time and 8 at once; a schema the grammar
cannot compile gets OpenAI's error shape and the server serves on."""

from __future__ import annotations

import json
from concurrent.futures import ThreadPoolExecutor

import pytest

pytestmark = [pytest.mark.e2e, pytest.mark.slow]

SCHEMA = {"type": "object", "additionalProperties": False, "required": ["color", "ok", "n"],
          "properties": {"color": {"enum": ["red", "green", "blue"]}, "ok": {"type": "boolean"},
                         "n": {"type": "integer", "minimum": 0, "maximum": 999}}}
WEATHER = {"type": "function", "function": {
    "name": "get_weather", "description": "The weather in a city for some days",
    "parameters": {"type": "object", "additionalProperties": False, "required": ["city", "days"],
                   "properties": {"city": {"enum": ["Paris", "Oslo", "Lima"]},
                                  "days": {"type": "integer", "minimum": 1, "maximum": 7}}}}}
PROMPTS = ["What is the capital of France?", "the quick brown fox", "def add(a, b):", "1 2 3 4 5 6",
           "Tell me a color", "speculative decoding drafts tokens", "Is it true?", "Count to ten"]


@pytest.fixture(scope="module")
def api(tmp_path_factory, tiny_llama):
    from tests.serve.conftest import free_ports, serving_tiny

    (port,) = free_ports(1)
    # a tool's description in the system turn is ~400 of the tiny byte-level tokenizer's tokens
    with serving_tiny(tmp_path_factory.mktemp("openai-structured"), tiny_llama, openai_port=port,
                      build_fields={"max_seq_len": 1024, "max_input_len": 768}):
        from openai import OpenAI

        yield OpenAI(base_url=f"http://127.0.0.1:{port}/v1", api_key="unused", max_retries=0, timeout=300)


def _schema_answer(api, prompt: str, speculative: bool):
    return api.chat.completions.create(
        model="tiny", messages=[{"role": "user", "content": prompt}], temperature=0, max_completion_tokens=48,
        response_format={"type": "json_schema", "json_schema": {"name": "answer", "schema": SCHEMA}},
        extra_body={} if speculative else {"speculative": False})


def _tool_answer(api, prompt: str, speculative: bool):
    return api.chat.completions.create(
        model="tiny", messages=[{"role": "user", "content": prompt}], temperature=0, max_completion_tokens=96,
        tools=[WEATHER], tool_choice={"type": "function", "function": {"name": "get_weather"}},
        extra_body={} if speculative else {"speculative": False})


def test_json_schema_answers_are_valid_and_equal_without_speculation_one_and_eight_at_once(api):
    plain = [_schema_answer(api, p, speculative=False) for p in PROMPTS]
    for answer in plain:
        assert answer.choices[0].finish_reason == "stop"
        value = json.loads(answer.choices[0].message.content)
        assert set(value) == {"color", "ok", "n"} and value["color"] in ("red", "green", "blue")
    assert _schema_answer(api, PROMPTS[0], True).choices[0].message.content == plain[0].choices[0].message.content
    with ThreadPoolExecutor(8) as pool:
        at_once = list(pool.map(lambda p: _schema_answer(api, p, True), PROMPTS))
    assert [a.choices[0].message.content for a in at_once] == [a.choices[0].message.content for a in plain]


def test_tool_calls_have_openai_shape_and_equal_without_speculation_one_and_eight_at_once(api):
    plain = [_tool_answer(api, p, speculative=False) for p in PROMPTS]
    for answer in plain:
        choice = answer.choices[0]
        assert choice.finish_reason == "tool_calls" and choice.message.content is None
        (call,) = choice.message.tool_calls
        assert call.type == "function" and call.function.name == "get_weather"
        arguments = json.loads(call.function.arguments)
        assert arguments["city"] in ("Paris", "Oslo", "Lima") and 1 <= arguments["days"] <= 7
    with ThreadPoolExecutor(8) as pool:
        at_once = list(pool.map(lambda p: _tool_answer(api, p, True), PROMPTS))
    assert [a.choices[0].message.tool_calls[0].function.arguments for a in at_once] == \
        [a.choices[0].message.tool_calls[0].function.arguments for a in plain]


def test_a_streamed_tool_call_arrives_whole(api):
    stream = api.chat.completions.create(
        model="tiny", messages=[{"role": "user", "content": PROMPTS[0]}], temperature=0, max_completion_tokens=96,
        tools=[WEATHER], tool_choice="required", stream=True)
    chunks = list(stream)
    calls = [c.choices[0].delta.tool_calls for c in chunks if c.choices and c.choices[0].delta.tool_calls]
    assert len(calls) == 1 and calls[0][0].function.name == "get_weather"
    whole = _tool_answer(api, PROMPTS[0], True).choices[0].message.tool_calls[0]
    assert calls[0][0].function.arguments == whole.function.arguments
    assert chunks[-1].choices[0].finish_reason == "tool_calls"


def test_a_schema_the_grammar_cannot_compile_gets_openai_error_shape(api):
    import openai

    for bad in ({"type": "objectx"}, {"type": "string", "pattern": "(?<=a)b"}):
        with pytest.raises(openai.BadRequestError) as raised:
            api.chat.completions.create(
                model="tiny", messages=[{"role": "user", "content": "hi"}], max_completion_tokens=8,
                response_format={"type": "json_schema", "json_schema": {"name": "bad", "schema": bad}})
        body = raised.value.body
        assert raised.value.status_code == 400 and body["type"] == "invalid_request_error", body
        assert body["param"] == "response_format" and "cannot be compiled" in body["message"], body
    answer = api.chat.completions.create(model="tiny", messages=[{"role": "user", "content": "hi"}], temperature=0,
                                         max_completion_tokens=24, response_format={"type": "json_object"})
    assert answer.choices[0].finish_reason in ("stop", "length")
    if answer.choices[0].finish_reason == "stop":
        assert isinstance(json.loads(answer.choices[0].message.content), dict)
