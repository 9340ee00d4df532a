"""`speculative.suffix`: suffix decoding's settings (mode suffix; trtspec.runtime.drafters.suffix;
reference heads-and-methods.md section 7). Names and defaults are vLLM's suffix_decoding_* fields."""

from __future__ import annotations

from pydantic import Field

from trtspec.spec.section import Section


class SuffixSpec(Section):
    max_draft_len: int = Field(24, ge=1, le=64)
    """mode suffix: most draft tokens per step, its own cap in place of speculative.max_draft_len
    (the engine, TensorRT-LLM's SADecodingConfig max_draft_len and `bench --compare-modes` take it).
    A draft is as long as its match supports (factor, offset), so a high cap costs nothing where
    matches are short and lets long copies run on: upstream's default is the tree depth, 24 (vLLM
    speculative.py: suffix num_speculative_tokens defaults to suffix_decoding_max_tree_depth, "a
    maximum limit"; Arctic Inference sets it to suffix_cache_max_depth). On SmolLM2's copy-heavy
    edit prompts the cap 8 tied prompt lookup and 16 led it (docs/BENCHMARKS-log.md)."""
    depth: int = Field(24, ge=2, le=256)
    """mode suffix: the longest substring the suffix trees count, in tokens (vLLM
    suffix_decoding_max_tree_depth; matches reach depth - 1 tokens). Each token of a prompt or
    response adds up to this many trie nodes."""
    factor: float = Field(1.0, gt=0.0, le=64.0)
    """A draft is at most factor x the match length + offset tokens (and max_draft_len):
    long matches draft long (vLLM suffix_decoding_max_spec_factor)."""
    offset: float = Field(0.0, ge=0.0, le=64.0)
    """Added to factor x the match length (Arctic Inference's max_spec_offset)."""
    min_token_prob: float = Field(0.1, ge=0.0, le=1.0)
    """Draft a token only while its path's frequency-estimated probability stays at least this
    (vLLM suffix_decoding_min_token_prob)."""
    tree: bool = False
    """Draft a tree of the best-scored continuations (SuffixDecoding's tree speculation) instead of
    the most frequent chain; the cpu engine verifies it in one pass (max_draft_len nodes at most)."""
    max_cached_requests: int = Field(10_000, ge=0, le=10_000_000)
    """Earlier responses kept in the global suffix tree, oldest evicted first (vLLM
    suffix_decoding_max_cached_requests); 0: no global tree, only the request's own prompt and output."""
    max_cached_nodes: int = Field(1_000_000, ge=1, le=1_000_000_000)
    """The global tree's memory bound in trie nodes (about 150 bytes each in the cpu engine): past
    it the oldest responses are evicted whole."""
