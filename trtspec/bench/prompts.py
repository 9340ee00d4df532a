"""Prompt sets for bench and tune: JSONL files with one {"prompt": ..., "category": ...} per line.

`category` is optional ("default" when absent). With no file the set shipped in the package
(trtspec/data/bench_prompts.jsonl: chat, code, math, summarize) is used.
"""

from __future__ import annotations

from pathlib import Path

from trtspec.prompts import Prompt, packaged_prompt_file, read_prompt_file

__all__ = ["Prompt", "load_prompts"]


def load_prompts(path: str | Path | None = None, num_prompts: int | None = None) -> list[Prompt]:
    """Read a JSONL prompt file (or the packaged set), keeping the first `num_prompts` if given."""
    prompts = read_prompt_file(path if path is not None else packaged_prompt_file("bench"))
    return prompts[:num_prompts] if num_prompts else prompts
