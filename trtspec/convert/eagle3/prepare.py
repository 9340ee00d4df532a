"""The EAGLE-3 work files before training: self-distilled rows, draft vocabulary, target features.

Every phase is shared out over the processes of a data-parallel run and cached in the work
directory under a key of everything it depends on, so a re-run (or a resume with another number
of processes) reuses what is there:

  sequences.jsonl (+ .key.json)   the rows, samples 0..count-1; each rank generates its share of
                                  the missing ones into shards/rank-NNNNN.jsonl, rank 0 appends them
                                  in order (a run that wants more samples adds to the rows there,
                                  one that wants fewer reads the first ones); how many a run makes
                                  is planned from the time budget (eagle3.budget)
  features/                       the FeatureStore; each rank computes a contiguous block of rows

Rank 0 writes every shared file; the other ranks wait at a barrier and read it.
"""

from __future__ import annotations

import hashlib
import json
import shutil
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from trtspec import artifacts
from trtspec.convert.eagle3 import budget, engine_answers
from trtspec.convert.eagle3 import data as eagle3_data
from trtspec.convert.eagle3 import features as eagle3_features
from trtspec.convert.eagle3 import store as eagle3_store
from trtspec.convert.eagle3.distributed import Dist
from trtspec.convert.eagle3.sources import DataSource
from trtspec.convert.progress import Phase, Reporter, note


@dataclass(frozen=True)
class WorkFiles:
    root: Path

    @property
    def rows(self) -> Path:
        return self.root / "sequences.jsonl"

    @property
    def rows_key(self) -> Path:
        return self.root / "sequences.key.json"

    def shard(self, rank: int) -> Path:
        return self.root / "shards" / f"rank-{rank:05d}.jsonl"

    @property
    def features(self) -> Path:
        return self.root / "features"


def make_rows(settings, model, tokenizer, source: DataSource, files: WorkFiles, data_key: dict[str, Any], *,
              dist: Dist, report: Reporter | None, budget_s: float, started: float,
              held_out_tokens: int) -> tuple[eagle3_store.RowStats, budget.BudgetPlan]:
    """Make (or reuse) the self-distilled rows, as many as the time budget allows (`started`: the
    budget's clock; `held_out_tokens`: what the acceptance report will generate); every rank
    returns their stats and the plan (see eagle3.budget)."""
    # 1. the rows already on disk, then the first missing answers, timed
    on_disk = rows_on_disk(files, data_key, dist=dist)
    probe = budget.probe_size(settings.num_samples, on_disk, dist.world_size)
    answer_s = 0.0
    if probe:
        clock = time.monotonic()
        extend_rows(settings, model, tokenizer, source, files, data_key, start=on_disk, stop=on_disk + probe,
                    dist=dist, report=report)
        answer_s, on_disk = (time.monotonic() - clock) / probe, on_disk + probe
    # 2. rank 0 times the target's forwards and plans; every rank follows its plan
    plan = None
    if dist.is_main:
        feature_s, step_s = eagle3_features.time_forwards(
            model, [ids for _, ids in eagle3_store.read_rows(files.rows, budget.PROBE_ROWS)],
            seq_len=settings.seq_len, pad_id=tokenizer.pad_token_id)
        rates = budget.Rates(answer_s=answer_s, feature_s=feature_s / dist.world_size,
                             finish_s=budget.finish_estimate(held_out_tokens, step_s))
        plan = budget.plan_budget(budget_s, time.monotonic() - started, requested=settings.num_samples,
                                  on_disk=on_disk, rates=rates, min_samples=max(settings.batch_size, probe))
    plan = dist.broadcast(plan)
    note(report, plan.line())
    # 3. the rest of the answers
    if plan.samples > on_disk:
        extend_rows(settings, model, tokenizer, source, files, data_key, start=on_disk, stop=plan.samples,
                    dist=dist, report=report, done=len(range(dist.rank, probe, dist.world_size)))
    # 4. the finish estimate once more: one timed forward under a passing load at the start had it
    #    16x too long (8.2 min for a 0.5 min report, so training got 0.8 of 8 minutes); load only
    #    slows a forward, so the faster of the two timings is the better estimate
    if dist.is_main:
        import torch

        row = next(iter(eagle3_store.read_rows(files.rows, 1)))[1][:16]
        step_s = eagle3_features.time_one_row(model, torch.tensor([row], device=model.device))
        plan = budget.with_finish(plan, budget.finish_estimate(held_out_tokens, step_s))
    plan = dist.broadcast(plan)
    return dist.broadcast(eagle3_store.scan_rows(files.rows, plan.samples) if dist.is_main else None), plan


def rows_on_disk(files: WorkFiles, data_key: dict[str, Any], *, dist: Dist) -> int:
    """How many rows of this data are on disk: samples 0..count-1 of the same target, data,
    answer length and seq_len (a run with fewer samples reads the first rows, one with more adds to them)."""
    count = 0
    if dist.is_main and files.rows.exists() and files.rows_key.exists():
        key = artifacts.read_json(files.rows_key)
        if isinstance(key, dict) and key.get("data") == _normal(data_key):
            count = int(key.get("count", 0))
    return dist.broadcast(count)


def answers_made_by(settings, model) -> str:
    """Who makes the answers (the report's data.generated_by): the server, or how in process."""
    if settings.generate_url:
        return settings.generate_url
    if engine_answers.usable(model):
        return f"in-process target (trtspec cpu engine, {settings.generate_batch_size} in flight)"
    return f"in-process target (transformers generate, batches of {settings.generate_batch_size})"


def extend_rows(settings, model, tokenizer, source: DataSource, files: WorkFiles, data_key: dict[str, Any], *,
                start: int, stop: int, dist: Dist, report: Reporter | None, done: int = 0) -> None:
    """Make samples start..stop-1 and append them to the first `start` rows on disk (`done`: this
    rank's answers already counted by the phase's bar)."""
    # 1. each rank answers its share of the samples, in process or through a server
    share = range(start + dist.rank, stop, dist.world_size)
    phase = Phase(report, "answers", total=done + len(share), unit="answers", completed=done)
    samples = eagle3_data.iter_samples(source, stop, rank=dist.rank, world_size=dist.world_size, start=start)
    if settings.generate_url:
        from trtspec.convert.eagle3.remote import generate_rows_remote

        rows = generate_rows_remote(settings.generate_url, tokenizer, samples, answer_tokens=settings.answer_tokens,
                                    max_context=settings.seq_len, concurrency=settings.generate_concurrency,
                                    phase=phase)
    elif engine_answers.usable(model):
        rows = engine_answers.generate_rows_engine(model, tokenizer, samples, answer_tokens=settings.answer_tokens,
                                                   max_context=settings.seq_len,
                                                   in_flight=settings.generate_batch_size, phase=phase)
    else:
        rows = eagle3_data.generate_rows(model, tokenizer, samples, answer_tokens=settings.answer_tokens,
                                         max_context=settings.seq_len, batch_size=settings.generate_batch_size,
                                         phase=phase)
    files.shard(dist.rank).parent.mkdir(parents=True, exist_ok=True)
    eagle3_store.write_rows(files.shard(dist.rank), rows)
    dist.barrier()
    # 2. rank 0 appends the shards, in sample order, to the rows kept, and records the key
    if dist.is_main:
        shards = [files.shard(rank) for rank in range(dist.world_size)]
        if not start:
            files.rows_key.unlink(missing_ok=True)  # the rows file is about to hold other rows
        eagle3_store.merge_shards(shards, files.rows, head=files.rows if start else None, head_rows=start)
        artifacts.write_json(files.rows_key, {"data": data_key, "count": stop})
        # The whole folder: a killed run with more processes may have left shards of its own.
        shutil.rmtree(shards[0].parent)
    dist.barrier()


@dataclass(frozen=True)
class DraftVocab:
    size: int | None      # None: the target's whole vocabulary
    kept: Any             # [size] target ids kept, sorted (None with the whole vocabulary)
    d2t: Any              # [size] target id = draft id + d2t[draft id]
    coverage: float       # share of the answer tokens the kept ids cover
    answer_tokens: int    # answer tokens counted
    chosen_by: str        # "coverage" (draft_vocab_size empty) or "spec"

    def line(self, vocab_size: int) -> str:
        size = self.size or vocab_size
        why = (f"the fewest tokens covering {eagle3_data.DRAFT_VOCAB_COVERAGE:.0%} of them, in multiples of "
               f"{eagle3_data.DRAFT_VOCAB_MULTIPLE}, at least {eagle3_data.DRAFT_VOCAB_FLOOR}"
               if self.chosen_by == "coverage" else "speculative.eagle3.draft_vocab_size")
        return (f"draft vocabulary: {size:,} of {vocab_size:,} tokens, {self.coverage:.2%} of the "
                f"{self.answer_tokens:,} answer tokens ({why})")


def draft_vocabulary(files: WorkFiles, vocab_size: int, draft_vocab_size: int | None, *, rows: int,
                     dist: Dist) -> DraftVocab:
    """The draft vocabulary, counted by rank 0 over the answers of the first `rows` rows: the
    spec's size, or without one the size that covers DRAFT_VOCAB_COVERAGE of the answer tokens."""
    result = None
    if dist.is_main:
        counts = eagle3_data.count_tokens(eagle3_store.read_answers(files.rows, rows), vocab_size)
        chosen_by = "spec" if draft_vocab_size else "coverage"
        size = min(vocab_size, draft_vocab_size or eagle3_data.coverage_vocab_size(counts, vocab_size))
        kept, d2t, coverage = eagle3_data.build_draft_vocab(counts, vocab_size, size)
        if size >= vocab_size:
            kept = d2t = None
        result = DraftVocab(None if size >= vocab_size else size, kept, d2t, coverage, int(counts.sum()), chosen_by)
    return dist.broadcast(result)


def make_features(model, tokenizer, files: WorkFiles, stats: eagle3_store.RowStats, feature_key: dict[str, Any],
                  *, seq_len: int, dist: Dist, report: Reporter | None) -> eagle3_store.FeatureStore:
    """The FeatureStore for these rows (computed by every rank on its block, or reused)."""
    length = min(seq_len, stats.longest)
    existing = eagle3_store.FeatureStore.open(files.features) if dist.is_main else None
    reuse = dist.broadcast(bool(existing and existing.matches(feature_key)))
    if existing:
        existing.close()
    if not reuse:
        if dist.is_main:
            eagle3_store.FeatureStore.create(files.features, rows=stats.count, key=feature_key,
                                             arrays=eagle3_features.feature_arrays(model, length))
        dist.barrier()
        store = eagle3_store.FeatureStore.open(files.features)
        start, stop = eagle3_features.rank_block(stats.count, dist.rank, dist.world_size)
        phase = Phase(report, "features", total=stop - start, unit="rows")
        eagle3_features.fill_store(model, store, eagle3_store.read_rows(files.rows), start=start, stop=stop,
                                   length=length, pad_id=tokenizer.pad_token_id, phase=phase)
        store.close()
        dist.barrier()
        if dist.is_main:
            eagle3_store.FeatureStore.open(files.features).mark_complete()
        dist.barrier()
    return eagle3_store.FeatureStore.open(files.features)


def ids_sha256(ids) -> str | None:
    return None if ids is None else hashlib.sha256(json.dumps(ids.tolist()).encode()).hexdigest()


def _normal(data: Any) -> Any:
    return json.loads(json.dumps(data))
