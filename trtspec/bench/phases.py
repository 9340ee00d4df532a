"""Acceptance per prompt category and per context-length bucket where the answers do not count drafts.

Why: an OpenAI-API answer (a Dynamo stack, `bench --openai-url`) says at most how many draft
tokens were accepted and rejected (usage.completion_tokens_details), never how many drafts (target
passes that verified a draft) or which positions passed: those are only in the workers' counters,
which add up every request they served. A counter delta belongs to some prompts alone only if they
alone ran while it grew. So bench runs each (category, context-length bucket) of its prompts as a
phase of its own, one after the other, and each phase's cells are diffed as every cell is
(trtspec.bench.load.run_variants: a read waits for the workers to settle); a category's acceptance
is then its phases' deltas summed, a bucket's likewise (table_rows.row_acceptance). The
Triton and in-process paths need none of this: their answers carry num_drafts.

Order: the warm-up; each prompt's length, to put it in its bucket (trtspec.bench.context_buckets);
a counter read; every phase's whole schedule (each concurrency and repeat); a last read. The
lengths are counted here, without a request, where the target has the model's tokenizer
(`count_prompt_tokens`: the built engine's tokenizer, the chat template applied as the server
applies it), and bench.json's `prompt_lengths` sets them against the prompt_tokens the server
answered; only a target without one gets a probe, each prompt once for one token, whose answer gives
its prompt tokens as the server counts them. The two reads give the run's delta, which the phases' deltas must add up to
(server_counters.phases_add_up: a no there means another client, or a read that found the server
busy). Costs: at concurrency c a phase of fewer than 2c prompts cycles them so c are in flight, so a
phased run sends more requests than one over all the prompts; a probe (no tokenizer here) prefills
every prompt once before the first cell (a server that keeps prompts serves their first cell from
cache, as it does every later one), which the report says.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any

from trtspec.bench.load import BenchRun, measure_request, run_variants, warm_up
from trtspec.bench.server_counters import Phase, diff_counters
from trtspec.prompts import Prompt


@dataclass
class PromptLengths:
    """Each prompt's tokens (index -> count; None: unknown) and how they were had."""

    tokens: dict[int, int | None]
    source: str
    probed: bool  # one-token requests: every prompt prefilled before the first cell

    def checked(self, records: Sequence[Any]) -> dict[str, Any]:
        """bench.json's `prompt_lengths`: the source, and the counts set against the prompt_tokens
        the server answered (the first answer of each prompt; a probe's are the server's own)."""
        server: dict[int, int] = {}
        for record in records:
            if record.error is None and record.prompt_tokens is not None:
                server.setdefault(record.prompt_index, int(record.prompt_tokens))
        differ = [{"prompt_index": i, "counted": n, "server": server[i]} for i, n in sorted(self.tokens.items())
                  if i in server and n != server[i]]
        return {"source": self.source, "probe": self.probed, "prompts": len(self.tokens),
                "checked_against_server": sum(1 for i in self.tokens if i in server),
                "num_differ_from_server": len(differ), "differ_from_server": differ[:10]}


@dataclass
class PhasedRun(BenchRun):
    phases: list[Phase] = field(default_factory=list)
    prompt_lengths: PromptLengths | None = None


def wanted(variants: dict[str, tuple[Any, bool]]) -> bool:
    """Whether a run over these targets needs phases: a target whose answers do not count drafts
    (`acceptance_by_phase`, the OpenAI target when it reads its workers' counters)."""
    return any(getattr(target, "acceptance_by_phase", False) for target, _ in variants.values())


def plan(prompts: Sequence[Prompt], prompt_tokens: dict[int, int | None], max_seq_len: int | None) -> list[Phase]:
    """One phase per (category, bucket), in the order the prompts first name them; a prompt whose
    length is unknown goes with its category's other such prompts (bucket None). Pure."""
    from trtspec.bench.context_buckets import bucket_label, bucket_of, edges

    bounds = edges(max_seq_len, max((n for n in prompt_tokens.values() if n is not None), default=0))
    groups: dict[tuple[str, str | None], list[int]] = {}
    for prompt in prompts:
        length = prompt_tokens.get(prompt.index)
        bucket = bucket_label(bounds, bucket_of(bounds, length)) if length is not None else None
        groups.setdefault((prompt.category, bucket), []).append(prompt.index)
    return [Phase(category, bucket, tuple(indices)) for (category, bucket), indices in groups.items()]


PROBED = ("a one-token request per prompt (its usage.prompt_tokens), sent before the first cell: no tokenizer "
          "for the model here")


def prompt_lengths(target: Any, speculative: bool, prompts: Sequence[Prompt], temperature: float) -> PromptLengths:
    """Each prompt's tokens: counted by the target's `count_prompt_tokens` (no request) where it has
    one, else as the server counts them, one one-token request per prompt, sent as the warm-up
    sends (one at a time per worker)."""
    count = getattr(target, "count_prompt_tokens", None)
    if count is not None:
        return PromptLengths({prompt.index: int(count(prompt.text)) for prompt in prompts},
                             str(getattr(target, "prompt_tokens_source", "") or "counted here"), probed=False)
    workers = max(1, int(getattr(target, "warmup_requests", 1)))
    with ThreadPoolExecutor(max_workers=workers) as pool:
        records = list(pool.map(lambda prompt: measure_request(target, prompt, "probe", speculative, 0, -1, 1,
                                                               temperature), prompts))
    return PromptLengths({prompt.index: record.prompt_tokens for prompt, record in zip(prompts, records, strict=True)},
                         PROBED, probed=True)


def run_phased(variants: dict[str, tuple[Any, bool]], prompts: Sequence[Prompt], concurrencies: Sequence[int], *,
               max_tokens: int, max_seq_len: int | None = None, repeats: int = 1, temperature: float = 0.0,
               requests_per_slot: int = 2, on_request: Callable | None = None) -> PhasedRun:
    """run_variants over each phase in turn (see the module docstring), merged into one run whose
    `phases` carry each phase's counter deltas; a target without counters runs unphased."""
    counted, speculative = next(iter(variants.values()))
    options: dict[str, Any] = {"max_tokens": max_tokens, "repeats": repeats, "temperature": temperature,
               "requests_per_slot": requests_per_slot, "on_request": on_request}
    if counted.counters() is None:  # no counters, nothing to diff: one run over every prompt
        plain = run_variants(variants, prompts, concurrencies, **options)
        return PhasedRun(plain.records, plain.durations, plain.counters_delta, plain.cell_counters)
    warm_up(variants, prompts, max_tokens, temperature)
    lengths = prompt_lengths(counted, speculative, prompts, temperature)
    phases = plan(prompts, lengths.tokens, max_seq_len)
    by_index = {prompt.index: prompt for prompt in prompts}
    run = PhasedRun(phases=phases, prompt_lengths=lengths)
    before = counted.counters()
    for phase in phases:
        part = run_variants(variants, [by_index[i] for i in phase.prompt_indices], concurrencies, warmup=False,
                            **options)
        phase.cells, phase.delta = part.cell_counters, part.counters_delta
        run.records.extend(part.records)
        for block, seconds in part.durations.items():
            run.durations[block] = run.durations.get(block, 0.0) + seconds
        for key, delta in part.cell_counters.items():
            cell = run.cell_counters.setdefault(key, {})
            for name, value in delta.items():
                cell[name] = cell.get(name, 0) + value
    after = counted.counters()
    if before is not None and after is not None:
        run.counters_delta = diff_counters(before, after)
    return run
