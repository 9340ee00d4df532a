"""What upstream's inflight_batcher_llm models read, and whether trtspec's fills give it to them.

The contract of a TensorRT-LLM release (contract_data/trtllm-<version>.json,
`triton.inflight_batcher_llm`) holds, for the container's own repository:
- `templates`: each model's config.pbtxt as a ModelConfig in JSON form, with upstream's `${name}`
  placeholders left in place (names, data types, dims, parameters, the ensemble's wiring);
- `reads`: every parameter key, input and output name upstream's Python code reads or sends
  (preprocessing, postprocessing, tensorrt_llm_bls and its lib/ decoder), and every tensorrt_llm
  input and output the BLS decoder sends or asks for, each citing `repo/path@commit:line`.

`filled()` applies trtspec's key:value lists to the templates the way tools/fill_template.py does
(text substitution of `${name}`), `problems()` lists every read name a filled config does not
declare and every placeholder left, and `template_text()` writes a template back as config.pbtxt
text with its placeholders (the CPU flow test builds a stand-in of the container's tree with it).
This module only reads the contract; trtllm_engine.py decides the values.
"""

from __future__ import annotations

import copy
import json
import re
from typing import Any

from trtspec.builders import contracts

PLACEHOLDER = re.compile(r"\$\{(\w+)\}")
# tensorrt_llm_draft is upstream's tensorrt_llm copied and renamed (upstream's draft-target README),
# so the BLS decoder's calls to it read the same names.
DERIVED = {"tensorrt_llm_draft": "tensorrt_llm"}


def section(version: str) -> dict[str, Any]:
    return contracts.load(version).triton["inflight_batcher_llm"]


def template_of(sec: dict[str, Any], model: str) -> dict[str, Any]:
    return sec["templates"][DERIVED.get(model, model)]


def placeholders(sec: dict[str, Any], model: str) -> list[str]:
    return template_of(sec, model)["placeholders"]


def _substitute(node: Any, values: dict[str, Any], key: str | None = None) -> Any:
    """fill_template.py's `${name}` substitution, typed the way the protobuf field needs it."""
    if isinstance(node, dict):
        return {k: _substitute(v, values, k) for k, v in node.items()}
    if isinstance(node, list):
        return [_substitute(v, values, key) for v in node]
    if not isinstance(node, str) or "${" not in node:
        return node
    whole = PLACEHOLDER.fullmatch(node)
    if whole and key != "string_value" and whole.group(1) in values:
        value = values[whole.group(1)]                # a number, bool or enum field
        return value if isinstance(value, bool | int) else str(value)
    return PLACEHOLDER.sub(lambda m: text(values[m.group(1)]) if m.group(1) in values else m.group(0), node)


def text(value: Any) -> str:
    """A value as fill_template writes it into the file (booleans lower-case, lists comma-joined)."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, list | tuple):
        return ",".join(str(v) for v in value)
    return str(value)


def filled(sec: dict[str, Any], fills: dict[str, dict[str, Any]]) -> dict[str, dict[str, Any]]:
    """model -> ModelConfig dict: each model's template with its key:value list applied.

    fill_template.py pre-seeds max_queue_size and max_queue_delay_microseconds with 0
    (tools/fill_template.py `sub_dict`), so they are filled here too when a list leaves them out.
    """
    configs = {}
    for model, values in fills.items():
        config = copy.deepcopy(template_of(sec, model)["config"])
        config["name"] = model
        configs[model] = _substitute(config, {"max_queue_size": 0, "max_queue_delay_microseconds": 0, **values})
    return configs


def _names(config: dict[str, Any], kind: str) -> set[str]:
    return {entry["name"] for entry in config.get(kind, [])}


def problems(sec: dict[str, Any], configs: dict[str, dict[str, Any]]) -> list[str]:
    """Every name upstream reads that a filled config lacks, and every `${...}` left; [] when none."""
    found = []
    for model, config in configs.items():
        left = sorted(set(PLACEHOLDER.findall(json.dumps(config))))
        if left:
            found.append(f"{model}: placeholders left unfilled: {', '.join(left)}")
        reads = sec["reads"].get(DERIVED.get(model, model))
        if reads is None:
            continue
        params = config.get("parameters", {})
        for name in reads["parameters"]:
            value = params.get(name, {}).get("string_value")
            if value is None:
                found.append(f"{model}: parameter {name} is not declared ({_where(reads['parameters'][name])})")
            elif "${" in value:
                found.append(f"{model}: parameter {name} has no value ({_where(reads['parameters'][name])})")
        for kind in ("inputs", "outputs"):
            declared = _names(config, "input" if kind == "inputs" else "output")
            for name in sorted(set(reads[kind]) - declared):
                found.append(f"{model}: {kind[:-1]} {name} is not declared ({_where(reads[kind][name])})")
    return found


def _where(entries: list[dict[str, str]]) -> str:
    return entries[0]["at"]


def names_checked(sec: dict[str, Any], model: str) -> int:
    """How many distinct names (parameters, inputs, outputs) the check holds a model to."""
    reads = sec["reads"].get(DERIVED.get(model, model), {})
    return sum(len(reads.get(kind, {})) for kind in ("parameters", "inputs", "outputs"))


def template_text(sec: dict[str, Any], model: str) -> str:
    """A template as config.pbtxt text with its `${...}` placeholders, as upstream ships it."""
    from google.protobuf import json_format, text_format
    from tritonclient.grpc import model_config_pb2

    config = copy.deepcopy(template_of(sec, model)["config"])
    sentinels: dict[str, Any] = {}
    enums = iter(("TYPE_FP64", "TYPE_UINT16", "TYPE_UINT32"))

    def mark(node: Any, key: str | None = None) -> Any:
        if isinstance(node, dict):
            return {k: mark(v, k) for k, v in node.items()}
        if isinstance(node, list):
            return [mark(v, key) for v in node]
        whole = PLACEHOLDER.fullmatch(node) if isinstance(node, str) else None
        if not whole or key == "string_value" or key in ("backend", "name"):
            return node
        name = whole.group(1)
        if name not in sentinels:
            sentinels[name] = (True if key == "decoupled" else next(enums) if key == "data_type"
                               else 900001 + len(sentinels))
        return sentinels[name]

    message = json_format.ParseDict(mark(config), model_config_pb2.ModelConfig())
    body = text_format.MessageToString(message)
    for name, sentinel in sentinels.items():
        literal = "true" if sentinel is True else str(sentinel)
        body = re.sub(rf"(?<=: ){re.escape(literal)}\b", "${" + name + "}", body) if sentinel is not True else \
            body.replace("decoupled: true", "decoupled: ${" + name + "}")
    return body
