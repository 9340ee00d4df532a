"""The EAGLE-3 work files before training: self-distilled rows, draft vocabulary, target features.

Every phase is shared out over the processes of a data-parallel run and cached in the work
directory under a key of everything it depends on, so a re-run (or a resume with another number
of processes) reuses what is there:

  sequences.jsonl (+ .key.json)   the rows; each rank generates the samples i = rank mod world
                                  into shards/rank-NNNNN.jsonl, rank 0 merges them in order
  features/                       the FeatureStore; each rank computes a contiguous block of rows

Rank 0 writes every shared file; the other ranks wait at a barrier and read it.
"""

from __future__ import annotations

import hashlib
import json
import shutil
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from trtspec import artifacts
from trtspec.convert.eagle3 import data as eagle3_data
from trtspec.convert.eagle3 import features as eagle3_features
from trtspec.convert.eagle3 import store as eagle3_store
from trtspec.convert.eagle3.distributed import Dist
from trtspec.convert.eagle3.sources import DataSource
from trtspec.convert.progress import Phase, Reporter


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
              dist: Dist, report: Reporter | None) -> eagle3_store.RowStats:
    """Generate (or reuse) the self-distilled rows; every rank returns their stats."""
    cached = files.rows_key.exists() and artifacts.read_json(files.rows_key) == _normal(data_key)
    if not dist.broadcast(cached):
        # 1. each rank answers its share of the samples, in process or through a server
        share = range(dist.rank, settings.num_samples, dist.world_size)
        phase = Phase(report, "answers", total=len(share), unit="answers")
        samples = eagle3_data.iter_samples(source, settings.num_samples, rank=dist.rank, world_size=dist.world_size)
        if settings.generate_url:
            from trtspec.convert.eagle3.remote import generate_rows_remote

            rows = generate_rows_remote(settings.generate_url, tokenizer, samples, answer_tokens=settings.answer_tokens,
                                        max_context=settings.seq_len, concurrency=settings.generate_concurrency,
                                        phase=phase)
        else:
            rows = eagle3_data.generate_rows(model, tokenizer, samples, answer_tokens=settings.answer_tokens,
                                             max_context=settings.seq_len, batch_size=settings.generate_batch_size,
                                             phase=phase)
        files.shard(dist.rank).parent.mkdir(parents=True, exist_ok=True)
        eagle3_store.write_rows(files.shard(dist.rank), rows)
        dist.barrier()
        # 2. rank 0 merges the shards into sample order and records the key
        if dist.is_main:
            shards = [files.shard(rank) for rank in range(dist.world_size)]
            eagle3_store.merge_shards(shards, files.rows)
            artifacts.write_json(files.rows_key, data_key)
            # The whole folder: a killed run with more processes may have left shards of its own.
            shutil.rmtree(shards[0].parent)
        dist.barrier()
    return dist.broadcast(eagle3_store.scan_rows(files.rows) if dist.is_main else None)


def draft_vocabulary(files: WorkFiles, vocab_size: int, draft_vocab_size: int | None, *, dist: Dist):
    """(draft vocab size or None, kept ids, d2t, coverage) counted by rank 0 over the rows."""
    if not draft_vocab_size or draft_vocab_size >= vocab_size:
        return None, None, None, 1.0
    result = None
    if dist.is_main:
        counts = eagle3_data.count_tokens((ids for _, ids in eagle3_store.read_rows(files.rows)), vocab_size)
        result = eagle3_data.build_draft_vocab(counts, vocab_size, draft_vocab_size)
    kept, d2t, coverage = dist.broadcast(result)
    return draft_vocab_size, kept, d2t, coverage


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
