"""OpenAI's structured output and tool calls, as the served model's guided-decoding inputs.

Pure (dicts in, dicts out). `response_format` {"type": "json_schema", "json_schema": {"schema"}}
and {"type": "json_object"}, and `tools` with `tool_choice`, become the two guided-decoding
inputs (`guided_decoding_guide_type`, `guided_decoding_guide`: trtspec.repository.llmapi_io), so
the engine's grammar holds every token, speculative or not (trtspec.runtime.grammar).

Tool calls: the model writes one JSON object {"name": <a tool's name>, "arguments": {...}}, its
arguments constrained by that tool's `parameters` schema; the response carries it as OpenAI's
`tool_calls` (arguments as a JSON string) with finish_reason "tool_calls". `tool_choice`:
"required" and a named function force a call (of any tool, of that one); "none" leaves the tools
out; "auto" (the default) is served as "required": the engine does not let the model choose
between text and a call. One call per response (parallel_tool_calls has no effect). The tools are
described to the model in a system message (`tools_message`), as chat templates without a tools
section need.
"""

from __future__ import annotations

import json
import secrets
from dataclasses import dataclass
from typing import Any

ANY_OBJECT = {"type": "object"}


class FormatProblem(ValueError):
    """A response_format, tools or tool_choice value OpenAI's API does not allow; args: (message, param)."""


@dataclass(frozen=True)
class Guide:
    """What the served model is asked to follow, and where the request said so."""

    guide_type: str           # guided_decoding_guide_type: json_schema (json_object is sent as a schema)
    guide: str | None         # guided_decoding_guide: the JSON schema text
    param: str                # the request field a compile error names: response_format | tools
    tools: tuple[str, ...] = ()  # the callable tools' names (empty: no tool call)


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


def tools_guide(tools: Any, tool_choice: Any) -> tuple[Guide | None, list[dict[str, Any]]]:
    """tools + tool_choice -> (Guide or None when no call is wanted, the tools offered to the model)."""
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
    if tool_choice in (None, "auto", "required"):
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


def tools_message(functions: list[dict[str, Any]]) -> str:
    """The system text that tells the model which tools it may call, and how to answer."""
    lines = ["You can call these tools. Answer with one JSON object "
             '{"name": <tool name>, "arguments": <its arguments>}.']
    for f in functions:
        lines.append(json.dumps({"name": f["name"], "description": f["description"], "parameters": f["parameters"]}))
    return "\n".join(lines)


def tool_calls(text: str, names: tuple[str, ...]) -> list[dict[str, Any]] | None:
    """The model's output as OpenAI's tool_calls (None when it is not a whole call: cut by max_tokens)."""
    try:
        call = json.loads(text)
    except ValueError:
        return None
    if not isinstance(call, dict) or call.get("name") not in names or "arguments" not in call:
        return None
    return [{"id": "call_" + secrets.token_hex(12), "type": "function",
             "function": {"name": call["name"], "arguments": json.dumps(call["arguments"])}}]


def history_message(message: dict[str, Any]) -> dict[str, Any]:
    """An earlier turn with tool calls or a tool result, as plain text for the chat template: an
    assistant turn's calls as the JSON the model writes; a tool result as a user turn."""
    if message.get("role") == "tool":
        return {"role": "user", "content": f"Tool result: {message.get('content') or ''}"}
    calls = message.get("tool_calls")
    if message.get("role") == "assistant" and isinstance(calls, list) and calls:
        function = (calls[0] or {}).get("function") or {}
        try:
            arguments = json.loads(function.get("arguments") or "{}")
        except ValueError:
            arguments = function.get("arguments")
        return {"role": "assistant", "content": json.dumps({"name": function.get("name"), "arguments": arguments})}
    return message
