"""Answering samples with several requests in flight, rows back in sample order.

Both ways of making rows from an engine that batches in flight (a running server:
eagle3.remote; trtspec's cpu engine in process: eagle3.engine_answers) answer one sample per
worker thread: the sample's turns go in order (a later turn's context holds the earlier
answers), samples run concurrently, and the rows come back in sample order through a bounded
window, so memory stays flat whatever the number of samples.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable, Iterable, Iterator
from concurrent.futures import ThreadPoolExecutor

from trtspec.chat import Message
from trtspec.convert.eagle3.data import Dialogue, Row, Sample
from trtspec.convert.progress import Phase

# ask(sample, context messages, turn) -> (context ids, answer ids, answer text)
Ask = Callable[[Sample, list[Message], int], tuple[list[int], list[int], str]]


def dialogue_row(sample: Sample, max_context: int, ask: Ask, phase: Phase | None) -> tuple[int, Row]:
    """(sample index, row): the sample's assistant turns answered one after another by `ask`."""
    dialogue = Dialogue(sample, max_context)
    while dialogue.wants_answer():
        context, answer, text = ask(sample, dialogue.context_messages(), dialogue.turn)
        dialogue.record(context, answer, text)
        if phase:
            phase.advance(0, tokens=len(answer))
    return sample.index, dialogue.row()


def rows_in_sample_order(samples: Iterable[Sample], answer: Callable[[Sample], tuple[int, Row]], *,
                         concurrency: int, phase: Phase | None,
                         thread_name: str = "eagle3-generate") -> Iterator[tuple[int, Row]]:
    """answer(sample) for every sample on `concurrency` threads, yielded in sample order."""
    window: deque = deque()
    with ThreadPoolExecutor(max_workers=concurrency, thread_name_prefix=thread_name) as pool:
        try:
            for sample in samples:
                window.append(pool.submit(answer, sample))
                if len(window) >= 4 * concurrency:
                    yield _done(window.popleft(), phase)
            while window:
                yield _done(window.popleft(), phase)
        finally:
            for future in window:
                future.cancel()


def _done(future, phase: Phase | None) -> tuple[int, Row]:
    row = future.result()
    if phase:
        phase.advance(1)
    return row
