"""The rows of bench's per-category and per-context-length tables: tokens/s per variant and the
numerator's acceptance.

A row's acceptance (`row_acceptance`) comes from the answers' own counts where they count drafts
(the cpu model through Triton, the engine in process); an OpenAI-API answer counts only accepted and
rejected draft tokens, so there it comes from the counters of the phases its requests ran in
(trtspec.bench.phases: each (category, bucket) run alone), and the answers' usage is kept beside
them as a cross-check. Pure: reads records and counter deltas.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Any

from trtspec.bench.metrics import (
    BASELINE,
    SPECULATIVE,
    RequestRecord,
    ratio,
    spec_counts_from_counters,
    spec_summary,
    sum_counts,
)
from trtspec.bench.server_counters import Phase, unsettled_reads


def phase_delta(records: Sequence[Any], phases: Sequence[Phase] | None) -> dict[str, float] | None:
    """The summed counter deltas of the phases `records` ran in (one variant at one concurrency), or
    None unless the records' prompts are exactly those phases' prompts (a row holding part of a phase
    cannot be given its counters)."""
    if not records or not phases:
        return None
    indices = {r.prompt_index for r in records}
    mine = [p for p in phases if indices & set(p.prompt_indices)]
    if {i for p in mine for i in p.prompt_indices} != indices:
        return None
    total: dict[str, float] = {}
    for phase in mine:
        cell = phase.cells.get((records[0].variant, records[0].concurrency))
        if cell is None:
            return None
        for key, value in cell.items():
            total[key] = total.get(key, 0) + value
    return total


def row_acceptance(records: Sequence[Any], phases: Sequence[Phase] | None = None) -> dict[str, Any]:
    """A table row's acceptance (one variant at one concurrency): AL, rate and per-position rates
    from the answers' counts where they count drafts, else from their phases' counters
    (`spec_decode_source`); where both the answers' usage and the counters count draft tokens and
    they differ, `acceptance_disagreement` says by how much. {} without either."""
    answers = sum_counts(records)
    delta = phase_delta(records, phases)
    counters = spec_counts_from_counters(delta)
    counts, source = answers, "responses"
    if counters is not None and (answers is None or not answers.num_drafts):
        counts, source = counters, "phase counters"
    if counts is None:
        return {}
    summary = spec_summary(counts)
    row = {key: summary[key] for key in ("spec_decode_acceptance_length", "spec_decode_acceptance_rate",
                                         "spec_decode_per_position_acceptance_rates")}
    row["spec_decode_source"] = source
    if unsettled := unsettled_reads(delta):
        row["server_counters_unsettled_reads"] = unsettled
    if (problem := disagreement(answers, counters)) is not None:
        row["acceptance_disagreement"] = problem
    return row


def disagreement(answers: Any, counters: Any) -> str | None:
    """Where the answers' usage (accepted and rejected prediction tokens, summed) and the workers'
    counters count different draft tokens, one line saying both; None where they agree or one is missing."""
    if answers is None or counters is None:
        return None
    said = (answers.num_accepted_tokens, answers.num_draft_tokens)
    counted = (counters.num_accepted_tokens, counters.num_draft_tokens)
    if said == counted:
        return None
    return (f"the answers' usage says {said[0]} of {said[1]} draft tokens accepted, the workers' counters "
            f"{counted[0]} of {counted[1]}")


def by_category(records: Iterable[RequestRecord], numerator: str = SPECULATIVE,
                denominator: str = BASELINE, phases: Sequence[Phase] | None = None) -> list[dict[str, Any]]:
    """Per (concurrency, category): per-user tokens/s (sum tokens / sum E2EL) for each variant,
    numerator over denominator (`speedup`), and the numerator's acceptance (`row_acceptance`:
    the answers' counts, or with `phases` the counters of the phases the category ran in)."""
    groups: dict[tuple[int, str], dict[str, list[RequestRecord]]] = {}
    for record in records:
        if record.ok:
            groups.setdefault((record.concurrency, record.category), {}).setdefault(record.variant, []).append(record)
    out = []
    for (concurrency, category), variants in sorted(groups.items()):
        row: dict[str, Any] = {"max_concurrency": concurrency, "category": category}
        for variant, recs in variants.items():
            row[f"{variant}_requests"] = len(recs)
            row[f"{variant}_user_tokens_per_s"] = ratio(sum(r.output_tokens for r in recs), sum(r.e2e_s for r in recs))
        row.update(row_acceptance(variants.get(numerator, []), phases))
        if numerator in variants and denominator in variants:
            row["speedup"] = ratio(row[f"{numerator}_user_tokens_per_s"], row[f"{denominator}_user_tokens_per_s"])
        out.append(row)
    return out
