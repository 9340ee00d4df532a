"""How a prompt or a conversation becomes the token ids a model answers: one rule for training and serving.

EAGLE-3 training data (convert), FP8 calibration, the cpu engine and the benchmarks all call
`prompt_ids` (one user turn) or `conversation_ids` (a whole conversation), so a head is trained on
exactly the token sequences the server will feed it. With a chat template the messages are
rendered to text (plus the generation prompt when the model is to answer next) and tokenized
without adding special tokens again (the template already holds any BOS). Without a template the
message contents are joined by newlines and tokenized as the tokenizer does by default (its own
BOS policy), as transformers' pipelines and TensorRT-LLM's tokenizer do; for one user message that
is the prompt text itself.

A message is {"role": "system" | "user" | "assistant", "content": str}, OpenAI's form.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

Message = dict[str, str]


def content_text(content: Any) -> str | None:
    """A message's content as text: a string, or OpenAI's list of {"type": "text", "text": ...}
    parts joined; None when it holds anything else (images, audio)."""
    if isinstance(content, str):
        return content
    if isinstance(content, list) and all(isinstance(p, dict) and p.get("type") == "text"
                                         and isinstance(p.get("text"), str) for p in content):
        return "".join(part["text"] for part in content)
    return None


def has_chat_template(tokenizer: Any) -> bool:
    return bool(getattr(tokenizer, "chat_template", None))


def conversation_text(tokenizer: Any, messages: Sequence[Message], *, add_generation_prompt: bool,
                      chat: bool | None = None) -> str:
    """The text a model reads for `messages`: the chat template's rendering (chat=None uses the
    template when the tokenizer has one), or the contents joined by newlines (chat=False)."""
    if has_chat_template(tokenizer) if chat is None else chat:
        return tokenizer.apply_chat_template(list(messages), tokenize=False,
                                             add_generation_prompt=add_generation_prompt)
    return "\n".join(message["content"] for message in messages)


def conversation_ids(tokenizer: Any, messages: Sequence[Message], *, add_generation_prompt: bool,
                     chat: bool | None = None) -> list[int]:
    """Token ids of a conversation; add_generation_prompt=True when the assistant answers next."""
    templated = has_chat_template(tokenizer) if chat is None else chat
    text = conversation_text(tokenizer, messages, add_generation_prompt=add_generation_prompt, chat=templated)
    if templated:
        return list(tokenizer(text, add_special_tokens=False)["input_ids"])
    return list(tokenizer(text)["input_ids"])


def prompt_ids(tokenizer: Any, prompt: str, chat: bool | None = None) -> list[int]:
    """Token ids of `prompt` as one user turn the assistant answers: through the chat template
    when the tokenizer has one (chat=None) or when chat=True; as plain text when chat=False."""
    return conversation_ids(tokenizer, [{"role": "user", "content": prompt}], add_generation_prompt=True, chat=chat)
