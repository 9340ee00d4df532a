"""Prompt files: JSONL with one {"prompt": ..., "category": ...} object per line.

The one reader of prompt files, shared by convert (training and calibration prompts) and bench
(benchmark prompts). `category` is optional ("default" when absent); other keys are ignored.
A missing, malformed or empty file is refused with a one-line error naming the line: training,
calibrating or benchmarking on nothing would silently produce a useless result.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

from trtspec.errors import TrtSpecError

DATA_DIR = Path(__file__).resolve().parent / "data"
PACKAGED = {"train": "train_prompts.jsonl", "calibration": "calibration_prompts.jsonl",
            "bench": "bench_prompts.jsonl"}


@dataclass(frozen=True)
class Prompt:
    index: int
    text: str
    category: str = "default"


def packaged_prompt_file(name: str) -> Path:
    """A prompt set shipped in the package: "train" | "calibration" | "bench"."""
    return DATA_DIR / PACKAGED[name]


def read_prompt_file(path: str | Path) -> list[Prompt]:
    """Read a JSONL prompt file, refusing a missing, malformed or empty one in one line."""
    path = Path(path)
    if not path.is_file():
        raise TrtSpecError(f"{path}: no such prompt file", fix='give a JSONL file with one {"prompt": "..."} per line')
    prompts: list[Prompt] = []
    for number, line in enumerate(path.read_text().splitlines(), start=1):
        if not line.strip():
            continue
        try:
            row = json.loads(line)
        except json.JSONDecodeError as error:
            raise TrtSpecError(f"{path}:{number}: not valid JSON ({error.msg})",
                               fix='write one {"prompt": "..."} object per line') from None
        if not isinstance(row, dict) or not isinstance(row.get("prompt"), str) or not row["prompt"].strip():
            raise TrtSpecError(f"{path}:{number}: needs a non-empty string \"prompt\"",
                               fix='write one {"prompt": "...", "category": "..."} object per line')
        prompts.append(Prompt(len(prompts), row["prompt"], str(row.get("category") or "default")))
    if not prompts:
        raise TrtSpecError(f"{path}: the prompt file is empty", fix='add at least one {"prompt": ...} line')
    return prompts
