"""Shared by the stand-in models of the CPU inflight_batcher_llm flow test (copied into each 1/).

`require_contract()` makes a stand-in fail to load, as upstream's model would, when its filled
config lacks a name the contract says upstream's code reads: a parameter read with [] (or left as
`${...}`), an input or output whose config upstream looks up or that upstream sends or asks for.
The names come from contract.json, which the test writes beside this file from the contract of
the TensorRT-LLM release under test.
"""

import json
import os
import sys

for _path in os.environ.get("TRTSPEC_PYTHONPATH", "").split(os.pathsep):
    if _path and _path not in sys.path:
        sys.path.append(_path)

HERE = os.path.dirname(os.path.abspath(__file__))


def reads(model):
    with open(os.path.join(HERE, "contract.json")) as handle:
        return json.load(handle)["reads"][model]


def require_contract(model_config, model):
    """Raise (the model does not load) naming the first contract name the config does not declare."""
    wanted = reads(model)
    params = model_config.get("parameters", {})
    for name in wanted["parameters"]:
        value = params[name]["string_value"]            # KeyError, as upstream's [] read
        if "${" in value:
            raise ValueError(f"{model}: parameter {name} left as {value}")
    declared = {"inputs": {i["name"] for i in model_config.get("input", [])},
                "outputs": {o["name"] for o in model_config.get("output", [])}}
    for kind in ("inputs", "outputs"):
        missing = sorted(set(wanted[kind]) - declared[kind])
        if missing:
            raise ValueError(f"{model}: {kind} {missing} not declared ({wanted[kind][missing[0]][0]['at']})")
    return wanted


def text_to_ids(text):
    """The stand-ins' 'tokenizer': one token per UTF-8 byte (no model, no vocabulary file)."""
    return list(text.encode("utf-8"))


def ids_to_text(ids):
    return bytes(int(i) for i in ids if 0 <= int(i) < 256).decode("utf-8", errors="replace")
