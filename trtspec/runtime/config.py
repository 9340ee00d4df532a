"""One frozen description of how an Engine runs: what the spec's build and speculative sections say.

`EngineConfig` replaces a long keyword list: loading fills it from engine.json (or keyword
options), benchmarks and `tune` derive variants with `dataclasses.replace(config, ...)`, and the
engine never changes it. Model weights, the tokenizer and the drafter are not settings; they are
passed to the Engine beside its config.
"""

from __future__ import annotations

from dataclasses import dataclass, fields
from typing import Any


@dataclass(frozen=True)
class EngineConfig:
    """Settings of one Engine (frozen; use dataclasses.replace for a variant)."""

    mode: str = "none"
    """Speculative mode of the drafter given to the engine: eagle3 | draft-target | ngram | none."""
    name: str | None = None
    """Shown in benchmarks and logs; defaults to the mode."""
    max_draft_len: int = 4
    """Most draft tokens per sequence and step (a tree counts its nodes)."""
    max_input_len: int = 1024
    """Longest prompt in tokens."""
    max_seq_len: int = 2048
    """Longest prompt plus output in tokens."""
    dynamic_draft: bool = False
    """Grow a sequence's draft after full acceptance, shrink it after a rejection."""
    confidence_threshold: float = 0.0
    """Drafters stop when their probability of their own token drops below this (0: never)."""
    acceptance_floor: float = 0.0
    """Decode plainly while a sequence's measured acceptance stays below this rate (0: never)."""
    eagle_choices: tuple[tuple[int, ...], ...] | None = None
    """Static EAGLE-3 draft tree as index paths (trtspec.runtime.verify.tree); None drafts chains."""
    tree: tuple[int, int, int] | None = None
    """Dynamic (EAGLE-2) draft tree as (topk, depth, num_draft_tokens) (trtspec.runtime.verify.tree.TreeShape);
    None: eagle_choices or chains."""
    tree_min_path_prob: float = 0.0
    """Every dynamic tree (configured or from the schedule) verifies only nodes whose path's draft
    probability is at least this (TreeShape.min_path_prob); 0: all num_draft_tokens."""
    max_batch_size: int = 8
    """Most sequences in one engine step (running at once)."""
    max_num_tokens: int = 8192
    """Most tokens in one target forward: every running sequence's [pending] + draft, then prompt chunks."""
    max_prefill_tokens: int | None = None
    """Most prompt tokens one step prefills across the batch (chunks, in arrival order), apart from
    the decode and draft rows, which it never cuts; None: whatever max_num_tokens leaves."""
    tokens_per_block: int = 32
    """Paged KV cache block size in tokens."""
    kv_cache_max_tokens: int | None = None
    """Token slots in the KV pool (rounded up to whole blocks); None: max_batch_size sequences of
    max_seq_len plus the widest draft each."""
    max_queue_size: int = 64
    """Requests that may wait for a batch slot or KV blocks; beyond, new ones are refused at once."""
    kv_cache_reuse: bool = True
    """Prefill the prompt start every chat request shares (the chat template's) once and copy its
    keys and values into each new sequence (trtspec.runtime.cache.shared_prefix), and keep prompts after
    their prefill for later prompts that begin the same way (trtspec.runtime.cache.prefix_reuse); exact,
    so on by default."""
    kv_cache_reuse_mib: int = 256
    """Memory for the prompts kept for reuse, MiB (least recently used out first); 0 keeps only
    the shared chat start."""
    adapt_threads: bool = True
    """Step on fewer threads while other processes compute on the engine's cores, and on all again
    once they are free (trtspec.runtime.cores.contention); only where the target's numbers do not depend
    on the thread count, so never a changed token."""
    draft_len_schedule: tuple[tuple[int, int], ...] | None = None
    """(batch size, draft length) pairs, ascending: from that many decoding sequences on, draft that
    many tokens (0: speculation off); EAGLE-3 rows may be (batch size, topk, depth, num_draft_tokens):
    a dynamic tree (trtspec.runtime.policy.plan). None: the cost-model default (trtspec.runtime.policy.per_request)."""

    @property
    def label(self) -> str:
        return self.name or self.mode

    @classmethod
    def from_options(cls, **options: Any) -> EngineConfig:
        """A config from keyword options (engine.json runtime keys, from_checkpoints kwargs);
        unknown keys raise TypeError naming them, as a constructor would."""
        known = {f.name for f in fields(cls)}
        unknown = sorted(set(options) - known)
        if unknown:
            raise TypeError(f"unknown engine options: {', '.join(unknown)}")
        choices = options.get("eagle_choices")
        if choices is not None:
            options["eagle_choices"] = tuple(tuple(int(i) for i in path) for path in choices) or None
        if options.get("tree") is not None:
            tree = options["tree"]
            if isinstance(tree, dict):
                tree = (tree["topk"], tree["depth"], tree["num_draft_tokens"])
            options["tree"] = tuple(int(v) for v in tree)
        schedule = options.get("draft_len_schedule")
        if schedule is not None:
            options["draft_len_schedule"] = tuple(sorted(tuple(int(v) for v in row) for row in schedule)) or None
        return cls(**options)
