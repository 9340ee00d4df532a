"""The cpu model's guided-decoding inputs (trtspec's additions, the tensorrtllm backend's names),
read without a server; tests/serve/test_openai_structured.py sends them through Triton."""

from __future__ import annotations

import json

import numpy as np
import pytest

from trtspec.triton_model.request import GUIDE_TYPES, InvalidRequest, parse_request


def _req(**values):
    arrays = {"text_input": np.array([b"hello"], dtype=np.object_)}
    arrays.update({name: np.array([value.encode()], dtype=np.object_) for name, value in values.items()})
    return arrays


def test_guide_type_and_schema_are_read():
    schema = json.dumps({"type": "object"})
    parsed = parse_request(_req(guided_decoding_guide_type="json_schema", guided_decoding_guide=schema), max_seq_len=512)
    assert (parsed.guide_type, parsed.guide) == ("json_schema", schema)
    parsed = parse_request(_req(guided_decoding_guide_type="json"), max_seq_len=512)
    assert (parsed.guide_type, parsed.guide) == ("json", None)
    assert parse_request(_req(), max_seq_len=512).guide_type is None


@pytest.mark.parametrize("values, message", [
    ({"guided_decoding_guide_type": "regex", "guided_decoding_guide": "[0-9]+"}, "'regex' is not served"),
    ({"guided_decoding_guide_type": "json_schema"}, "guided_decoding_guide: required"),
    ({"guided_decoding_guide_type": "structural_tag"}, "guided_decoding_guide: required"),
    ({"guided_decoding_guide": "{}"}, "without guided_decoding_guide_type"),
])
def test_guides_the_engine_cannot_follow_are_refused_in_one_line(values, message):
    with pytest.raises(InvalidRequest, match=message) as raised:
        parse_request(_req(**values), max_seq_len=512)
    assert "\n" not in str(raised.value)


def test_the_additions_are_declared_and_recorded_in_the_contract():
    from trtspec.repository.llmapi_io import CONTRACT, added_names

    recorded = json.loads(CONTRACT.read_text())["guided_decoding"]
    assert recorded["stock"] == [] and set(recorded["cpu_additions"]) <= set(added_names())
    assert set(GUIDE_TYPES) == {"json", "json_object", "json_schema", "structural_tag"}


def test_every_guide_type_compiles_on_the_engine(tiny_llama):
    """What parse_request lets through, the engine's grammar compiles (the model's _grammar mapping)."""
    from transformers import AutoTokenizer

    from trtspec.runtime.grammar.compile import GrammarSpec, compile_grammar
    from trtspec.triton_model.model import _grammar

    tokenizer = AutoTokenizer.from_pretrained(tiny_llama)
    from trtspec.serve.openai_tools import auto_tag

    tool = {"name": "f", "parameters": {"type": "object"}}
    guides = {"json_schema": json.dumps({"type": "integer"}), "structural_tag": json.dumps(auto_tag([tool], True))}
    for guide_type in GUIDE_TYPES:
        guide = guides.get(guide_type)
        values = _req(guided_decoding_guide_type=guide_type, **({"guided_decoding_guide": guide} if guide else {}))
        spec = _grammar(parse_request(values, max_seq_len=512))
        assert spec == GrammarSpec(guide_type, guide)
        assert compile_grammar(spec, tokenizer, 512, {tokenizer.eos_token_id}).vocab_size == 512
