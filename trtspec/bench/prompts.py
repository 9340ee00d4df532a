"""Prompt sets for bench and tune: JSONL files with one {"prompt": ..., "category": ...} per line.

`category` is optional ("default" when absent). With no file the set shipped in the package
(trtspec/data/bench_prompts.jsonl: chat, code, math, summarize) is used.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

from trtspec.errors import TrtSpecError

PACKAGE_PROMPTS = Path(__file__).resolve().parents[1] / "data" / "bench_prompts.jsonl"


@dataclass(frozen=True)
class Prompt:
    index: int
    text: str
    category: str = "default"


def load_prompts(path: str | Path | None = None, num_prompts: int | None = None) -> list[Prompt]:
    """Read a JSONL prompt file (or the packaged set), keeping the first `num_prompts` if given."""
    if path is None:
        source = "the packaged prompt set"
        text = PACKAGE_PROMPTS.read_text()
    else:
        path = Path(path)
        source = str(path)
        if not path.is_file():
            raise TrtSpecError(f"{path}: no such prompt file",
                               fix='give a JSONL file with one {"prompt": "..."} per line, or omit --prompts')
        text = path.read_text()
    prompts: list[Prompt] = []
    for number, line in enumerate(text.splitlines(), start=1):
        if not line.strip():
            continue
        try:
            row = json.loads(line)
        except json.JSONDecodeError as error:
            raise TrtSpecError(f"{source} line {number}: not valid JSON ({error.msg})",
                               fix='write one {"prompt": "..."} object per line') from None
        if not isinstance(row, dict) or not isinstance(row.get("prompt"), str) or not row["prompt"].strip():
            raise TrtSpecError(f"{source} line {number}: needs a non-empty string \"prompt\"",
                               fix='write one {"prompt": "...", "category": "..."} object per line')
        prompts.append(Prompt(len(prompts), row["prompt"], str(row.get("category") or "default")))
    if not prompts:
        raise TrtSpecError(f"{source}: holds no prompts", fix='add lines like {"prompt": "Hello"}')
    return prompts[:num_prompts] if num_prompts else prompts
