"""Structured output and tool calls through the OpenAI endpoint, a real tritonserver serving the
tiny cpu engine (n-gram speculation): JSON-schema answers and tool calls are valid and equal
to the same request without speculation, one at a time and 8 at once; tool_choice auto lets the
model answer in text (the tiny random model never opens a call); a schema the grammar cannot
compile gets OpenAI's error shape and the server serves on. EAGLE-3 (a tiny seeded head), suffix
and draft-target each get one server and one test: schema, forced-call, auto and plain requests
equal without speculation, 8 at once."""

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


def _tool_answer(api, prompt: str, speculative: bool, tool_choice=None, max_tokens: int = 96):
    return api.chat.completions.create(
        model="tiny", messages=[{"role": "user", "content": prompt}], temperature=0, max_completion_tokens=max_tokens,
        tools=[WEATHER], tool_choice=tool_choice or {"type": "function", "function": {"name": "get_weather"}},
        extra_body={} if speculative else {"speculative": False})


def _auto_answer(api, prompt: str, speculative: bool):
    return _tool_answer(api, prompt, speculative, tool_choice="auto", max_tokens=24)


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


def test_tool_choice_auto_lets_the_model_answer_in_text(api):
    """Under tool_choice auto (the structural_tag guide) the tiny random model writes text, never
    `{"name": `: the answer is content, equal without speculation and when streamed."""
    plain = [_auto_answer(api, p, speculative=False) for p in PROMPTS[:4]]
    spec = [_auto_answer(api, p, speculative=True) for p in PROMPTS[:4]]
    for a, b in zip(plain, spec, strict=True):
        assert a.choices[0].message.tool_calls is None and a.choices[0].finish_reason in ("stop", "length")
        assert a.choices[0].message.content and a.choices[0].message.content == b.choices[0].message.content
    stream = api.chat.completions.create(
        model="tiny", messages=[{"role": "user", "content": PROMPTS[0]}], temperature=0, max_completion_tokens=24,
        tools=[WEATHER], tool_choice="auto", stream=True)
    chunks = list(stream)
    assert "".join(c.choices[0].delta.content or "" for c in chunks if c.choices) == plain[0].choices[0].message.content
    assert not any(c.choices[0].delta.tool_calls for c in chunks if c.choices)


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


MODES = {"eagle3": {"mode": "eagle3"}, "suffix": {"mode": "suffix"}, "draft-target": {"mode": "draft-target"}}


@pytest.fixture(scope="module", params=list(MODES))
def mode_api(request, tmp_path_factory, tiny_llama, tiny_llama_draft):
    """The OpenAI endpoint over the tiny target speculating with EAGLE-3 (a seeded random head laid
    out as ModelOpt exports it), suffix trees or the tiny draft model."""
    from tests.builders.conftest import make_eagle3_head
    from tests.serve.conftest import free_ports, serving_tiny

    root = tmp_path_factory.mktemp(f"openai-structured-{request.param}")
    # a schedule that always drafts: the cost model might turn drafting off for this cheap target
    speculative = {**MODES[request.param], "max_draft_len": 4, "draft_len_schedule": [[1, 4], [8, 4]]}
    if request.param == "eagle3":
        make_eagle3_head(root / "work" / "checkpoints" / "eagle3", tiny_llama)
    if request.param == "draft-target":
        speculative["draft"] = str(tiny_llama_draft)
    (port,) = free_ports(1)
    with serving_tiny(root, tiny_llama, openai_port=port, speculative_fields=speculative,
                      build_fields={"max_seq_len": 1024, "max_input_len": 768}):
        from openai import OpenAI

        yield OpenAI(base_url=f"http://127.0.0.1:{port}/v1", api_key="unused", max_retries=0, timeout=300)


# Short answers for the per-mode test (the tiny tokenizer spends a token on most characters)
SMALL = {"type": "object", "additionalProperties": False, "required": ["ok", "n"],
         "properties": {"ok": {"type": "boolean"}, "n": {"type": "integer", "minimum": 0, "maximum": 9}}}
ADD = {"type": "function", "function": {"name": "add", "description": "Add a digit", "parameters": {
    "type": "object", "additionalProperties": False, "required": ["a"],
    "properties": {"a": {"type": "integer", "minimum": 0, "maximum": 9}}}}}


def _ask(api, kind: str, prompt: str, speculative: bool):
    common = {"model": "tiny", "messages": [{"role": "user", "content": prompt}], "temperature": 0,
              "extra_body": {} if speculative else {"speculative": False}}
    if kind == "schema":
        return api.chat.completions.create(
            max_completion_tokens=32, response_format={"type": "json_schema", "json_schema": {"name": "small",
                                                                                            "schema": SMALL}},
            **common)
    if kind == "text":
        return api.chat.completions.create(max_completion_tokens=16, **common)
    return api.chat.completions.create(max_completion_tokens=48 if kind == "call" else 8, tools=[ADD],
                                       tool_choice="required" if kind == "call" else "auto", **common)


def test_every_mode_serves_schemas_and_tool_calls_equal_without_speculation(mode_api):
    """Per mode: two JSON-schema answers, a required tool call, an auto answer (text, from the tiny
    model) and a plain one, each equal to its own request without speculation when 8 run at once
    (grammars mixed in the batch; one at a time: the engine tests, test_rt_grammar_engine, and the
    n-gram tests above); something was drafted (under a grammar the random EAGLE-3 head's drafts
    are all cut, which the engine tests count; the plain answer drafts)."""
    jobs = [("schema", PROMPTS[0]), ("schema", PROMPTS[2]), ("call", PROMPTS[1]), ("auto", PROMPTS[3]),
            ("text", PROMPTS[4])]

    def what(answer):
        message = answer.choices[0].message
        return message.content, [(c.function.name, c.function.arguments) for c in message.tool_calls or []]

    plain = [what(_ask(mode_api, kind, prompt, False)) for kind, prompt in jobs]
    for content, _ in plain[:2]:
        assert set(json.loads(content)) == {"ok", "n"}
    assert plain[2][0] is None and plain[2][1][0][0] == "add" and 0 <= json.loads(plain[2][1][0][1])["a"] <= 9
    assert plain[3][0] and not plain[3][1]
    with ThreadPoolExecutor(8) as pool:
        at_once = list(pool.map(lambda job: _ask(mode_api, *job, True), jobs + jobs[:3]))
    assert [what(a) for a in at_once] == plain + plain[:3]
    assert sum(a.model_extra["speculative_decoding"]["num_draft_tokens"] for a in at_once) > 0
