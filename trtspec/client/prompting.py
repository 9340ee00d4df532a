"""What trtspec's own clients put in `text_input`: the target's chat template, applied here.

Triton's stock llmapi model passes `text_input` to TensorRT-LLM as it is (model.py
`_convert_request`: text_input[0], no chat template), and trtspec's cpu model reads it the same
way; so a request means one prompt on both paths, and the client decides whether it is a chat
turn. `trtspec infer`, `trtspec bench` (through a server) and `trtspec tune` render each prompt as
one user turn through the target's chat template (trtspec.chat, the rule training uses) unless
`--raw`; a tokenizer without a template leaves the text as it is. The template comes from the
target checkpoint in the spec's built engine (else the spec's model source), read with
transformers.

`Renderer.describe()` is what reports record as the prompts sent.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

RAW = "raw (text_input as given, no chat template)"


@dataclass(frozen=True)
class Renderer:
    """prompt text -> text_input. tokenizer None: raw."""

    tokenizer: Any = None
    source: str = ""

    def __call__(self, prompt: str) -> str:
        if self.tokenizer is None:
            return prompt
        from trtspec.chat import conversation_text

        return conversation_text(self.tokenizer, [{"role": "user", "content": prompt}], add_generation_prompt=True,
                                 chat=True)

    def describe(self) -> str:
        if self.tokenizer is None:
            return RAW
        return f"chat template of {self.source}, applied by the client (one user turn)"


def built_tokenizer_dir(spec: Any) -> Any:
    """The target checkpoint inside the spec's built engine (its tokenizer, no weights read), or
    None before a build: then the model source is resolved (a hub id is fetched)."""
    from trtspec.artifacts import Layout, engine_name

    engine = Layout.from_spec(spec).engine_dir(
        engine_name(spec.model_name, spec.speculative.mode, spec.build.backend, spec.quantization.fp8))
    for sub in ("target", "hf/target"):
        if (engine / sub / "tokenizer_config.json").is_file():
            return engine / sub
    return None


def renderer(spec: Any, raw: bool = False) -> Renderer:
    """The spec's target's chat template as a Renderer; raw when asked or the tokenizer has none."""
    if raw:
        return Renderer()
    from trtspec.chat import has_chat_template
    from trtspec.errors import TrtSpecError
    from trtspec.models import resolve_model

    try:
        from transformers import AutoTokenizer

        path = built_tokenizer_dir(spec) or resolve_model(spec.model.source, quiet=True,
                                                          trust_remote_code=spec.model.trust_remote_code).path
        tokenizer = AutoTokenizer.from_pretrained(str(path), trust_remote_code=spec.model.trust_remote_code)
    except TrtSpecError as error:
        raise TrtSpecError(f"the chat template of {spec.model.source}: {error.problem}",
                           fix="pass --raw to send the prompt unchanged, or point model.source at the target") from None
    if not has_chat_template(tokenizer):
        return Renderer()
    return Renderer(tokenizer, spec.model.source)


@dataclass(frozen=True)
class TokenCounter:
    """prompt text -> its prompt tokens as trtspec's served model counts them (trtspec.chat, the rule
    the cpu model and the engine use): one user turn through the chat template (`chat`: the server
    applies the target's template, as trtspec's OpenAI endpoint and Dynamo's frontend do for a chat
    request), or the text as it is (a raw completion). No request is sent."""

    tokenizer: Any
    chat: bool
    source: str

    def __call__(self, prompt: str) -> int:
        from trtspec.chat import prompt_ids

        return len(prompt_ids(self.tokenizer, prompt, chat=None if self.chat else False))

    def describe(self) -> str:
        how = "one user turn through its chat template, as the server applies it" if self.chat else "the text as sent"
        return f"counted here with the tokenizer of {self.source} ({how})"


def token_counter(spec: Any, raw: bool = False) -> TokenCounter | None:
    """The spec's built engine's tokenizer (the one its servers load) as a TokenCounter; None where
    this workdir has no built engine (then bench asks the server: trtspec.bench.phases)."""
    path = built_tokenizer_dir(spec)
    if path is None:
        return None
    from transformers import AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(str(path), trust_remote_code=spec.model.trust_remote_code)
    return TokenCounter(tokenizer, chat=not raw, source=str(path))

