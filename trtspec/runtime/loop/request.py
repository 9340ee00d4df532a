"""One request's boundary: argument validation, and turning committed tokens into output.

`validate()` checks user-facing arguments once and raises InvalidRequestError (a one-line
TrtSpecError). `OutputAssembler` receives the tokens each verify step commits and applies the
stops, in this order per token: EOS (not emitted), max_new_tokens, stop strings (the text is cut
before the stop string; token_ids end with the token that completed it). It also produces the
incremental text for streaming, holding back what could still become a stop string or an
incomplete UTF-8 character. It knows nothing about models or drafting.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from trtspec.errors import TrtSpecError
from trtspec.runtime.loop.stats import GenerationStats

# the one statement of the sampling ranges; MIN_TEMPERATURE and temperature_problem stay importable here
from trtspec.sampling_rules import FIXES, MIN_TEMPERATURE, sampling_problem, temperature_problem  # noqa: F401


class InvalidRequestError(TrtSpecError):
    """A generate() argument is out of range."""

    exit_code = 2


class ServerBusyError(TrtSpecError):
    """The engine refused a request at once: its queue is full, or the request can never fit."""

    exit_code = 3


class EngineFailedError(TrtSpecError):
    """The engine's loop ended on an error outside a step: every request fails with it until a restart."""

    exit_code = 4


class RequestCancelled(Exception):
    """The caller went away; the engine stopped the request and freed its cache."""


def validate(*, num_prompt_tokens: int, max_input_len: int, max_new_tokens: int, temperature: float,
             top_k: int, top_p: float) -> None:
    if num_prompt_tokens < 1:
        raise InvalidRequestError("the prompt is empty", fix="give at least one token")
    if num_prompt_tokens > max_input_len:
        raise InvalidRequestError(f"the prompt has {num_prompt_tokens} tokens, more than max_input_len "
                                  f"{max_input_len}", fix="shorten the prompt or rebuild with a larger max_input_len")
    if max_new_tokens < 1:
        raise InvalidRequestError(f"max_new_tokens must be at least 1 (got {max_new_tokens})")
    problem = sampling_problem(temperature=temperature, top_p=top_p, top_k=top_k)
    if problem:
        raise InvalidRequestError(f"{problem[0]} {problem[1]}", fix=FIXES[problem[0]])


@dataclass
class GenerationResult:
    """A finished request. finish_reason is "length" or "stop"."""

    token_ids: list[int]
    text: str
    finish_reason: str
    stats: GenerationStats
    prompt_token_ids: list[int] = field(default_factory=list)
    stop_token_id: int | None = None
    """The end-of-sequence id that finished the request (not in token_ids); None otherwise."""


@dataclass
class StreamChunk:
    """New tokens and new text since the previous chunk; finish_reason is None until the last."""

    token_ids: list[int]
    text: str
    finish_reason: str | None
    stats: GenerationStats


class OutputAssembler:
    """Accumulates committed tokens, applies stops, and yields text increments."""

    def __init__(self, tokenizer: Any, *, eos_ids: set[int], max_new_tokens: int, stop: list[str] | None):
        self.tokenizer = tokenizer
        self.eos_ids = eos_ids
        self.max_new_tokens = max_new_tokens
        self.stop = [s for s in (stop or []) if s]
        self.token_ids: list[int] = []
        self.text = ""
        self.emitted_chars = 0
        self.emitted_tokens = 0
        self.finish_reason: str | None = None
        self.stop_token_id: int | None = None  # the end-of-sequence id that finished it (vLLM's stop_reason)

    def _decode(self, ids: list[int]) -> str:
        return self.tokenizer.decode(ids, skip_special_tokens=True)

    def add(self, committed: list[int]) -> None:
        """Take one step's committed tokens; sets finish_reason when a stop applies."""
        start = len(self.token_ids)
        for token in committed:
            if token in self.eos_ids:
                self.finish_reason, self.stop_token_id = "stop", token
                break
            self.token_ids.append(token)
            if len(self.token_ids) >= self.max_new_tokens:
                self.finish_reason = "length"
                break
        self.text = self._decode(self.token_ids)
        if self.stop:
            self._apply_stop_strings(start)

    def _apply_stop_strings(self, step_start: int) -> None:
        # Search only where a stop string could newly appear: from the last emitted char minus
        # the longest stop, so a stop spanning two steps is still found.
        longest = max(len(s) for s in self.stop)
        search_from = max(0, self.emitted_chars - longest)
        hits = [(self.text.find(s, search_from), s) for s in self.stop]
        hits = [(index, s) for index, s in hits if index >= 0]
        if not hits:
            return
        index, _ = min(hits)
        # The first token count whose text reaches the stop string's end decides token_ids.
        for count in range(max(step_start, 1), len(self.token_ids) + 1):
            prefix = self._decode(self.token_ids[:count])
            if any(s in prefix[search_from:] for s in self.stop):
                self.token_ids = self.token_ids[:count]
                break
        self.text = self.text[:index]
        self.finish_reason = "stop"

    def chunk(self, stats: GenerationStats) -> StreamChunk:
        """The increment since the last chunk; on a finished request, everything left."""
        safe = len(self.text)
        if self.finish_reason is None:
            if self.stop:
                safe -= max(len(s) for s in self.stop) - 1
            while safe > self.emitted_chars and self.text[safe - 1] == "\ufffd":
                safe -= 1
        safe = max(safe, self.emitted_chars)
        text = self.text[self.emitted_chars:safe]
        tokens = self.token_ids[self.emitted_tokens:]
        self.emitted_chars = safe
        self.emitted_tokens = len(self.token_ids)
        return StreamChunk(token_ids=tokens, text=text, finish_reason=self.finish_reason, stats=stats)
