"""Prompt sets: the user's JSONL files or the sets shipped in the package, and the chat template.

A prompt file has one JSON object per line with a "prompt" key (other keys such as "category"
are kept but ignored). An empty file is refused: training or calibrating on nothing would
silently produce a useless artifact.
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

from trtspec.prompts import packaged_prompt_file, read_prompt_file


def prompt_file(path: str | None, default: str) -> Path:
    """The user's file when given, else the packaged set `default` ("train" | "calibration")."""
    return Path(path) if path else packaged_prompt_file(default)


def load_prompts(path: str | Path) -> list[str]:
    """The prompt texts of a JSONL prompt file (trtspec.prompts refuses a bad or empty one)."""
    return [prompt.text for prompt in read_prompt_file(path)]


def prompts_sha256(prompts: list[str]) -> str:
    """A stable digest of a prompt list, recorded in manifests for skip-on-rerun."""
    return hashlib.sha256(json.dumps(prompts).encode()).hexdigest()


def chat_ids(tokenizer, prompt: str) -> list[int]:
    """Token ids of `prompt` as a user turn in the tokenizer's chat template, ready for the answer.

    Falls back to the plain text when the tokenizer has no chat template.
    """
    if getattr(tokenizer, "chat_template", None):
        text = tokenizer.apply_chat_template([{"role": "user", "content": prompt}], tokenize=False,
                                             add_generation_prompt=True)
        return tokenizer(text, add_special_tokens=False)["input_ids"]
    return tokenizer(prompt)["input_ids"]
