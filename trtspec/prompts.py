"""Prompt files: JSONL with one {"prompt": ..., "category": ...} object per line.

The one reader of prompt files, shared by convert (training and calibration prompts), bench and
tune (benchmark prompts). `category` is optional ("default" when absent); other keys are ignored.
A missing, non-UTF-8, malformed or empty file is refused with a one-line error naming the file
(and the line): training, calibrating or benchmarking on nothing would silently produce a useless
result. How a prompt becomes token ids is trtspec.chat's job, the same for training and serving.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass
from pathlib import Path

from trtspec.errors import TrtSpecError

DATA_DIR = Path(__file__).resolve().parent / "data"
PACKAGED = {"train": "train_prompts.jsonl", "calibration": "calibration_prompts.jsonl",
            "bench": "bench_prompts.jsonl",
            # agent-style traffic: `edit` (edits of a given text or code, copy-heavy, 50-520 SmolLM2
            # tokens) and `tool` (tool calls and JSON output); `--prompts` takes its path
            "traffic": "traffic_prompts.jsonl"}


@dataclass(frozen=True)
class Prompt:
    index: int
    text: str
    category: str = "default"


def packaged_prompt_file(name: str) -> Path:
    """A prompt set shipped in the package: "train" | "calibration" | "bench"."""
    return DATA_DIR / PACKAGED[name]


def read_text_file(path: Path, *, what: str) -> str:
    """A UTF-8 text file's contents, or a one-line error naming the file (binary, UTF-16, unreadable)."""
    try:
        return path.read_text(encoding="utf-8")
    except UnicodeDecodeError as error:
        raise TrtSpecError(f"{path}: the {what} is not UTF-8 text (byte {error.start})",
                           fix="save it as UTF-8 text") from None
    except IsADirectoryError:
        raise TrtSpecError(f"{path}: the {what} is a directory", fix="give a file") from None
    except OSError as error:
        raise TrtSpecError(f"{path}: cannot read the {what} ({error.strerror})",
                           fix="check the path and its permissions") from None


def read_prompt_file(path: str | Path) -> list[Prompt]:
    """Read a JSONL prompt file, refusing a missing, malformed or empty one in one line."""
    path = Path(path)
    if not path.exists():
        raise TrtSpecError(f"{path}: no such prompt file", fix='give a JSONL file with one {"prompt": "..."} per line')
    prompts: list[Prompt] = []
    for number, line in enumerate(read_text_file(path, what="prompt file").splitlines(), start=1):
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


def load_prompts(path: str | Path | None, default: str = "bench", limit: int | None = None) -> list[Prompt]:
    """The user's prompt file, else the packaged set `default`; the first `limit` if given."""
    prompts = read_prompt_file(path if path else packaged_prompt_file(default))
    return prompts[:limit] if limit else prompts


def prompt_texts(path: str | Path | None, default: str, limit: int | None = None) -> list[str]:
    """Just the texts of load_prompts (convert trains and calibrates on texts)."""
    return [prompt.text for prompt in load_prompts(path, default, limit)]


def prompts_sha256(prompts: list[str]) -> str:
    """A stable digest of a prompt list, recorded in manifests for skip-on-rerun."""
    return hashlib.sha256(json.dumps(prompts).encode()).hexdigest()
