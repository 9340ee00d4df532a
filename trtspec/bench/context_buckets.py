"""Acceptance by context length: bench's requests cut into prompt-length buckets, and the head's
trained context against the longest one.

Why: acceptance falls with context. An EAGLE-3 head went from acceptance length 2.30 at 2k tokens
to 1.08 at 20k (vllm-project/speculators PR #684), and heads trained with max_position_embeddings
2048 were slower than no speculation on longer prompts (sglang#6783): a figure over all prompts
hides both. Model-free drafters (n-gram, suffix) gain with context instead: a longer prompt holds
more to copy.

Buckets: prompt tokens up to 128, 256, 512, 1k, 2k, ... doubling, the last one ending at the
built max_seq_len (a prompt cannot be longer). Per (concurrency, bucket): the requests, their mean
prompt tokens, each variant's per-user tokens/s (output tokens / E2E latency), their ratio, and the
numerator variant's acceptance length and rate. Records without a prompt length (a server that does
not report it) are left out and counted.

`head_context` compares an EAGLE-3 head's max_position_embeddings (its config.json) with the
longest bucket measured and with max_seq_len: past its trained context a head's RoPE positions
are ones it never saw (NeMo-RL had to raise a SpecForge head's 2048 to 40960 so vLLM would not
clamp it; reference users-and-anchors.md). Pure: reads records and a config dict, returns rows.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any

FIRST_EDGE = 128


def edges(max_seq_len: int | None, longest: int = 0) -> list[int]:
    """Upper bounds of the buckets: 128, 256, ... doubling below max_seq_len, then max_seq_len
    (without one, doubling until the longest prompt fits)."""
    top = max_seq_len or max(longest, FIRST_EDGE)
    bounds, edge = [], FIRST_EDGE
    while edge < top:
        bounds.append(edge)
        edge *= 2
    return bounds + [top if max_seq_len else edge]


def label(lower: int, upper: int) -> str:
    return f"{lower + 1}-{upper}" if lower else f"<={upper}"


def bucket_of(bounds: list[int], prompt_tokens: int) -> int:
    """The index of the bucket a prompt of `prompt_tokens` falls in (the last one past every bound)."""
    return next((i for i, upper in enumerate(bounds) if prompt_tokens <= upper), len(bounds) - 1)


def bucket_label(bounds: list[int], bucket: int) -> str:
    return label(bounds[bucket - 1] if bucket else 0, bounds[bucket])


def by_context_length(records: Iterable[Any], max_seq_len: int | None, numerator: str = "speculative",
                      denominator: str = "baseline", phases: Sequence[Any] | None = None) -> dict[str, Any]:
    """{"max_seq_len", "edges", "rows": [per (concurrency, bucket) with requests], "unmeasured": records
    without a prompt length}. The numerator's acceptance per row is table_rows.row_acceptance's:
    the answers' counts, or with `phases` (an OpenAI-API target) the counters of the bucket's phases."""
    from trtspec.bench.table_rows import row_acceptance

    ok = [r for r in records if r.ok]
    measured = [r for r in ok if r.prompt_tokens is not None]
    bounds = edges(max_seq_len, max((r.prompt_tokens for r in measured), default=0))
    groups: dict[tuple[int, int], dict[str, list[Any]]] = {}
    for record in measured:
        bucket = bucket_of(bounds, record.prompt_tokens)
        groups.setdefault((record.concurrency, bucket), {}).setdefault(record.variant, []).append(record)
    rows = []
    for (concurrency, bucket), variants in sorted(groups.items()):
        lower = bounds[bucket - 1] if bucket else 0
        everyone = [r for recs in variants.values() for r in recs]
        row: dict[str, Any] = {"max_concurrency": concurrency, "bucket": bucket_label(bounds, bucket),
                               "min_prompt_tokens": lower + 1, "max_prompt_tokens": bounds[bucket],
                               "mean_prompt_tokens": sum(r.prompt_tokens for r in everyone) / len(everyone)}
        for variant, recs in variants.items():
            row[f"{variant}_requests"] = len(recs)
            seconds = sum(r.e2e_s for r in recs)
            row[f"{variant}_user_tokens_per_s"] = sum(r.output_tokens for r in recs) / seconds if seconds else None
        row.update(row_acceptance(variants.get(numerator, []), phases))
        top, bottom = row.get(f"{numerator}_user_tokens_per_s"), row.get(f"{denominator}_user_tokens_per_s")
        if top and bottom:
            row["speedup"] = top / bottom
        rows.append(row)
    return {"max_seq_len": max_seq_len, "edges": bounds, "rows": rows, "unmeasured": len(ok) - len(measured)}


def acceptance_by_length(prompt_tokens: list[int], stats: list[Any], max_seq_len: int | None = None
                         ) -> list[dict[str, Any]]:
    """Per bucket of prompt length: requests and mean acceptance length (1 + accepted / drafts) of
    runtime GenerationStats (convert's head profile: one request at a time, greedy)."""
    bounds = edges(max_seq_len, max(prompt_tokens, default=0))
    rows: dict[int, list[Any]] = {}
    for length, stat in zip(prompt_tokens, stats, strict=True):
        rows.setdefault(bucket_of(bounds, length), []).append(stat)
    out = []
    for bucket, group in sorted(rows.items()):
        drafts = sum(s.num_drafts for s in group)
        accepted = sum(s.num_accepted_tokens for s in group)
        out.append({"bucket": bucket_label(bounds, bucket), "requests": len(group),
                    "mean_acceptance_length": round(1 + accepted / drafts, 4) if drafts else None})
    return out


def head_context(head_config: dict[str, Any] | None, longest_prompt: int, max_seq_len: int | None
                 ) -> dict[str, Any] | None:
    """The head's max_position_embeddings against the longest bucket and max_seq_len, with a
    warning where the head was trained on a shorter context; None without a head config."""
    if not head_config or not head_config.get("max_position_embeddings"):
        return None
    trained = int(head_config["max_position_embeddings"])
    reach = max(max_seq_len or 0, longest_prompt)
    found: dict[str, Any] = {"max_position_embeddings": trained, "longest_prompt_tokens": longest_prompt,
                             "max_seq_len": max_seq_len}
    if trained < reach:
        what = f"max_seq_len {max_seq_len}" if max_seq_len and max_seq_len >= longest_prompt else \
            f"the longest prompt ({longest_prompt} tokens)"
        found["warning"] = (f"the EAGLE-3 head's max_position_embeddings is {trained}, below {what}: past "
                            f"{trained} tokens its positions are ones it never saw and acceptance falls "
                            f"(sglang#6783); train it on longer sequences or build with max_seq_len {trained}")
    return found


def head_config(head_dir: Path | None) -> dict[str, Any] | None:
    """The head's config.json as a dict, or None where there is none."""
    path = Path(head_dir) / "config.json" if head_dir is not None else None
    if path is None or not path.is_file():
        return None
    return json.loads(path.read_text())


def positions_text(rates: list[float] | None) -> str:
    """Per-position acceptance as percentages, first draft position first ("81 52 30"); "-" without."""
    return " ".join(f"{100 * rate:.0f}" for rate in rates) if rates else "-"


def table_rows(section: dict[str, Any], numerator: str, denominator: str) -> list[list[str]]:
    """The terminal table's cells, one list per row (conc, bucket, requests, mean prompt, tok/s, ratio, AL,
    accept %, accept % per position)."""
    def fmt(value: Any, digits: int = 1, suffix: str = "") -> str:
        return "-" if value is None or value != value else f"{value:.{digits}f}{suffix}"  # None or NaN

    return [[str(r["max_concurrency"]), r["bucket"], str(r.get(f"{numerator}_requests", 0)),
             fmt(r["mean_prompt_tokens"], 0), fmt(r.get(f"{numerator}_user_tokens_per_s")),
             fmt(r.get(f"{denominator}_user_tokens_per_s")), fmt(r.get("speedup"), 2, "x"),
             fmt(r.get("spec_decode_acceptance_length"), 2), fmt(r.get("spec_decode_acceptance_rate")),
             positions_text(r.get("spec_decode_per_position_acceptance_rates"))]
            for r in section["rows"]]
