"""How a prompt becomes the token ids a model answers: one rule for training and serving.

EAGLE-3 training data (convert), FP8 calibration, the cpu engine and the benchmarks all call
`prompt_ids`, so a head is trained on exactly the token sequences the server will feed it. With
a chat template the prompt becomes one user turn plus the generation prompt, rendered to text and
tokenized without adding special tokens again (the template already holds any BOS). Without a
template the text is tokenized as the tokenizer does by default (its own BOS policy), as
transformers' pipelines and TensorRT-LLM's tokenizer do.
"""

from __future__ import annotations

from typing import Any


def has_chat_template(tokenizer: Any) -> bool:
    return bool(getattr(tokenizer, "chat_template", None))


def prompt_ids(tokenizer: Any, prompt: str, chat: bool | None = None) -> list[int]:
    """Token ids of `prompt`, through the chat template when the tokenizer has one (chat=None)
    or when chat=True; as plain text when chat=False."""
    if has_chat_template(tokenizer) if chat is None else chat:
        text = tokenizer.apply_chat_template([{"role": "user", "content": prompt}], tokenize=False,
                                             add_generation_prompt=True)
        return list(tokenizer(text, add_special_tokens=False)["input_ids"])
    return list(tokenizer(prompt)["input_ids"])
