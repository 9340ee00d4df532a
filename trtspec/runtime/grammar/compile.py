"""What a request asks its output to be, compiled against the engine's tokenizer.

A `GrammarSpec` is ("json_schema", schema text), ("json_object", None): any JSON object,
("json", None): any JSON value (TensorRT-LLM's GuideType JSON), or ("structural_tag", tag text):
an xgrammar structural tag (TensorRT-LLM's GuidedDecodingParams.structural_tag), e.g. free text in
which every occurrence of a trigger starts a whole tool call (`tool_choice: "auto"`,
trtspec.serve.openai_tools). It is
compiled with xgrammar (mlc-ai/xgrammar) once per request, in the caller's thread (`Engine.submit`),
so a schema xgrammar cannot compile is refused before the request is queued. Compilers are kept
per tokenizer and vocabulary; xgrammar caches compiled grammars inside them.

JSON is compiled without free whitespace (xgrammar's `any_whitespace=False`: one space after ':'
and ','), so a model cannot spend its tokens on indentation; end-of-sequence is allowed only where
the grammar is complete (the engine's EOS ids are the grammar's stop tokens). A structural tag's
JSON-schema parts are compiled by the same rule (each becomes the grammar of its schema, as
`json_schema` compiles it, before xgrammar reads the tag).
"""

from __future__ import annotations

import json
import re
import threading
from dataclasses import dataclass
from typing import Any

from trtspec.runtime.loop.request import InvalidRequestError

KINDS = ("json_schema", "json_object", "json", "structural_tag")
_XGRAMMAR_PREFIX = re.compile(r"^\[[^\]]*\]\s*\S+:\d+:\s*")  # "[14:19:25] /project/cpp/x.cc:83: "


class GrammarError(InvalidRequestError):
    """The requested output format cannot be compiled into a grammar."""


@dataclass(frozen=True)
class GrammarSpec:
    """What the output must be: kind "json_schema" with `schema` (JSON text), "json_object", "json", or
    "structural_tag" with `schema` the tag (JSON text, xgrammar's {"type": "structural_tag", "format": ...})."""

    kind: str
    schema: str | None = None

    @classmethod
    def json_schema(cls, schema: dict[str, Any] | str) -> GrammarSpec:
        return cls("json_schema", schema if isinstance(schema, str) else json.dumps(schema))

    @classmethod
    def json_object(cls) -> GrammarSpec:
        return cls("json_object")

    @classmethod
    def structural_tag(cls, tag: dict[str, Any] | str) -> GrammarSpec:
        return cls("structural_tag", tag if isinstance(tag, str) else json.dumps(tag))


@dataclass(frozen=True)
class CompiledGrammar:
    """A GrammarSpec compiled for one engine: the xgrammar grammar and the vocabulary width."""

    spec: GrammarSpec
    compiled: Any      # xgrammar.CompiledGrammar
    vocab_size: int    # the target's logits width (may exceed the tokenizer's length)


_compilers: dict[tuple[int, int, tuple[int, ...]], Any] = {}
_lock = threading.Lock()


def _compiler(tokenizer: Any, vocab_size: int, stop_ids: tuple[int, ...]) -> Any:
    import xgrammar

    key = (id(tokenizer), vocab_size, stop_ids)
    with _lock:
        if key not in _compilers:
            info = xgrammar.TokenizerInfo.from_huggingface(tokenizer, vocab_size=vocab_size,
                                                           stop_token_ids=list(stop_ids))
            _compilers[key] = (tokenizer, xgrammar.GrammarCompiler(info))  # the tokenizer kept: id() stays its own
        return _compilers[key][1]


def compile_grammar(spec: GrammarSpec, tokenizer: Any, vocab_size: int, stop_ids: set[int]) -> CompiledGrammar:
    """Compile `spec` for this tokenizer and vocabulary; GrammarError when it cannot be compiled."""
    if spec.kind not in KINDS:
        raise GrammarError(f"grammar kind {spec.kind!r} is not supported", fix=f"use one of {', '.join(KINDS)}")
    compiler = _compiler(tokenizer, int(vocab_size), tuple(sorted(stop_ids)))
    try:
        if spec.kind == "json":
            compiled = compiler.compile_builtin_json_grammar()
        elif spec.kind == "json_object":
            compiled = compiler.compile_json_schema('{"type": "object"}', any_whitespace=False)
        elif spec.kind == "structural_tag":
            compiled = _compile_tag(compiler, spec.schema)
        else:
            schema = json.loads(spec.schema or "null")
            if not isinstance(schema, dict):
                raise ValueError("the schema is not a JSON object")
            compiled = compiler.compile_json_schema(json.dumps(_bounded_strings(schema)), any_whitespace=False,
                                                    strict_mode=True)
    except (RuntimeError, ValueError, TypeError) as error:  # xgrammar's InvalidJSONError etc. are RuntimeErrors
        reason = _XGRAMMAR_PREFIX.sub("", str(error).strip().splitlines()[-1] if str(error).strip() else "")
        what = "the structural tag (or a JSON schema in it)" if spec.kind == "structural_tag" else "the JSON schema"
        raise GrammarError(f"{what} cannot be compiled into a grammar: {reason or type(error).__name__}",
                           fix="give a valid JSON schema (xgrammar does not support every keyword)") from None
    return CompiledGrammar(spec=spec, compiled=compiled, vocab_size=int(vocab_size))


def _compile_tag(compiler: Any, text: str | None) -> Any:
    """A structural tag with each {"type": "json_schema"} part replaced by its schema's grammar
    compiled as `json_schema` is (no free whitespace, strict, bounded strings), then compiled."""
    import xgrammar

    tag = json.loads(text or "null")
    if not isinstance(tag, dict) or tag.get("type") != "structural_tag":
        raise ValueError('the structural tag is not {"type": "structural_tag", "format": {...}}')

    def rewrite(node: Any) -> Any:
        if isinstance(node, list):
            return [rewrite(item) for item in node]
        if not isinstance(node, dict):
            return node
        if node.get("type") == "json_schema" and isinstance(node.get("json_schema"), dict):
            schema = json.dumps(_bounded_strings(node["json_schema"]))
            grammar = xgrammar.Grammar.from_json_schema(schema, any_whitespace=False, strict_mode=True)
            return {"type": "grammar", "grammar": str(grammar)}
        return {key: rewrite(value) for key, value in node.items()}

    return compiler.compile_structural_tag(json.dumps(rewrite(tag)))


def _bounded_strings(node: Any) -> Any:
    """The schema with every string bounded by minLength / maxLength (and no pattern, format, enum
    or const) written as the equivalent pattern without control characters: xgrammar 0.2.8 compiles
    the bounds to [^"\\\r\n]{min,max}, which admits raw control characters (a tab, 0x1f) that
    JSON forbids inside strings, and no escapes either; the pattern keeps the escapes out as it did
    and the control characters out as JSON does."""
    if isinstance(node, list):
        return [_bounded_strings(item) for item in node]
    if not isinstance(node, dict):
        return node
    out = {key: _bounded_strings(value) for key, value in node.items()}
    bounds = [key for key in ("minLength", "maxLength") if isinstance(out.get(key), int)]
    if out.get("type") == "string" and bounds and not {"pattern", "format", "enum", "const"} & set(out):
        low, high = out.pop("minLength", 0), out.pop("maxLength", "")
        out["pattern"] = r'^[^\x00-\x1f"\\]{' + f"{low},{high}" + "}$"
    return out
