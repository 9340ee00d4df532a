"""Prompt sets: the user's JSONL files or the sets shipped in the package, and the chat template.

A prompt file has one JSON object per line with a "prompt" key (other keys such as "category"
are kept but ignored). An empty file is refused: training or calibrating on nothing would
silently produce a useless artifact.
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

from trtspec.errors import TrtSpecError

PACKAGED = {"train": "train_prompts.jsonl", "calibration": "calibration_prompts.jsonl"}


def prompt_file(path: str | None, default: str) -> Path:
    """The user's file when given, else the packaged set `default` ("train" | "calibration")."""
    if path:
        return Path(path)
    return Path(__file__).resolve().parents[1] / "data" / PACKAGED[default]


def load_prompts(path: str | Path) -> list[str]:
    """Read a JSONL prompt file; refuse a missing, malformed or empty one with a one-line error."""
    path = Path(path)
    if not path.is_file():
        raise TrtSpecError(f"{path}: prompt file not found", fix='give a JSONL file with {"prompt": ...} per line')
    prompts = []
    for number, line in enumerate(path.read_text().splitlines(), start=1):
        if not line.strip():
            continue
        try:
            record = json.loads(line)
        except json.JSONDecodeError as error:
            raise TrtSpecError(f"{path}:{number}: not valid JSON ({error.msg})",
                               fix='write one {"prompt": "..."} object per line') from None
        if not isinstance(record, dict) or not str(record.get("prompt", "")).strip():
            raise TrtSpecError(f"{path}:{number}: no non-empty \"prompt\" key",
                               fix='write one {"prompt": "..."} object per line')
        prompts.append(str(record["prompt"]))
    if not prompts:
        raise TrtSpecError(f"{path}: the prompt file is empty", fix='add at least one {"prompt": ...} line')
    return prompts


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
