"""OpenAI's structured output and tool calls, as the served model's guided-decoding inputs.

Pure (dicts in, dicts out). `response_format` {"type": "json_schema", "json_schema": {"schema"}}
and {"type": "json_object"}, and `tools` with `tool_choice`, become the two guided-decoding
inputs (`guided_decoding_guide_type`, `guided_decoding_guide`: trtspec.repository.llmapi_io), so
the engine's grammar holds every token, speculative or not (trtspec.runtime.grammar).

A tool call is the JSON object {"name": <a tool's name>, "arguments": {...}}, its arguments
constrained by that tool's `parameters` schema; the response carries it as OpenAI's `tool_calls`
(arguments as a JSON string) with finish_reason "tool_calls". `tool_choice`:
- "required" and a named function force one call (of any tool, of that one): the whole output is
  the call (guide type json_schema);
- "auto" (the default) lets the model choose: guide type structural_tag, xgrammar's triggered
  tags (as xgrammar's own templates serve auto for Llama- and Qwen-style calls): free text, in
  which every occurrence of the call's opening `{"name": ` must go on as a whole call of an offered
  tool with valid arguments, and text may follow. `parallel_tool_calls` (default true, OpenAI's)
  allows further calls after the first; false stops the grammar after one. Text around the calls
  is the message's content (null when blank);
- "none" leaves the tools out.
The tools are described to the model in a system message (`tools_message`), as chat templates
without a tools section need.
"""

from __future__ import annotations

import json
import secrets
from dataclasses import dataclass
from typing import Any

ANY_OBJECT = {"type": "object"}
TRIGGER = '{"name": '  # how every call begins; under "auto", text that would begin one must go on as a call


class FormatProblem(ValueError):
    """A response_format, tools or tool_choice value OpenAI's API does not allow; args: (message, param)."""


@dataclass(frozen=True)
class Guide:
    """What the served model is asked to follow, and where the request said so."""

    guide_type: str           # guided_decoding_guide_type: json_schema (json_object is sent as a schema)
                              # or structural_tag (tool_choice auto)
    guide: str | None         # guided_decoding_guide: the JSON schema or structural tag text
    param: str                # the request field a compile error names: response_format | tools
    tools: tuple[str, ...] = ()  # the callable tools' names (empty: no tool call)
    auto: bool = False        # tool_choice auto: text, calls, or both


def response_format_guide(value: Any) -> Guide | None:
    """response_format -> Guide (None: plain text)."""
    if value is None or value == {"type": "text"}:
        return None
    kind = value.get("type") if isinstance(value, dict) else None
    if kind == "json_object":  # as a schema: the legacy tensorrtllm backend's guide types have no json_object
        return Guide("json_schema", json.dumps(ANY_OBJECT), "response_format")
    if kind == "json_schema":
        spec = value.get("json_schema")
        schema = spec.get("schema", ANY_OBJECT) if isinstance(spec, dict) else None
        if not isinstance(spec, dict) or not isinstance(spec.get("name", ""), str) or not isinstance(schema, dict):
            raise FormatProblem('response_format: json_schema must be {"name": ..., "schema": {a JSON schema}}',
                                "response_format")
        return Guide("json_schema", json.dumps(schema), "response_format")
    raise FormatProblem('response_format: type must be "text", "json_object" or "json_schema"', "response_format")


def tools_guide(tools: Any, tool_choice: Any, parallel: Any = None) -> tuple[Guide | None, list[dict[str, Any]]]:
    """tools + tool_choice + parallel_tool_calls -> (Guide or None when no call is wanted, the tools
    offered to the model)."""
    if parallel is not None and not isinstance(parallel, bool):
        raise FormatProblem("parallel_tool_calls: must be true or false", "parallel_tool_calls")
    if tools is None or tools == []:
        if tool_choice not in (None, "none", "auto"):
            raise FormatProblem("tool_choice: needs tools", "tool_choice")
        return None, []
    if not isinstance(tools, list):
        raise FormatProblem("tools: a list of {\"type\": \"function\", \"function\": {\"name\", ...}}", "tools")
    functions: list[dict[str, Any]] = []
    for index, tool in enumerate(tools):
        function = tool.get("function") if isinstance(tool, dict) and tool.get("type") == "function" else None
        if not isinstance(function, dict):
            function = {}
        name, parameters = function.get("name"), function.get("parameters", ANY_OBJECT)
        if not isinstance(name, str) or not name or not isinstance(parameters, dict):
            raise FormatProblem(f'tools[{index}]: {{"type": "function", "function": {{"name": a string, '
                                f'"parameters": a JSON schema}}}}', "tools")
        functions.append({"name": name, "description": str(function.get("description") or ""),
                          "parameters": parameters})
    names = [f["name"] for f in functions]
    if len(set(names)) != len(names):
        raise FormatProblem("tools: function names must be unique", "tools")
    if tool_choice == "none":
        return None, []
    if tool_choice in (None, "auto"):
        return Guide("structural_tag", json.dumps(auto_tag(functions, parallel is not False)), "tools",
                     tuple(names), auto=True), functions
    if tool_choice == "required":
        chosen = functions
    elif isinstance(tool_choice, dict) and tool_choice.get("type") == "function" \
            and isinstance(tool_choice.get("function"), dict) and tool_choice["function"].get("name") in names:
        chosen = [f for f in functions if f["name"] == tool_choice["function"]["name"]]
    else:
        raise FormatProblem(f'tool_choice: "none", "auto", "required" or {{"type": "function", "function": '
                            f'{{"name": one of {", ".join(names)}}}}}', "tool_choice")
    calls = [{"type": "object", "additionalProperties": False, "required": ["name", "arguments"],
              "properties": {"name": {"const": f["name"]}, "arguments": f["parameters"]}} for f in chosen]
    schema = calls[0] if len(calls) == 1 else {"anyOf": calls}
    return Guide("json_schema", json.dumps(schema), "tools", tuple(f["name"] for f in chosen)), chosen


def auto_tag(functions: list[dict[str, Any]], parallel: bool) -> dict[str, Any]:
    """xgrammar's structural tag for tool_choice auto: free text; `{"name": ` only as the start of
    a whole call `{"name": "<tool>", "arguments": <its parameters>}`; after a call, text again (and,
    when `parallel`, further calls)."""
    tags = [{"type": "tag", "begin": f'{TRIGGER}{json.dumps(f["name"])}, "arguments": ',
             "content": {"type": "json_schema", "json_schema": f["parameters"]}, "end": "}"} for f in functions]
    return {"type": "structural_tag", "format": {"type": "triggered_tags", "triggers": [TRIGGER], "tags": tags,
                                                 "at_least_one": False, "stop_after_first": not parallel}}


def tools_message(functions: list[dict[str, Any]], auto: bool = False) -> str:
    """The system text that tells the model which tools it may call, and how to answer."""
    call = '{"name": <tool name>, "arguments": <its arguments>}'
    lines = [f"You can call these tools. To call one, write {call}; otherwise answer in text." if auto
             else f"You can call these tools. Answer with one JSON object {call}."]
    for f in functions:
        lines.append(json.dumps({"name": f["name"], "description": f["description"], "parameters": f["parameters"]}))
    return "\n".join(lines)


def tool_calls(text: str, names: tuple[str, ...]) -> list[dict[str, Any]] | None:
    """The model's output as OpenAI's tool_calls (None when it is not a whole call: cut by max_tokens)."""
    try:
        call = json.loads(text)
    except ValueError:
        return None
    return [_openai_call(call)] if _is_call(call, names) else None


def split_calls(text: str, names: tuple[str, ...]) -> tuple[str | None, list[dict[str, Any]]]:
    """An "auto" answer as (content, tool_calls): each whole call that begins at `{"name": ` taken
    out, the text around them the content (None when blank); a call cut by max_tokens stays text."""
    decoder, content, calls, at = json.JSONDecoder(), [], [], 0
    while (start := text.find(TRIGGER, at)) >= 0:
        try:
            call, end = decoder.raw_decode(text, start)
        except ValueError:
            break
        if not _is_call(call, names):
            break
        content.append(text[at:start])
        calls.append(_openai_call(call))
        at = end
    content.append(text[at:])
    joined = "".join(content)
    return (joined if joined.strip() else None), calls


class AutoStream:
    """Streams an "auto" answer: text goes out as content until a call may begin (a tail that could
    be the start of `{"name": ` is held back); from the first call on the rest is held, and
    `finish` splits it into content and calls."""

    def __init__(self, names: tuple[str, ...]):
        self.names, self.text, self.sent, self.calling = names, "", 0, False

    def feed(self, piece: str) -> str:
        """The text that can be sent as content now."""
        self.text += piece
        if self.calling:
            return ""
        start = self.text.find(TRIGGER, self.sent)
        if start >= 0:
            self.calling = True
        else:
            start = len(self.text) - next((k for k in range(len(TRIGGER) - 1, 0, -1)
                                           if self.text.endswith(TRIGGER[:k])), 0)
        out, self.sent = self.text[self.sent:start], start
        return out

    def finish(self) -> tuple[str | None, list[dict[str, Any]]]:
        """(content not sent yet, the calls)."""
        return split_calls(self.text[self.sent:], self.names)


def _is_call(call: Any, names: tuple[str, ...]) -> bool:
    return isinstance(call, dict) and call.get("name") in names and "arguments" in call


def _openai_call(call: dict[str, Any]) -> dict[str, Any]:
    return {"id": "call_" + secrets.token_hex(12), "type": "function",
            "function": {"name": call["name"], "arguments": json.dumps(call["arguments"])}}


def history_message(message: dict[str, Any]) -> dict[str, Any]:
    """An earlier turn with tool calls or a tool result, as plain text for the chat template: an
    assistant turn's calls as the JSON the model writes; a tool result as a user turn."""
    if message.get("role") == "tool":
        return {"role": "user", "content": f"Tool result: {message.get('content') or ''}"}
    calls = message.get("tool_calls")
    if message.get("role") == "assistant" and isinstance(calls, list) and calls:
        written = []
        for call in calls:
            function = (call if isinstance(call, dict) else {}).get("function") or {}
            try:
                arguments = json.loads(function.get("arguments") or "{}")
            except ValueError:
                arguments = function.get("arguments")
            written.append(json.dumps({"name": function.get("name"), "arguments": arguments}))
        text = message.get("content") if isinstance(message.get("content"), str) else ""
        return {"role": "assistant", "content": "\n".join(([text] if text else []) + written)}
    return message
