"""What every comparison in the harness shares: the prompts, the model, chat-templated ids, medians,
percentiles and ratios. Nothing here reads a file outside the repository or the trtspec cache.

Prompts are the packaged dev set (trtspec/data/bench_prompts.jsonl: 30 prompts, chat 8, code 7,
summarize 7, reasoning 8); its lines 16-30 are held back from tuning (`held_back=True`), so
figures on them are not tuned to. The model is SmolLM2 as `trtspec models fetch smollm2` caches it.
The percentile is the one `trtspec bench` reports (trtspec.bench.metrics.percentile, linear
interpolation between closest ranks); a ratio between two contenders is the median of per-repeat
ratios, so a noisy repeat hits both alike.
"""

from __future__ import annotations

import os
import statistics
import sys
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from trtspec.bench.metrics import percentile
from trtspec.prompts import load_prompts, prompt_texts

__all__ = ["HELD_BACK_FROM", "ROOT", "chat_ids", "dev_rows", "harness_command", "load_average", "median_ratio",
           "percentile", "smollm2", "train_texts"]

HELD_BACK_FROM = 15  # dev lines 16-30 (0-based 15-29) are never used for tuning
ROOT = Path(__file__).resolve().parents[1]  # the repository: where `python -m benchmarks` runs


def harness_command(name: str, *args: str) -> list[str]:
    """argv that runs comparison `name` in a fresh process (run it with cwd=ROOT): a torch process
    keeps its OpenMP teams, so figures that must not read each other's state get one each."""
    return [sys.executable, "-m", "benchmarks", name, *args]


def dev_rows(*, held_back: bool = False, limit: int | None = None) -> list[dict[str, str]]:
    """The packaged dev prompts as {"prompt", "category"} rows (only the held-back ones if asked)."""
    rows = [{"prompt": p.text, "category": p.category} for p in load_prompts(None, "bench")]
    rows = rows[HELD_BACK_FROM:] if held_back else rows
    return rows[:limit] if limit else rows


def train_texts(limit: int | None = None) -> list[str]:
    """The packaged training prompts (what `trtspec convert --mode eagle3` answers)."""
    return prompt_texts(None, "train", limit)


def smollm2() -> Path:
    """SmolLM2's local directory (the trtspec cache); a one-line error if it was never fetched."""
    from trtspec.models import resolve_model

    return resolve_model("smollm2", quiet=True).path


def chat_ids(tokenizer: Any, text: str) -> list[int]:
    """One user turn through the tokenizer's chat template, generation prompt added: the ids every
    contender of a comparison gets."""
    return list(tokenizer.apply_chat_template([{"role": "user", "content": text}], add_generation_prompt=True,
                                              tokenize=True, return_dict=False))


def median_ratio(numerators: Iterable[float], denominators: Iterable[float]) -> float:
    """The median of per-repeat ratios (repeat i of one contender over repeat i of the other)."""
    pairs = list(zip(numerators, denominators, strict=True))
    return statistics.median(a / b for a, b in pairs if b) if pairs else float("nan")


def load_average() -> float:
    """The 1-minute load average: printed beside every figure (the machine is shared)."""
    return os.getloadavg()[0]
