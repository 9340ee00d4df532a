"""response_format and tools as the OpenAI protocol reads them (pure: no server): the guided-
decoding inputs a request sends, the refusals, and the tool-call response shape."""

from __future__ import annotations

import json

import pytest

from trtspec.serve.openai_protocol import OpenAIError, chat_request, completion_request, full_response

SERVED = ("tiny",)
WEATHER = {"type": "function", "function": {"name": "get_weather", "description": "Weather in a city",
                                            "parameters": {"type": "object", "properties": {"city": {"type": "string"}},
                                                           "required": ["city"]}}}
TIME = {"type": "function", "function": {"name": "get_time", "parameters": {"type": "object"}}}


def _chat(**fields):
    return chat_request({"model": "tiny", "messages": [{"role": "user", "content": "hi"}], **fields}, SERVED)


def test_json_schema_and_json_object_become_the_guided_decoding_inputs():
    schema = {"type": "object", "properties": {"a": {"type": "integer"}}}
    forward = _chat(response_format={"type": "json_schema", "json_schema": {"name": "x", "schema": schema}})
    assert forward.values["guided_decoding_guide_type"] == "json_schema"
    assert json.loads(forward.values["guided_decoding_guide"]) == schema
    assert forward.guide.param == "response_format"
    forward = completion_request({"model": "tiny", "prompt": "hi", "response_format": {"type": "json_object"}}, SERVED)
    # any object, as a schema: the legacy tensorrtllm backend's guide types have no json_object
    assert forward.values["guided_decoding_guide_type"] == "json_schema"
    assert json.loads(forward.values["guided_decoding_guide"]) == {"type": "object"}
    assert "guided_decoding_guide_type" not in _chat(response_format={"type": "text"}).values


def test_tool_choice_auto_is_free_text_in_which_a_call_is_whole():
    forward = _chat(tools=[WEATHER, TIME])  # tool_choice auto (the default)
    assert forward.values["guided_decoding_guide_type"] == "structural_tag" and forward.guide.auto
    tag = json.loads(forward.values["guided_decoding_guide"])["format"]
    assert tag["type"] == "triggered_tags" and tag["triggers"] == ['{"name": ']
    assert [t["begin"] for t in tag["tags"]] == ['{"name": "get_weather", "arguments": ',
                                                 '{"name": "get_time", "arguments": ']
    assert tag["tags"][0]["content"]["json_schema"] == WEATHER["function"]["parameters"]
    assert not tag["at_least_one"] and not tag["stop_after_first"]  # parallel_tool_calls: OpenAI's default true
    one = json.loads(_chat(tools=[WEATHER], parallel_tool_calls=False).values["guided_decoding_guide"])
    assert one["format"]["stop_after_first"]
    assert "otherwise answer in text" in json.loads(forward.values["messages"])[0]["content"]


def test_an_auto_answer_is_text_calls_or_both():
    forward = _chat(tools=[WEATHER, TIME])
    text = full_response(forward, 'It is {"name":"x"} sunny.', {"finish_reason": "stop"})["choices"][0]
    assert text["finish_reason"] == "stop" and text["message"] == {"role": "assistant",
                                                                   "content": 'It is {"name":"x"} sunny.'}
    both = ('Let me look. {"name": "get_weather", "arguments": {"city": "Oslo"}} and '
            '{"name": "get_time", "arguments": {}}')
    choice = full_response(forward, both, {"finish_reason": "stop"})["choices"][0]
    assert choice["finish_reason"] == "tool_calls" and choice["message"]["content"] == "Let me look.  and "
    assert [(c["function"]["name"], json.loads(c["function"]["arguments"])) for c in choice["message"]["tool_calls"]] \
        == [("get_weather", {"city": "Oslo"}), ("get_time", {})]
    # a call cut by max_tokens stays text, the whole ones before it are calls
    cut = full_response(forward, both[:-6], {"finish_reason": "length"})["choices"][0]
    assert cut["finish_reason"] == "length" and len(cut["message"]["tool_calls"]) == 1
    assert cut["message"]["content"].endswith('{"name": "get_time", "arguments')


def test_an_auto_stream_sends_text_until_a_call_may_begin():
    from trtspec.serve.openai_tools import AutoStream

    stream = AutoStream(("get_time",))
    pieces = ["Hi {", '"na', 'me": "get_time", "arguments": {}}', " bye"]
    sent = [stream.feed(piece) for piece in pieces]
    # "{" and '{"na' may begin a call: held back; once the trigger is whole, the rest is held to the end
    assert sent == ["Hi ", "", "", ""]
    content, calls = stream.finish()
    assert content == " bye" and [c["function"]["name"] for c in calls] == ["get_time"]
    plain = AutoStream(("get_time",))
    assert [plain.feed(p) for p in ["a {", "b", " c"]] == ["a ", "{b", " c"]


def test_tools_constrain_a_required_call_and_a_named_function_forces_it():
    forward = _chat(tools=[WEATHER, TIME], tool_choice="required")
    schema = json.loads(forward.values["guided_decoding_guide"])
    assert [c["properties"]["name"] for c in schema["anyOf"]] == [{"const": "get_weather"}, {"const": "get_time"}]
    assert schema["anyOf"][0]["properties"]["arguments"] == WEATHER["function"]["parameters"]
    assert forward.guide.tools == ("get_weather", "get_time") and forward.guide.param == "tools"
    forced = _chat(tools=[WEATHER, TIME], tool_choice={"type": "function", "function": {"name": "get_time"}})
    assert json.loads(forced.values["guided_decoding_guide"])["properties"]["name"] == {"const": "get_time"}
    messages = json.loads(forced.values["messages"])
    # the system turn describes the tool the model must call, and only it
    assert messages[0]["role"] == "system" and "get_time" in messages[0]["content"]
    assert "get_weather" not in messages[0]["content"]
    none = _chat(tools=[WEATHER], tool_choice="none")
    assert "guided_decoding_guide_type" not in none.values and none.guide is None


@pytest.mark.parametrize("fields, param, words", [
    ({"response_format": {"type": "yaml"}}, "response_format", "type must be"),
    ({"response_format": {"type": "json_schema", "json_schema": {"name": "x", "schema": []}}}, "response_format",
     "json_schema must be"),
    ({"tools": [{"type": "function", "function": {}}]}, "tools", "tools[0]"),
    ({"tools": [WEATHER], "tool_choice": {"type": "function", "function": {"name": "nope"}}}, "tool_choice",
     "one of get_weather"),
    ({"tools": [WEATHER], "response_format": {"type": "json_object"}}, "response_format", "not with tools"),
    ({"tools": [WEATHER], "parallel_tool_calls": "yes"}, "parallel_tool_calls", "true or false"),
])
def test_bad_formats_are_refused_naming_the_field(fields, param, words):
    with pytest.raises(OpenAIError) as raised:
        _chat(**fields)
    body = raised.value.body()["error"]
    assert raised.value.status == 400 and body["param"] == param and words in body["message"]
    assert body["type"] == "invalid_request_error"


def test_a_tool_call_answer_has_openai_shape():
    forward = _chat(tools=[WEATHER], tool_choice="required")
    text = '{"name": "get_weather", "arguments": {"city": "Paris"}}'
    choice = full_response(forward, text, {"finish_reason": "stop"})["choices"][0]
    assert choice["finish_reason"] == "tool_calls" and choice["message"]["content"] is None
    (call,) = choice["message"]["tool_calls"]
    assert call["type"] == "function" and call["id"].startswith("call_")
    assert call["function"]["name"] == "get_weather" and json.loads(call["function"]["arguments"]) == {"city": "Paris"}
    # cut by max_tokens: no call, the text as content
    cut = full_response(forward, '{"name": "get_wea', {"finish_reason": "length"})["choices"][0]
    assert cut["finish_reason"] == "length" and cut["message"]["content"] == '{"name": "get_wea'


def test_tool_turns_in_the_history_are_read_as_text():
    forward = _chat(messages=[{"role": "user", "content": "weather?"},
                              {"role": "assistant", "content": None, "tool_calls": [
                                  {"id": "call_1", "type": "function",
                                   "function": {"name": "get_weather", "arguments": "{\"city\": \"Oslo\"}"}}]},
                              {"role": "tool", "tool_call_id": "call_1", "content": "sunny"}], tools=[WEATHER])
    messages = json.loads(forward.values["messages"])
    assert json.loads(messages[2]["content"]) == {"name": "get_weather", "arguments": {"city": "Oslo"}}
    # several calls (parallel), after some text: one line each, as the model writes them
    two = _chat(messages=[{"role": "user", "content": "weather?"},
                          {"role": "assistant", "content": "Both:", "tool_calls": [
                              {"id": "c1", "type": "function", "function": {"name": "get_weather", "arguments": "{}"}},
                              {"id": "c2", "type": "function", "function": {"name": "get_time", "arguments": "{}"}}]}],
                tools=[WEATHER, TIME])
    assert json.loads(two.values["messages"])[2]["content"] == \
        'Both:\n{"name": "get_weather", "arguments": {}}\n{"name": "get_time", "arguments": {}}'
    assert messages[3] == {"role": "user", "content": "Tool result: sunny"}
