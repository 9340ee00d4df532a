"""`speculative.suffix`: suffix decoding's settings (mode suffix; trtspec.runtime.drafters.suffix;
reference heads-and-methods.md section 7). Names and defaults are vLLM's suffix_decoding_* fields."""

from __future__ import annotations

from pydantic import Field

from trtspec.spec.section import Section


class SuffixSpec(Section):
    depth: int = Field(24, ge=2, le=256)
    """mode suffix: the longest substring the suffix trees count, in tokens (vLLM
    suffix_decoding_max_tree_depth; matches reach depth - 1 tokens). Each token of a prompt or
    response adds up to this many trie nodes."""
    factor: float = Field(1.0, gt=0.0, le=64.0)
    """A draft is at most factor x the match length + offset tokens (and speculative.max_draft_len):
    long matches draft long (vLLM suffix_decoding_max_spec_factor)."""
    offset: float = Field(0.0, ge=0.0, le=64.0)
    """Added to factor x the match length (Arctic Inference's max_spec_offset)."""
    min_token_prob: float = Field(0.1, ge=0.0, le=1.0)
    """Draft a token only while its path's frequency-estimated probability stays at least this
    (vLLM suffix_decoding_min_token_prob)."""
    tree: bool = False
    """Draft a tree of the best-scored continuations (SuffixDecoding's tree speculation) instead of
    the most frequent chain; the cpu engine verifies it in one pass (max_draft_len nodes)."""
    max_cached_requests: int = Field(10_000, ge=0, le=10_000_000)
    """Earlier responses kept in the global suffix tree, oldest evicted first (vLLM
    suffix_decoding_max_cached_requests); 0: no global tree, only the request's own prompt and output."""
    max_cached_nodes: int = Field(1_000_000, ge=1, le=1_000_000_000)
    """The global tree's memory bound in trie nodes (about 150 bytes each in the cpu engine): past
    it the oldest responses are evicted whole."""
