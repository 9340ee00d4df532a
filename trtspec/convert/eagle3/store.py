"""On-disk stores of EAGLE-3 training data, read and written a row at a time (nothing loads whole).

Rows file (`sequences.jsonl`): one {"i": sample index, "ids": [...], "a": answer start} per line,
in sample order. Each rank writes its own shard; rank 0 merges the shards (sample i is in shard i
mod world_size, counted from the first sample of the round) behind the rows already there, and
nobody ever holds the whole list. Readers take the first `limit` rows: a file may hold more
samples than this run trains on.

Feature store (`features/`): one flat binary file per array, `rows x <row shape>` in a fixed
dtype, plus meta.json (shapes, dtypes, the key it was made from, complete or not). Rows are
written with pwrite at their offset (ranks fill disjoint rows of the same files) and read back
with preadv straight into the caller's (pinned) buffer, so training streams a data set larger
than memory: at any time only the batches in flight are resident.
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from trtspec import artifacts
from trtspec.convert.eagle3.data import Row

if TYPE_CHECKING:
    import torch

# --- rows (token ids of each training sequence) ---------------------------------------------


def write_rows(path: Path, rows: Iterable[tuple[int, Any]]) -> int:
    """Write (index, row) rows as JSONL through a .partial file renamed at the end; return the count.

    A row is a list of ids or a Row (ids + answer_start, kept as "a")."""
    partial = path.with_name(path.name + ".partial")
    count = 0
    with open(partial, "w") as handle:
        for index, row in rows:
            record = {"i": index, "ids": row} if isinstance(row, list) else {"i": index, "ids": row.ids,
                                                                             "a": row.answer_start}
            handle.write(json.dumps(record) + "\n")
            count += 1
    os.replace(partial, path)
    return count


def read_records(path: Path, limit: int | None = None) -> Iterator[dict[str, Any]]:
    """The first `limit` (all: None) {"i", "ids"[, "a"]} records of a rows file, streamed."""
    with open(path) as handle:
        for number, line in enumerate(handle):
            if limit is not None and number >= limit:
                return
            yield json.loads(line)


def read_rows(path: Path, limit: int | None = None) -> Iterator[tuple[int, list[int]]]:
    for record in read_records(path, limit):
        yield record["i"], record["ids"]


def read_answers(path: Path, limit: int | None = None) -> Iterator[list[int]]:
    """The answer ids of each row (the whole row where the file predates answer starts)."""
    for record in read_records(path, limit):
        yield record["ids"][record.get("a", 0):]


def merge_shards(shards: list[Path], destination: Path, *, head: Path | None = None,
                 head_rows: int = 0) -> int:
    """Interleave per-rank shards back into sample order (the j-th sample after the head came from
    shard j mod len(shards)), after the first `head_rows` rows of `head` (rows made earlier)."""
    readers = [read_records(shard) for shard in shards]

    def interleaved() -> Iterator[tuple[int, Any]]:
        if head is not None:
            for record in read_records(head, head_rows):
                yield record["i"], _stored(record)
        live = list(readers)
        while live:
            for reader in list(live):
                record = next(reader, None)
                if record is None:
                    live.remove(reader)
                else:
                    yield record["i"], _stored(record)

    return write_rows(destination, interleaved())


def _stored(record: dict[str, Any]) -> Row | list[int]:
    return Row(record["ids"], record["a"]) if "a" in record else record["ids"]


@dataclass(frozen=True)
class RowStats:
    count: int
    longest: int
    tokens: int


def scan_rows(path: Path, limit: int | None = None) -> RowStats:
    count = longest = tokens = 0
    for _, ids in read_rows(path, limit):
        count, longest, tokens = count + 1, max(longest, len(ids)), tokens + len(ids)
    return RowStats(count, longest, tokens)


# --- features (what the frozen target computed for each row) --------------------------------

_DTYPES = {"bfloat16": 2, "float16": 2, "float32": 4, "int32": 4, "int64": 8}


@dataclass(frozen=True)
class ArraySpec:
    dtype: str              # a key of _DTYPES (a torch dtype name)
    shape: tuple[int, ...]  # per row

    @property
    def row_bytes(self) -> int:
        size = _DTYPES[self.dtype]
        for dim in self.shape:
            size *= dim
        return size


class FeatureStore:
    """Fixed-shape per-row arrays in flat files under `directory` (see the module docstring)."""

    def __init__(self, directory: Path, meta: dict[str, Any]):
        self.directory = directory
        self.meta = meta
        self.rows: int = meta["rows"]
        self.arrays = {name: ArraySpec(spec["dtype"], tuple(spec["shape"])) for name, spec in meta["arrays"].items()}
        self._fds: dict[str, int] = {}

    # 1. lifecycle: rank 0 creates, every rank opens, rank 0 marks complete
    @classmethod
    def create(cls, directory: Path, *, rows: int, arrays: dict[str, ArraySpec], key: Any) -> FeatureStore:
        directory.mkdir(parents=True, exist_ok=True)
        meta = {"key": key, "rows": rows, "complete": False,
                "arrays": {name: {"dtype": spec.dtype, "shape": list(spec.shape)} for name, spec in arrays.items()}}
        artifacts.write_json(directory / "meta.json", meta)
        for name, spec in arrays.items():
            with open(directory / f"{name}.bin", "wb") as handle:
                handle.truncate(rows * spec.row_bytes)  # sparse until written
        return cls(directory, meta)

    @classmethod
    def open(cls, directory: Path) -> FeatureStore | None:
        meta_path = directory / "meta.json"
        return cls(directory, artifacts.read_json(meta_path)) if meta_path.exists() else None

    def matches(self, key: Any) -> bool:
        return bool(self.meta.get("complete")) and self.meta.get("key") == json.loads(json.dumps(key))

    def mark_complete(self) -> None:
        self.meta["complete"] = True
        partial = self.directory / "meta.json.partial"
        artifacts.write_json(partial, self.meta)
        os.replace(partial, self.directory / "meta.json")

    def close(self) -> None:
        for fd in self._fds.values():
            os.close(fd)
        self._fds.clear()

    def nbytes(self) -> int:
        return sum(self.rows * spec.row_bytes for spec in self.arrays.values())

    # 2. rows in and out
    def _fd(self, name: str) -> int:
        if name not in self._fds:
            self._fds[name] = os.open(self.directory / f"{name}.bin", os.O_RDWR)
        return self._fds[name]

    def write(self, name: str, start: int, values: torch.Tensor) -> None:
        """Store rows start .. start + len(values) - 1 of array `name` (a host or device tensor)."""
        spec = self.arrays[name]
        import torch

        host = values.detach().to("cpu", dtype=getattr(torch, spec.dtype)).contiguous()
        data = memoryview(host.view(torch.uint8).numpy()).cast("B")
        offset, written = start * spec.row_bytes, 0
        while written < len(data):
            written += os.pwrite(self._fd(name), data[written:], offset + written)

    def read(self, name: str, rows: list[int], out: torch.Tensor | None = None) -> torch.Tensor:
        """Rows `rows` of array `name` as a [len(rows), *shape] tensor (into `out` when given)."""
        import torch

        spec = self.arrays[name]
        if out is None:
            out = torch.empty((len(rows), *spec.shape), dtype=getattr(torch, spec.dtype))
        raw = out.view(torch.uint8).numpy().reshape(len(rows), spec.row_bytes)
        fd = self._fd(name)
        for slot, row in enumerate(rows):
            if os.preadv(fd, [memoryview(raw[slot])], row * spec.row_bytes) != spec.row_bytes:
                raise OSError(f"{self.directory / name}.bin: short read at row {row}")
        return out

    def read_all(self, name: str) -> torch.Tensor:
        """A whole small array (the row lengths; never a feature array), in one read."""
        import torch

        spec = self.arrays[name]
        out = torch.empty((self.rows, *spec.shape), dtype=getattr(torch, spec.dtype))
        raw = memoryview(out.view(torch.uint8).numpy()).cast("B")
        done = 0
        while done < len(raw):
            got = os.preadv(self._fd(name), [raw[done:]], done)
            if got <= 0:
                raise OSError(f"{self.directory / name}.bin: short read")
            done += got
        return out
