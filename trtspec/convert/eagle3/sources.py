"""EAGLE-3 training conversations: the user's data file or directory, or a prompt file.

`speculative.eagle3.data` is a JSONL file (one record per line), a JSON file (one array of
records, read whole: use JSONL for data sets larger than memory), or a directory of such files
(read in name order). A record is one of:

  ShareGPT       {"conversations": [{"from": "human", "value": "..."}, {"from": "gpt", ...}, ...]}
  OpenAI         {"messages": [{"role": "user", "content": "..."}, {"role": "assistant", ...}, ...]}
  plain prompt   {"prompt": "..."}

Multi-turn conversations are kept whole; the target writes every assistant turn itself
(self-distillation), so the data's assistant messages only mark where it answers (after each
user message followed by one, and after a final user message). System messages are kept. Other
keys of a record are ignored. The first bad record stops the run before anything is generated, in one line
naming the file and line (or array index), what is wrong and how to fix it.

Without `data`, `speculative.eagle3.prompts` (or the packaged prompt set) gives one-turn
conversations, as before. `DataSource` validates once (`scan`: count and sha256 of the bytes) and
then streams the conversations as often as needed (`conversations()`).
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from trtspec.chat import Message
from trtspec.errors import TrtSpecError
from trtspec.prompts import packaged_prompt_file, read_text_file

SHAREGPT_ROLES = {"human": "user", "user": "user", "gpt": "assistant", "assistant": "assistant",
                  "chatgpt": "assistant", "bard": "assistant", "bing": "assistant", "model": "assistant",
                  "system": "system"}
OPENAI_ROLES = {"system": "system", "developer": "system", "user": "user", "assistant": "assistant"}
FORMS = ('{"conversations": [{"from": "human", "value": ...}]}, {"messages": [{"role": "user", "content": ...}]} '
         'or {"prompt": ...}')


@dataclass(frozen=True)
class Conversation:
    index: int                      # position in the data (0-based over all files)
    messages: tuple[Message, ...]   # as in the data; an assistant message only marks where the target answers
    where: str = ""                 # file:line, for messages about this record

    def answer_points(self) -> list[int]:
        """Message counts after which the assistant answers: after each user message that is
        followed by an assistant message or ends the conversation."""
        points = []
        for position, message in enumerate(self.messages):
            following = self.messages[position + 1] if position + 1 < len(self.messages) else None
            if message["role"] == "user" and (following is None or following["role"] == "assistant"):
                points.append(position + 1)
        return points

    def prompt_messages(self, start: int, stop: int) -> list[Message]:
        """messages[start:stop] without the data's assistant answers (the target writes its own)."""
        return [message for message in self.messages[start:stop] if message["role"] != "assistant"]


@dataclass
class DataSource:
    """Where the conversations come from; `scan()` validates every record and fingerprints them."""

    files: list[Path]
    label: str                      # what the reports call it (the path, or "packaged prompts")
    count: int = 0
    sha256: str = ""
    _scanned: bool = field(default=False, repr=False)

    @classmethod
    def from_settings(cls, data: str | None, prompts: str | None) -> DataSource:
        if data and prompts:
            raise TrtSpecError("speculative.eagle3.data and speculative.eagle3.prompts are both set",
                               fix="keep one: data takes conversations and prompts alike")
        if data:
            return cls(_data_files(Path(data)), label=data)
        if prompts:
            return cls([Path(prompts)], label=prompts)
        return cls([packaged_prompt_file("train")], label="packaged train prompts")

    def scan(self) -> DataSource:
        """Read every record once: refuse the first bad one, count them, hash the bytes."""
        digest = hashlib.sha256()
        count = 0
        for path in self.files:
            digest.update(path.name.encode() + b"\0")
            with open(path, "rb") as handle:
                while chunk := handle.read(1 << 20):
                    digest.update(chunk)
            for _ in _records(path):
                count += 1
        if count == 0:
            raise TrtSpecError(f"{self.label}: no training records",
                               fix=f"add at least one record: {FORMS}")
        self.count, self.sha256, self._scanned = count, digest.hexdigest(), True
        return self

    def conversations(self) -> Iterator[Conversation]:
        """Every record as a Conversation, streamed in order (scan() first)."""
        assert self._scanned, "scan() validates the data before it is streamed"
        index = 0
        for path in self.files:
            for where, record in _records(path):
                yield Conversation(index, to_messages(record, where), where)
                index += 1


def _data_files(path: Path) -> list[Path]:
    if not path.exists():
        raise TrtSpecError(f"{path}: no such data file or directory",
                           fix="give a .jsonl/.json file or a directory of them")
    if path.is_file():
        return [path]
    files = sorted(p for p in path.iterdir() if p.is_file() and p.suffix in (".jsonl", ".json"))
    if not files:
        raise TrtSpecError(f"{path}: the directory holds no .jsonl or .json files",
                           fix="put the conversations in .jsonl (one record per line) or .json files")
    return files


def _records(path: Path) -> Iterator[tuple[str, dict[str, Any]]]:
    """(where, record) for every record of one file, each checked by to_messages."""
    if path.suffix == ".json":
        try:
            records = json.loads(read_text_file(path, what="data file"))
        except json.JSONDecodeError as error:
            raise TrtSpecError(f"{path}:{error.lineno}: not valid JSON ({error.msg})",
                               fix="a .json data file holds one array of records; use .jsonl for one per line") from None
        if not isinstance(records, list):
            raise TrtSpecError(f"{path}: a .json data file must hold one array of records",
                               fix="wrap the records in [...] or write them one per line as .jsonl")
        for number, record in enumerate(records):
            where = f"{path}[{number}]"
            to_messages(record, where)
            yield where, record
        return
    with open(path, encoding="utf-8", errors="strict") as handle:
        number = 0
        while True:
            try:
                line = handle.readline()
            except UnicodeDecodeError as error:
                raise TrtSpecError(f"{path}:{number + 1}: not UTF-8 text ({error.reason})",
                                   fix="save the data as UTF-8") from None
            if not line:
                return
            number += 1
            if not line.strip():
                continue
            where = f"{path}:{number}"
            try:
                record = json.loads(line)
            except json.JSONDecodeError as error:
                raise TrtSpecError(f"{where}: not valid JSON ({error.msg})",
                                   fix="write one JSON record per line") from None
            to_messages(record, where)
            yield where, record


def to_messages(record: Any, where: str) -> tuple[Message, ...]:
    """The messages of one record in any accepted form; one-line error otherwise."""
    if not isinstance(record, dict):
        raise TrtSpecError(f"{where}: a record must be a JSON object", fix=f"write records as {FORMS}")
    if "conversations" in record:
        turns = _turns(record["conversations"], where, "conversations", "from", "value", SHAREGPT_ROLES)
    elif "messages" in record:
        turns = _turns(record["messages"], where, "messages", "role", "content", OPENAI_ROLES)
    elif "prompt" in record:
        if not isinstance(record["prompt"], str) or not record["prompt"].strip():
            raise TrtSpecError(f'{where}: "prompt" must be a non-empty string', fix=f"write records as {FORMS}")
        turns = [{"role": "user", "content": record["prompt"]}]
    else:
        keys = ", ".join(sorted(record)) or "none"
        raise TrtSpecError(f'{where}: no "conversations", "messages" or "prompt" (keys: {keys})',
                           fix=f"write records as {FORMS}")
    if not any(turn["role"] == "user" for turn in turns):
        raise TrtSpecError(f"{where}: the conversation has no user message",
                           fix="every record needs at least one user (ShareGPT: human) turn")
    return tuple(turns)


def _turns(turns: Any, where: str, key: str, role_key: str, text_key: str, roles: dict[str, str]) -> list[Message]:
    if not isinstance(turns, list) or not turns:
        raise TrtSpecError(f'{where}: "{key}" must be a non-empty list', fix=f"write records as {FORMS}")
    messages = []
    for number, turn in enumerate(turns):
        if not isinstance(turn, dict) or role_key not in turn or text_key not in turn:
            raise TrtSpecError(f'{where}: {key}[{number}] needs "{role_key}" and "{text_key}"',
                               fix=f"write records as {FORMS}")
        role = roles.get(str(turn[role_key]).lower())
        if role is None:
            raise TrtSpecError(f'{where}: {key}[{number}] has {role_key} {turn[role_key]!r}; '
                               f'known: {", ".join(sorted(roles))}',
                               fix="drop tool/function turns or map them to user/assistant")
        messages.append({"role": role, "content": _text(turn[text_key], f"{where}: {key}[{number}]")})
    return messages


def _text(content: Any, where: str) -> str:
    """Message content: a string, or OpenAI's list of {"type": "text", "text": ...} parts."""
    from trtspec.chat import content_text

    text = content_text(content)
    if text is not None:
        return text
    raise TrtSpecError(f"{where}: content must be text (a string or text parts)",
                       fix="remove image/audio parts; EAGLE-3 training here is text only")
