"""Progress of long convert phases, reported through one callback; only `trtspec.cli` draws.

A phase ("answers", "features", "training", "FP8 calibration", "acceptance") reports events with
what is done out of what is planned, the tokens processed so far (for tokens/s) and a short info
text (loss, accuracy). The callback receives every event; a drawer keeps one bar per phase.

    counter = Phase(report, "features", total=len(rows), unit="rows")
    counter.advance(8, tokens=8 * 195)

A `Note` is a one-line message through the same callback (a plan, a choice made for the user):

    note(report, "draft vocabulary: 4,096 of 49,152 tokens, 99.0 % of the answer tokens")
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass


@dataclass(frozen=True)
class ProgressEvent:
    phase: str
    completed: int
    total: int
    unit: str = "items"
    tokens: int = 0        # tokens processed in this phase so far (0: not counted)
    info: str = ""


@dataclass(frozen=True)
class Note:
    text: str


Reporter = Callable[[ProgressEvent | Note], None]


def silent(event: ProgressEvent | Note) -> None:
    """A Reporter that draws nothing (tests, processes other than rank 0)."""


def note(report: Reporter | None, text: str) -> None:
    (report or silent)(Note(text))


class Phase:
    """Counts one phase's progress and reports each change."""

    def __init__(self, report: Reporter | None, phase: str, *, total: int, unit: str = "items",
                 completed: int = 0):
        self.report, self.phase, self.total, self.unit = report or silent, phase, total, unit
        self.completed, self.tokens, self.info = completed, 0, ""
        self._emit()

    def advance(self, count: int = 0, *, tokens: int = 0, info: str | None = None) -> None:
        self.completed += count
        self.tokens += tokens
        if info is not None:
            self.info = info
        self._emit()

    def set(self, completed: int, *, info: str | None = None) -> None:
        self.advance(completed - self.completed, info=info)

    def _emit(self) -> None:
        self.report(ProgressEvent(self.phase, self.completed, self.total, self.unit, self.tokens, self.info))
