"""The cpu model's request boundary: Triton input arrays -> a checked Request, or InvalidRequest.

Pure (numpy arrays in, a frozen dataclass out): every check a request goes through before it
reaches the engine lives here, so it is tested without a server. The message of InvalidRequest
goes back to the client as a Triton error naming the input and the allowed values.

Cheap refusals come first, before anything costs memory or time:
- request parameters: Triton's HTTP generate endpoint turns every JSON key that is not an input
  into a request parameter (and gRPC clients may send parameters too); the model reads none, so
  any key but Triton's own `triton_*` is refused as an unknown input, as Triton refuses unknown
  tensors.
- the prompt's byte length, against `prompt_byte_limit` (a bound no prompt that fits
  max_input_len tokens can exceed), before the prompt is decoded or tokenized: a 10 MB prompt
  used to be tokenized in full (10 s, +1.3 GB) before the token-count check refused it.
- integers are the stock model's INT32: over HTTP, Triton's JSON conversion truncates a number to
  the declared width (4294967312 arrives as 16, 4294967295 as -1), so the model refuses what it
  can see is wrong (below 1, negative) and cannot see a value that wrapped into range
  (docs/DEPLOY.md has the measured table).
- stock inputs the cpu engine cannot honour (UNSUPPORTED) pass at their default value and are
  refused otherwise, with the reason.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

from trtspec.sampling_rules import sampling_problem

DEFAULT_MAX_TOKENS = 128
INT32_MAX = 2**31 - 1
# The stock llmapi model's inputs (trtspec.repository.llmapi_io), then trtspec's additions.
INPUT_NAMES = ("text_input", "streaming", "sampling_param_best_of", "sampling_param_temperature",
               "sampling_param_top_k", "sampling_param_top_p", "sampling_param_frequency_penalty",
               "sampling_param_presence_penalty", "sampling_param_max_tokens", "sampling_param_stop",
               "sampling_param_seed", "sampling_param_exclude_input_from_output",
               "sampling_param_return_perf_metrics", "return_finish_reason", "return_stop_reason",
               "return_cumulative_logprob", "stop", "speculative", "chat_template", "messages",
               "stream_delta", "guided_decoding_guide_type", "guided_decoding_guide")
# guided_decoding_guide_type values the cpu engine serves (the legacy tensorrtllm backend's names,
# trtspec.repository.llmapi_io): "json" any JSON value, "json_object" (trtspec's) any JSON object,
# "json_schema" the JSON schema in guided_decoding_guide, "structural_tag" an xgrammar structural tag
# there (TensorRT-LLM's GuidedDecodingParams.structural_tag; the OpenAI endpoint's tool_choice auto);
# "regex" and "ebnf_grammar" are not served.
GUIDE_TYPES = ("json", "json_object", "json_schema", "structural_tag")
GUIDED_BY_TEXT = ("json_schema", "structural_tag")  # the guide types whose grammar is guided_decoding_guide
IGNORED_PARAMETERS = ("Streaming",)
# Stock inputs the cpu engine cannot honour with a value other than the default: (default, why).
UNSUPPORTED = {
    "sampling_param_best_of": (1, "the cpu engine returns one sequence per request"),
    "sampling_param_frequency_penalty": (0.0, "the cpu engine's sampler applies no penalties"),
    "sampling_param_presence_penalty": (0.0, "the cpu engine's sampler applies no penalties"),
    "return_stop_reason": (False, "the cpu engine does not report which stop string ended a request"),
    "return_cumulative_logprob": (False, "the cpu engine does not compute log probabilities"),
}
# Worst-case byte shrink of a tokenizer's normalizer (bytes in / bytes out), per normalizer type;
# types not listed (stripping, BERT cleaning, SentencePiece's precompiled map) can delete text,
# so no byte bound holds for them. NFKC maps 4-byte mathematical letters to 1-byte ASCII.
NORMALIZER_SHRINK = {"NFC": 3, "NFD": 3, "NFKC": 4, "NFKD": 4, "Lowercase": 3, "Prepend": 1}
# Pre-tokenizers that keep every byte of the text in some token (whitespace splitters drop it).
BYTE_KEEPING_PRE_TOKENIZERS = {"ByteLevel", "Metaspace", "Digits", "Punctuation", "UnicodeScripts"}


class InvalidRequest(ValueError):
    """A request the model refuses; the message goes back to the client as a Triton error."""


@dataclass(frozen=True)
class Request:
    prompt: str
    streaming: bool
    max_tokens: int
    temperature: float
    top_p: float
    top_k: int
    seed: int | None
    stop: list[str] | None
    perf_metrics: bool
    speculative: bool
    chat_template: bool = False  # text_input is the prompt as sent, as the stock llmapi model reads it
    messages: list[dict[str, str]] | None = None
    stream_delta: bool = False
    guide_type: str | None = None  # a GUIDE_TYPES value: the output follows this grammar
    guide: str | None = None       # the JSON schema, for guide_type json_schema


@dataclass(frozen=True)
class StopRequest:
    """The stock model's `stop: true`: cancel the running requests sent with this request id."""


def _scalar(values: dict[str, Any], name: str, kind: type, default: Any) -> Any:
    array = values.get(name)
    if array is None:
        return default
    flat = array.reshape(-1)
    if flat.size != 1:
        raise InvalidRequest(f"{name}: expected one value (got {flat.size})")
    return kind(flat[0].item() if hasattr(flat[0], "item") else flat[0])


def _text(raw: Any, name: str) -> str:
    if isinstance(raw, str):
        return raw
    try:
        return bytes(raw).decode("utf-8")
    except UnicodeDecodeError as error:
        raise InvalidRequest(f"{name}: bytes are not valid UTF-8 ({error.reason} at byte {error.start})") from None


def prompt_byte_limit(tokenizer: Any, max_input_len: int) -> int | None:
    """Most UTF-8 bytes a prompt of at most max_input_len tokens can have, or None (no sound bound).

    Every token covers at most `longest` bytes of the normalized text, where `longest` is the
    UTF-8 length of the longest vocabulary entry as stored (a byte-level entry spells each byte
    with a 1- or 2-byte character, a SentencePiece one spells a space as the 3-byte "▁", byte
    fallback spells a byte as 6 characters: all at least the bytes they cover). The normalizer
    may shrink the text by NORMALIZER_SHRINK at most. So a prompt longer than
    max_input_len * longest * shrink bytes has more than max_input_len tokens, chat template or
    not (a template only adds tokens). It holds for tokenizers whose every byte lands in a token:
    byte-level BPE, or BPE with byte fallback, behind a byte-keeping pre-tokenizer.
    """
    backend = getattr(tokenizer, "backend_tokenizer", None)
    if backend is None:
        return None
    described = json.loads(backend.to_str())
    model = described.get("model") or {}
    pre = described.get("pre_tokenizer")
    pre_types = _component_types(pre, "pretokenizers")
    byte_complete = "ByteLevel" in pre_types or (model.get("type") == "BPE" and model.get("byte_fallback"))
    if not byte_complete or not pre_types <= BYTE_KEEPING_PRE_TOKENIZERS:
        return None
    if pre and any(p.get("behavior") == "Removed" for p in _components(pre, "pretokenizers")):
        return None
    shrink = 1
    for part in _components(described.get("normalizer"), "normalizers"):
        factor = _replace_shrink(part) if part["type"] == "Replace" else NORMALIZER_SHRINK.get(part["type"])
        if factor is None:
            return None
        shrink *= factor
    longest = max(len(token.encode("utf-8")) for token in tokenizer.get_vocab())
    return max_input_len * longest * shrink


def _replace_shrink(part: dict[str, Any]) -> int | None:
    """A Replace normalizer with a fixed string shrinks by len(pattern) / len(content) at most."""
    pattern, content = (part.get("pattern") or {}).get("String"), part.get("content") or ""
    if pattern is None or not content:
        return None
    return max(1, -(-len(pattern.encode()) // len(content.encode())))


def _components(node: dict[str, Any] | None, key: str) -> list[dict[str, Any]]:
    if not node:
        return []
    if node.get("type") == "Sequence":
        return [leaf for child in node.get(key, []) for leaf in _components(child, key)]
    return [node]


def _component_types(node: dict[str, Any] | None, key: str) -> set[str]:
    return {part["type"] for part in _components(node, key)}


def check_parameters(parameters: dict[str, Any] | str | None) -> None:
    """Refuse request parameters trtspec does not read (Triton's own `triton_*` keys pass, and
    `Streaming`, which TensorRT-LLM's triton_backend/tools/llmapi_client.py sends with every
    request and the stock model ignores: the `streaming` input decides)."""
    if isinstance(parameters, str):
        parameters = json.loads(parameters or "{}")
    unknown = sorted(k for k in (parameters or {}) if not k.startswith("triton_") and k not in IGNORED_PARAMETERS)
    if unknown:
        raise InvalidRequest(f"{unknown[0]}: unknown input (over HTTP every JSON key that is not an input becomes "
                             f"a request parameter); this model takes {', '.join(INPUT_NAMES)}")


def parse_request(values: dict[str, Any], *, max_seq_len: int, max_prompt_bytes: int | None = None,
                  parameters: dict[str, Any] | str | None = None) -> Request | StopRequest:
    """Check one request's input arrays (name -> numpy array, missing ones absent) and read them.

    Raises InvalidRequest naming the input and the allowed values. `parameters` are the request's
    parameters (a dict or Triton's JSON text); `max_prompt_bytes` is prompt_byte_limit's bound.
    The exact prompt-length check (max_input_len tokens) needs the tokenizer and is the engine's.
    """
    check_parameters(parameters)
    if _scalar(values, "stop", bool, False):
        return StopRequest()
    for name, (default, why) in UNSUPPORTED.items():
        value = _scalar(values, name, type(default), default)
        if value != default:
            raise InvalidRequest(f"{name}: only {default} is served ({why}; got {value})")
    messages = _messages(values)
    prompt = _prompt(values, max_prompt_bytes) if messages is None else ""
    size = sum(len(m["content"].encode("utf-8")) for m in messages or [])
    if max_prompt_bytes is not None and size > max_prompt_bytes:
        raise InvalidRequest(f"messages: {size} bytes of content is more than any prompt that fits the engine's "
                             f"max_input_len can have ({max_prompt_bytes} bytes); shorten the conversation")
    max_tokens = _scalar(values, "sampling_param_max_tokens", int, DEFAULT_MAX_TOKENS)
    if max_tokens < 1:
        raise InvalidRequest(f"sampling_param_max_tokens: must be at least 1 (got {max_tokens})")
    if max_tokens > INT32_MAX:
        raise InvalidRequest(f"sampling_param_max_tokens: must fit INT32 (got {max_tokens})")
    if max_tokens >= max_seq_len:
        raise InvalidRequest(f"sampling_param_max_tokens: must be below the engine's max_seq_len {max_seq_len} "
                             f"minus the prompt (got {max_tokens})")
    temperature = _scalar(values, "sampling_param_temperature", float, 0.0)
    top_p = _scalar(values, "sampling_param_top_p", float, 1.0)
    top_k = _scalar(values, "sampling_param_top_k", int, 0)
    problem = sampling_problem(temperature=temperature, top_p=top_p, top_k=top_k)
    if problem:
        raise InvalidRequest(f"sampling_param_{problem[0]}: {problem[1]}")
    seed = _scalar(values, "sampling_param_seed", int, None)
    stop = None
    if values.get("sampling_param_stop") is not None:
        stop = [_text(s, "sampling_param_stop") for s in values["sampling_param_stop"].reshape(-1)]
        stop = [s for s in stop if s] or None
    return Request(prompt=prompt, streaming=_scalar(values, "streaming", bool, False), max_tokens=max_tokens,
                   temperature=temperature, top_p=top_p, top_k=top_k, seed=seed, stop=stop,
                   perf_metrics=_scalar(values, "sampling_param_return_perf_metrics", bool, False),
                   speculative=_scalar(values, "speculative", bool, True),
                   chat_template=_scalar(values, "chat_template", bool, False), messages=messages,
                   stream_delta=_scalar(values, "stream_delta", bool, False), **_guide(values))


def _guide(values: dict[str, Any]) -> dict[str, str | None]:
    """guided_decoding_guide_type and guided_decoding_guide, checked (not compiled: the engine does)."""
    def one(name: str) -> str | None:
        if values.get(name) is None:
            return None
        raw = values[name].reshape(-1)
        if raw.size != 1:
            raise InvalidRequest(f"{name}: send one string (got {raw.size})")
        return _text(raw[0], name) or None

    guide_type, guide = one("guided_decoding_guide_type"), one("guided_decoding_guide")
    if guide_type is None:
        if guide is not None:
            raise InvalidRequest("guided_decoding_guide: sent without guided_decoding_guide_type; "
                                 f"add the type ({', '.join(GUIDE_TYPES)})")
        return {}
    if guide_type not in GUIDE_TYPES:
        raise InvalidRequest(f"guided_decoding_guide_type: {guide_type!r} is not served by the cpu engine; "
                             f"use one of {', '.join(GUIDE_TYPES)}")
    if guide_type in GUIDED_BY_TEXT and guide is None:
        raise InvalidRequest(f"guided_decoding_guide: required with guided_decoding_guide_type {guide_type} "
                             "(send the JSON schema or structural tag)")
    return {"guide_type": guide_type, "guide": guide if guide_type in GUIDED_BY_TEXT else None}


def _prompt(values: dict[str, Any], max_prompt_bytes: int | None) -> str:
    if values.get("text_input") is None:
        raise InvalidRequest("text_input: required (send the prompt as BYTES)")
    texts = values["text_input"].reshape(-1)
    if texts.size != 1:
        raise InvalidRequest(f"text_input: send exactly one prompt per request (got {texts.size})")
    size = len(texts[0]) if isinstance(texts[0], bytes) else len(str(texts[0]).encode("utf-8"))
    if max_prompt_bytes is not None and size > max_prompt_bytes:
        raise InvalidRequest(f"text_input: {size} bytes is more than any prompt that fits the engine's max_input_len "
                             f"can have ({max_prompt_bytes} bytes); refused before tokenizing, shorten the prompt")
    prompt = _text(texts[0], "text_input")
    if not prompt.strip():
        raise InvalidRequest("text_input: empty prompt; send some text")
    return prompt


def _messages(values: dict[str, Any]) -> list[dict[str, str]] | None:
    """The `messages` addition: a JSON array of {"role", "content"} (content a string)."""
    if values.get("messages") is None:
        return None
    raw = values["messages"].reshape(-1)
    if raw.size != 1:
        raise InvalidRequest(f"messages: send one JSON array (got {raw.size} elements)")
    try:
        messages = json.loads(_text(raw[0], "messages"))
    except ValueError as error:
        raise InvalidRequest(f"messages: not JSON ({error})") from None
    roles = ("system", "user", "assistant")
    if not isinstance(messages, list) or not messages or not all(
            isinstance(m, dict) and m.get("role") in roles and isinstance(m.get("content"), str) for m in messages):
        raise InvalidRequest("messages: must be a non-empty array of {\"role\": system|user|assistant, "
                             "\"content\": string}")
    return [{"role": m["role"], "content": m["content"]} for m in messages]
