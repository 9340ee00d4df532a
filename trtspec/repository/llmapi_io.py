"""The stock llmapi model's I/O as data, and trtspec's additions to it.

`builders/contract_data/llmapi_io.json` holds, per TensorRT-LLM release, every input and output of
the stock Triton model `triton_backend/all_models/llmapi/tensorrt_llm/config.pbtxt` (name,
data_type, dims, optional) with what was read to fill it. The cpu repository declares exactly
those, then the additions below, all optional, so a client written for the stock model (int32
`sampling_param_max_tokens`, unary or streaming) talks to the cpu server unchanged, and one that
sends the additions gets trtspec's extras.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from trtspec.errors import SpecError

CONTRACT = Path(__file__).resolve().parents[1] / "builders" / "contract_data" / "llmapi_io.json"

# trtspec's inputs beyond the stock model's (name, short dtype, dims, what it does).
ADDED_INPUTS = (
    ("speculative", "BOOL", [1], "false: this request runs without speculation (baselines); default true"),
    ("chat_template", "BOOL", [1], "true (default): text_input is one user turn through the model's chat "
                                   "template; false: text_input is plain text, tokenized as the tokenizer does"),
    ("messages", "BYTES", [1], "a JSON array of OpenAI chat messages rendered through the chat template "
                               "(trtspec/chat.py, generation prompt added) in place of text_input"),
    ("stream_delta", "BOOL", [1], "true: each streamed response carries only the new text; false (default, "
                                  "the stock model's way, RequestOutput.text): the text so far"),
    # The stock llmapi model has no guided-decoding input (llmapi_io.json `guided_decoding`); these
    # two take the names, type (TYPE_STRING) and dims ([1]) of the legacy tensorrtllm backend's
    # (trtllm-1.1.0.json, inflight_batcher_llm tensorrt_llm and ensemble config.pbtxt), so one client
    # sends the same tensors to both. They are trtspec's additions on the cpu model.
    ("guided_decoding_guide_type", "BYTES", [1], "trtspec's: the output follows a grammar: json (any JSON value), "
                                                 "json_object (any JSON object), json_schema (the schema in "
                                                 "guided_decoding_guide) or structural_tag (an xgrammar "
                                                 "structural tag there); the tensorrtllm backend's name"),
    ("guided_decoding_guide", "BYTES", [1], "trtspec's: the JSON schema or structural tag for "
                                            "guided_decoding_guide_type json_schema or structural_tag; the "
                                            "tensorrtllm backend's name"),
)
# trtspec's outputs beyond the stock model's, sent with sampling_param_return_perf_metrics.
ADDED_OUTPUTS = (
    ("num_drafts", "INT32", [1], "speculative drafts verified for this request"),
    ("num_output_tokens", "INT32", [1], "tokens generated"),
    ("num_input_tokens", "INT32", [1], "prompt tokens after the chat template"),
)


def stock(version: str) -> dict[str, Any]:
    """{'source', 'inputs', 'outputs'} of the stock config.pbtxt of TensorRT-LLM `version`."""
    releases = json.loads(CONTRACT.read_text())["releases"]
    if version not in releases:
        raise SpecError([f"build.trtllm_version: no stock llmapi I/O recorded for {version} "
                         f"(use one of {', '.join(sorted(releases))})"])
    return releases[version]


def added_names() -> tuple[str, ...]:
    return tuple(name for name, *_ in ADDED_INPUTS)
