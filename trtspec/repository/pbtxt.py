"""config.pbtxt as data: build a Triton ModelConfig from plain dicts, render it, check it.

Every config.pbtxt trtspec writes is produced here from a dict shaped like Triton's
`model_config.proto` (the JSON mapping of `tritonclient.grpc.model_config_pb2.ModelConfig`), so a
misspelt field fails at render time instead of at server start. `check()` is the gate every
rendered file passes: it must parse back into ModelConfig and hold no `${...}` placeholder
(upstream's fill_template leaves unfilled ones in place silently).
"""

from __future__ import annotations

from typing import Any

from trtspec.errors import TrtSpecError

# Triton data types by the short names the renderers use.
TYPES = {"BYTES": "TYPE_STRING", "BOOL": "TYPE_BOOL", "INT32": "TYPE_INT32", "INT64": "TYPE_INT64",
         "UINT64": "TYPE_UINT64", "FP32": "TYPE_FP32", "FP16": "TYPE_FP16", "BF16": "TYPE_BF16"}


def tensor(name: str, dtype: str, dims: list[int] | None = None, *, optional: bool = False,
           ragged: bool = False) -> dict[str, Any]:
    """One input or output entry. `dtype` is a short name (BYTES, INT32, ...) or a TYPE_* name."""
    entry: dict[str, Any] = {"name": name, "data_type": TYPES.get(dtype, dtype), "dims": dims or [1]}
    if optional:
        entry["optional"] = True
    if ragged:
        entry["allow_ragged_batch"] = True
    return entry


def parameters(values: dict[str, Any]) -> dict[str, Any]:
    """Triton string parameters; booleans become true/false, everything else str()."""
    def text(value: Any) -> str:
        if isinstance(value, bool):
            return "true" if value else "false"
        return str(value)
    return {key: {"string_value": text(value)} for key, value in values.items()}


def to_message(config: dict[str, Any]):
    """The dict as a ModelConfig protobuf; unknown fields raise TrtSpecError."""
    from google.protobuf import json_format
    from tritonclient.grpc import model_config_pb2

    try:
        return json_format.ParseDict(config, model_config_pb2.ModelConfig())
    except json_format.ParseError as error:
        raise TrtSpecError(f"model {config.get('name')!r}: not a valid Triton ModelConfig ({error})") from None


def render(config: dict[str, Any]) -> str:
    """config.pbtxt text for the dict, checked."""
    from google.protobuf import text_format

    text = text_format.MessageToString(to_message(config))
    check(text, where=str(config.get("name")))
    return text


def check(text: str, where: str = "config.pbtxt"):
    """Parse config.pbtxt text into ModelConfig; refuse leftover `${...}` placeholders."""
    from google.protobuf import text_format
    from tritonclient.grpc import model_config_pb2

    if "${" in text:
        line = next(line for line in text.splitlines() if "${" in line).strip()
        raise TrtSpecError(f"{where}: unfilled placeholder left ({line})",
                           fix="fill every ${...} key before deploying")
    try:
        return text_format.Parse(text, model_config_pb2.ModelConfig())
    except text_format.ParseError as error:
        raise TrtSpecError(f"{where}: does not parse as a Triton ModelConfig ({error})") from None
