"""The cpu model's Triton I/O is the stock llmapi model's of `build.trtllm_version`, field by field.

The stock table is contract data (builders/contract_data/llmapi_io.json, citing the release's
triton_backend/all_models/llmapi/tensorrt_llm/config.pbtxt); the rendered cpu config.pbtxt is
parsed back into Triton's ModelConfig and compared entry by entry: name, data type, dims and
optional flag, in the stock order, then trtspec's additions (all optional inputs).
"""

from __future__ import annotations

import json

import pytest
from google.protobuf import json_format

from trtspec.builders import contracts
from trtspec.errors import SpecError
from trtspec.repository import llmapi_io, render
from trtspec.repository import trtllm as trtllm_repository
from trtspec.triton_model.request import INPUT_NAMES

FIELDS = ("name", "data_type", "dims", "optional")


def _entries(message_entries) -> list[dict]:
    out = []
    for entry in message_entries:
        data = json_format.MessageToDict(entry, preserving_proto_field_name=True)
        out.append({"name": data["name"], "data_type": data["data_type"], "dims": [int(d) for d in data["dims"]],
                    "optional": bool(data.get("optional", False))})
    return out


def _stock(entries: list[dict]) -> list[dict]:
    return [{field: entry.get(field, False) for field in FIELDS} for entry in entries]


@pytest.mark.parametrize("version", ["1.1.0", "1.2.1"])
def test_rendered_cpu_config_is_the_stock_io_then_the_additions(tiny_cpu_engine, tmp_path, version):
    from google.protobuf import text_format
    from tritonclient.grpc import model_config_pb2

    spec, engine_dir = tiny_cpu_engine
    spec = spec.model_copy(update={"build": spec.build.model_copy(update={"trtllm_version": version})})
    render(engine_dir, spec, tmp_path / "repo", engine_path="/engines/tiny")
    config = text_format.Parse((tmp_path / "repo" / "tensorrt_llm" / "config.pbtxt").read_text(),
                               model_config_pb2.ModelConfig())
    stock = llmapi_io.stock(version)
    inputs, outputs = _entries(config.input), _entries(config.output)
    assert inputs[:len(stock["inputs"])] == _stock(stock["inputs"])
    assert outputs[:len(stock["outputs"])] == _stock(stock["outputs"])
    added_in = inputs[len(stock["inputs"]):]
    assert [e["name"] for e in added_in] == list(llmapi_io.added_names()) and all(e["optional"] for e in added_in)
    assert [e["name"] for e in outputs[len(stock["outputs"]):]] == [n for n, *_ in llmapi_io.ADDED_OUTPUTS]
    # The model reads every input it declares (no declared input is silently ignored).
    assert [e["name"] for e in inputs] == list(INPUT_NAMES)


@pytest.mark.parametrize("version", ["1.1.0", "1.2.1"])
def test_stock_table_agrees_with_the_release_contract_and_the_gpu_repository(version):
    """Three readings of one upstream file agree: the I/O table, the release contract's name ->
    dtype table, and what the trtllm (GPU) repository declares."""
    stock = llmapi_io.stock(version)
    short = {"TYPE_STRING": "BYTES", "TYPE_BOOL": "BOOL", "TYPE_INT32": "INT32", "TYPE_INT64": "INT64",
             "TYPE_UINT64": "UINT64", "TYPE_FP32": "FP32"}
    release = contracts.load(version).data["triton"]["llmapi"]
    assert {e["name"]: short[e["data_type"]] for e in stock["inputs"]} == release["inputs"]
    assert {e["name"]: short[e["data_type"]] for e in stock["outputs"]} == release["outputs"]
    assert _stock(trtllm_repository.inputs()) == _stock(stock["inputs"])
    assert _stock(trtllm_repository.outputs()) == _stock(stock["outputs"])
    assert stock["source"].endswith(f"config.pbtxt@v{version}")
    assert json.loads(llmapi_io.CONTRACT.read_text())["read"]


def test_a_release_without_a_stock_table_is_one_line_naming_the_ones_there():
    """SpecError takes a list of problem lines (it was called with a `fix=` it has not, a TypeError)."""
    with pytest.raises(SpecError, match=r"^build.trtllm_version: no stock llmapi I/O recorded for 0.0.1 \(use one of 1.1.0, "):
        llmapi_io.stock("0.0.1")
