"""Speculative-decoding statistics, per request and cumulative.

Vocabulary (as vLLM defines it): a *draft* is one proposal of `k >= 1` tokens; the verifier
*accepts* a prefix of it. acceptance_rate = accepted / draft tokens; mean acceptance length =
1 + accepted / drafts (the tokens committed per target pass while speculating, bonus included).
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any


@dataclass
class GenerationStats:
    """Counters for one request (or, merged, for many). Times are wall-clock seconds."""

    num_drafts: int = 0
    num_draft_tokens: int = 0
    num_accepted_tokens: int = 0
    num_verified_tokens: int = 0  # draft tokens the target checked: a chain's k, a tree's nodes
    accepted_per_position: list[int] = field(default_factory=list)
    draft_time_s: float = 0.0
    verify_time_s: float = 0.0
    num_target_passes: int = 0
    num_output_tokens: int = 0
    fallback: bool = False
    num_grammar_cut_tokens: int = 0  # draft tokens (tree nodes) a grammar refused before verification

    @property
    def acceptance_rate(self) -> float:
        return self.num_accepted_tokens / self.num_draft_tokens if self.num_draft_tokens else 0.0

    @property
    def mean_acceptance_length(self) -> float:
        return 1.0 + self.num_accepted_tokens / self.num_drafts if self.num_drafts else 1.0

    def record_draft(self, num_draft_tokens: int, num_accepted: int, num_verified: int | None = None) -> None:
        """Count one verified draft of `num_draft_tokens` of which the first `num_accepted` passed
        (a tree: its depth and its accepted path; `num_verified` its nodes)."""
        self.num_drafts += 1
        self.num_verified_tokens += num_draft_tokens if num_verified is None else num_verified
        self.num_draft_tokens += num_draft_tokens
        self.num_accepted_tokens += num_accepted
        if len(self.accepted_per_position) < num_draft_tokens:
            self.accepted_per_position.extend([0] * (num_draft_tokens - len(self.accepted_per_position)))
        for position in range(num_accepted):
            self.accepted_per_position[position] += 1

    def merge(self, other: GenerationStats) -> None:
        """Add `other`'s counters into this one (for cumulative statistics)."""
        self.num_drafts += other.num_drafts
        self.num_draft_tokens += other.num_draft_tokens
        self.num_accepted_tokens += other.num_accepted_tokens
        self.num_verified_tokens += other.num_verified_tokens
        if len(self.accepted_per_position) < len(other.accepted_per_position):
            self.accepted_per_position.extend(
                [0] * (len(other.accepted_per_position) - len(self.accepted_per_position)))
        for position, count in enumerate(other.accepted_per_position):
            self.accepted_per_position[position] += count
        self.draft_time_s += other.draft_time_s
        self.verify_time_s += other.verify_time_s
        self.num_target_passes += other.num_target_passes
        self.num_output_tokens += other.num_output_tokens
        self.fallback = self.fallback or other.fallback
        self.num_grammar_cut_tokens += other.num_grammar_cut_tokens

    def to_dict(self) -> dict[str, Any]:
        data = asdict(self)
        data["acceptance_rate"] = self.acceptance_rate
        data["mean_acceptance_length"] = self.mean_acceptance_length
        return data


@dataclass
class SchedulerStats:
    """A snapshot for metrics. Counters only grow; the rest is the state now."""

    running: int = 0
    waiting: int = 0
    kv_blocks_used: int = 0
    kv_blocks_total: int = 0
    last_batch_size: int = 0     # sequences in the last step (decoding and prefilling)
    last_num_decoding: int = 0   # of which decoding
    last_draft_len: int = 0      # the longest draft the last step asked for
    last_prefill_tokens: int = 0  # prompt tokens the last step prefilled (its chunks)
    num_steps: int = 0
    num_refused: int = 0
    num_failed: int = 0
    num_cancelled: int = 0
    num_finished: int = 0
    # prompt tokens of admitted requests, and those copied from the shared prompt start (prefix_cache)
    prefix_cache_queries: int = 0
    prefix_cache_hits: int = 0
    # steps by the draft the load policy chose: off, chain:K, tree:TOPK,DEPTH,NODES, tree:static:NODES
    # (probe: prefix: one sequence drafted it); steps without a speculating sequence are not counted
    draft_shapes: dict[str, int] = field(default_factory=dict)
    # the loop's thread count now, how often other processes on its cores made it step on fewer,
    # and the steps it ran so (trtspec.runtime.cores.contention; 0 threads: no step yet)
    engine_threads: int = 0
    engine_thread_fallbacks: int = 0
    engine_steps_on_fewer_threads: int = 0
