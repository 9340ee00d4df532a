"""One request inside the scheduler: its tokens, its slice of the KV cache, its drafter session,
its output, and how it tells the caller what it committed.

A `Request` is what a caller submits (already validated); a `Sequence` is the scheduler's state
for it. Life: waiting (queued, no blocks) -> prefill (prompt chunks go into the cache) -> decode
(one verify step per engine step) -> finished, cancelled or failed; in the last three its blocks
have gone back to the pool and its sink has had its last call.

KV invariant while decoding: the cache holds every committed token except the last (the
*pending* one), exactly as in a one-sequence decoder: each step feeds [pending] + draft.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from trtspec.runtime.loop.request import OutputAssembler
from trtspec.runtime.loop.stats import GenerationStats
from trtspec.runtime.policy.per_request import DraftPolicy
from trtspec.runtime.verify.sampling import SamplingParams


@dataclass
class Request:
    """A validated request. `sink` is called from the engine loop with each StreamChunk (the last
    has a finish_reason) or once with an exception; `is_cancelled` is polled between steps."""

    prompt_ids: list[int]
    params: SamplingParams
    max_new_tokens: int
    sink: Callable[[Any], None]
    stop: list[str] | None = None
    seed: int | None = None
    speculative: bool = True
    is_cancelled: Callable[[], bool] | None = None
    grammar: Any = None  # a trtspec.runtime.grammar CompiledGrammar the output must follow, or None


class Sequence:
    """The scheduler's state for one request."""

    def __init__(self, request: Request, *, tokenizer: Any, eos_ids: set[int], config: Any, reserve: int):
        import torch

        self.request = request
        self.params = request.params
        self.tokens = list(request.prompt_ids)
        self.num_prompt = len(self.tokens)
        self.reserve = reserve  # cache positions this sequence may ever need (its blocks are sized for it)
        self.generator = torch.Generator()
        if request.seed is not None:
            self.generator.manual_seed(request.seed)
        else:  # a seed of its own; torch.seed() also reseeded the process's default generators, 0.1-0.25 ms a request
            self.generator.seed()
        self.stats = GenerationStats()
        self.output = OutputAssembler(tokenizer, eos_ids=eos_ids, max_new_tokens=request.max_new_tokens,
                                      stop=request.stop)
        self.policy = DraftPolicy(config.max_draft_len, dynamic=config.dynamic_draft, floor=config.acceptance_floor)
        self.room = config.max_seq_len - self.num_prompt
        self.table = None     # paged.BlockTable once admitted
        self.kv = None        # paged.SeqKV in the target's pool
        self.session = None   # drafter session, when this request speculates
        self.reused = 0       # prompt positions copied from a reused prefix (prompt_cache)
        self.prompt_aux = None  # while prefilling a prompt to keep: its layer outputs so far, for an EAGLE-3 head
        self.cancelled = False
        self.done = False
        self.grammar = None   # trtspec.runtime.grammar.matcher.SequenceGrammar: this request's matcher
        if request.grammar is not None:
            from trtspec.runtime.grammar.matcher import SequenceGrammar

            self.grammar = SequenceGrammar(request.grammar)

    @property
    def prefilled(self) -> int:
        """Prompt tokens already in the cache (all of them once decoding)."""
        return min(self.kv.length, self.num_prompt) if self.kv is not None else 0

    @property
    def decoding(self) -> bool:
        return len(self.tokens) > self.num_prompt

    def wants_cancel(self) -> bool:
        if self.cancelled:
            return True
        probe = self.request.is_cancelled
        try:
            return bool(probe and probe())
        except Exception:  # noqa: BLE001 - a broken probe must not stop the engine; treat it as gone
            return True

    def commit(self, committed: list[int]) -> bool:
        """Take one step's committed tokens, send the caller its chunk; True when finished."""
        self.tokens.extend(committed)
        if self.grammar is not None:
            self.grammar.advance(committed)
        output = self.output
        output.add(committed)
        if output.finish_reason is None and len(output.token_ids) >= self.room:
            output.finish_reason = "length"
        if output.finish_reason is not None:
            self.stats.num_output_tokens = len(output.token_ids)
            self.done = True
        self.request.sink(output.chunk(self.stats))
        return self.done

    def fail(self, error: BaseException) -> None:
        """End this request with an error (sent once; a sink that raises is not asked again)."""
        if not self.done:
            self.done = True
            try:
                self.request.sink(error)
            except Exception:  # noqa: BLE001 - the caller is gone; nothing left to tell
                pass
