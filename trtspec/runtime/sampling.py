"""Turning logits into tokens, and deciding which draft tokens the target accepts.

Vocabulary (after vLLM's rejection sampler): a draft of k tokens is checked position by position;
the *accepted* tokens are its longest prefix that passes; at the first failure a *recovered*
token replaces the draft token; when all k pass, a *bonus* token is sampled from the target's
distribution after the last draft token. Either way one verify pass commits accepted + 1 tokens.
`target_probs` / `draft_probs` are what Leviathan et al. (2023) call p and q.

Every random draw takes an explicit `torch.Generator`, so a seed reproduces a run exactly.
This module knows nothing about models, caches or tokenizers.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class SamplingParams:
    """Validated sampling settings; temperature 0 means greedy (argmax)."""

    temperature: float = 0.0
    top_k: int = 0
    top_p: float = 1.0

    @property
    def greedy(self) -> bool:
        return self.temperature == 0.0


def logits_to_probs(logits, params: SamplingParams):
    """Temperature, then top-k, then top-p (nucleus); returns normalized probabilities.

    # logits: [num_tokens, vocab_size] float -> [num_tokens, vocab_size] float
    """
    import torch

    scores = logits.float() / params.temperature
    if params.top_k > 0 and params.top_k < scores.shape[-1]:
        kth = torch.topk(scores, params.top_k, dim=-1).values[..., -1:]
        scores = scores.masked_fill(scores < kth, float("-inf"))
    if params.top_p < 1.0:
        sorted_scores, order = torch.sort(scores, dim=-1, descending=True)
        sorted_probs = sorted_scores.softmax(dim=-1)
        # Drop a token when the tokens ranked above it already cover top_p; the first always stays.
        drop_sorted = (sorted_probs.cumsum(dim=-1) - sorted_probs) >= params.top_p
        drop = drop_sorted.scatter(-1, order, drop_sorted)
        scores = scores.masked_fill(drop, float("-inf"))
    return scores.softmax(dim=-1)


def sample(probs, generator):
    """One token per row from `probs`. # probs: [num_tokens, vocab_size] -> [num_tokens] long"""
    import torch

    return torch.multinomial(probs, 1, generator=generator).squeeze(-1)


def greedy_accept(draft_ids, target_logits) -> tuple[int, int]:
    """Greedy verification: accept the longest draft prefix equal to the target's argmax.

    # draft_ids: [k] long; target_logits: [k + 1, vocab_size] (row i follows draft token i - 1)
    Returns (num_accepted, next_token): next_token is the target's argmax after the accepted
    prefix, the recovered token on a mismatch or the bonus token when all k matched.
    """
    target_ids = target_logits.argmax(dim=-1)
    k = draft_ids.shape[0]
    mismatch = (draft_ids != target_ids[:k]).nonzero()
    num_accepted = int(mismatch[0, 0]) if mismatch.numel() else k
    return num_accepted, int(target_ids[num_accepted])


def rejection_accept(draft_ids, draft_probs, target_probs, generator) -> tuple[int, int]:
    """Lossless speculative sampling (Leviathan et al. 2023, Algorithm 1), vectorised over k.

    # draft_ids: [k] long
    # draft_probs: [k, vocab_size], or None when the draft is a point mass (n-gram lookup)
    # target_probs: [k + 1, vocab_size]
    Draft token i is accepted with probability min(1, target/draft at that token); at the first
    rejection the recovered token is drawn from normalize(max(0, target - draft)); when all k are
    accepted the bonus token is drawn from target_probs[k]. The committed tokens are then
    distributed exactly as sampling from the target token by token.
    """
    import torch

    k = draft_ids.shape[0]
    rows = torch.arange(k)
    target_at_draft = target_probs[rows, draft_ids]
    draft_at_draft = torch.ones(k) if draft_probs is None else draft_probs[rows, draft_ids]
    uniform = torch.rand(k, generator=generator)
    # u < t/d  <=>  u * d < t (d > 0 for any token the draft actually produced).
    rejected = (uniform * draft_at_draft >= target_at_draft).nonzero()
    if not rejected.numel():
        return k, int(sample(target_probs[k:k + 1], generator)[0])
    position = int(rejected[0, 0])
    if draft_probs is None:
        residual = target_probs[position].clone()
        residual[draft_ids[position]] = 0.0
    else:
        residual = (target_probs[position] - draft_probs[position]).clamp_min(0.0)
    total = residual.sum()
    if total <= 0:  # target == draft on the support: rejection had probability 0; keep it safe
        residual, total = target_probs[position], 1.0
    return position, int(sample((residual / total).unsqueeze(0), generator)[0])
