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


def greedy_tokens(logits) -> list[int]:
    """The argmax of each row, as torch's `argmax(dim=-1).tolist()` gives it: the first maximum,
    a NaN counting as the largest value (the first NaN wins). # logits: [n, vocab] or [vocab]

    Through numpy: torch's CPU argmax took 44 us a 49,152-wide row on the AVX-512 EPYC
    (2026-11-28), numpy's 5 us; py-spy had it at 3.4 % of the engine loop at 8 sequences, though
    tokens/s through Triton did not change measurably (docs/BENCHMARKS-log.md).
    Other dtypes than numpy's float types (bfloat16) stay in torch."""
    import torch

    if logits.dtype not in (torch.float32, torch.float64, torch.float16):
        return logits.argmax(dim=-1).tolist()
    return logits.detach().numpy().argmax(axis=-1).tolist()


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
    target_ids = greedy_tokens(target_logits)
    drafted = draft_ids.tolist()
    num_accepted = next((i for i, token in enumerate(drafted) if token != target_ids[i]), len(drafted))
    return num_accepted, target_ids[num_accepted]


def rejection_accept(draft_ids, draft_probs, target_probs, generator) -> tuple[int, int]:
    """Lossless speculative sampling for one sequence; see `rejection_accept_batch`.

    # draft_ids: [k] long; draft_probs: [k, vocab_size] or None; target_probs: [k + 1, vocab_size]
    Returns (num_accepted, next_token).
    """
    num_accepted, next_token = rejection_accept_batch(
        draft_ids.unsqueeze(0), None if draft_probs is None else draft_probs.unsqueeze(0),
        target_probs.unsqueeze(0), generator)
    return int(num_accepted[0]), int(next_token[0])


def rejection_accept_batch(draft_ids, draft_probs, target_probs, generator):
    """Lossless speculative sampling (Leviathan et al. 2023, Algorithm 1), vectorised.

    # draft_ids: [batch, k] long
    # draft_probs: [batch, k, vocab_size], or None when each draft token is a point mass
    #              (n-gram lookup, greedy drafts): the draft distribution is one-hot
    # target_probs: [batch, k + 1, vocab_size]
    Draft token i is accepted with probability min(1, target/draft at that token); at the first
    rejection the recovered token is drawn from normalize(max(0, target - draft)) at that
    position; when all k are accepted the bonus token is drawn from target_probs[:, k]. The
    committed tokens are then distributed exactly as sampling from the target token by token.
    Returns (num_accepted [batch] long, next_token [batch] long).
    """
    import torch

    batch, k = draft_ids.shape
    target_at_draft = target_probs[:, :k].gather(-1, draft_ids.unsqueeze(-1)).squeeze(-1)  # [batch, k]
    if draft_probs is None:
        draft_at_draft = torch.ones_like(target_at_draft)
    else:
        draft_at_draft = draft_probs.gather(-1, draft_ids.unsqueeze(-1)).squeeze(-1)
    uniform = torch.rand(batch, k, generator=generator)
    # u < t/d  <=>  u * d < t (d > 0 for any token the draft actually produced).
    rejected = uniform * draft_at_draft >= target_at_draft  # [batch, k]
    any_rejected = rejected.any(dim=-1)
    # argmax over a 0/1 row returns the first 1: the first rejected position.
    num_accepted = torch.where(any_rejected, rejected.to(torch.uint8).argmax(dim=-1), torch.full_like(any_rejected, k,
                                                                                                    dtype=torch.long))
    rows = torch.arange(batch)
    probs = target_probs[rows, num_accepted]  # [batch, vocab]: the bonus row where nothing was rejected
    at = num_accepted.clamp(max=k - 1)
    if draft_probs is None:
        draft_row = torch.nn.functional.one_hot(draft_ids[rows, at], probs.shape[-1]).to(probs.dtype)
    else:
        draft_row = draft_probs[rows, at]
    residual = (probs - draft_row).clamp_min(0.0)
    total = residual.sum(dim=-1, keepdim=True)
    # Where target == draft on the support, rejection had probability 0: keep rows well-defined.
    use_residual = any_rejected.unsqueeze(-1) & (total > 0)
    probs = torch.where(use_residual, residual / total.clamp_min(1e-30), probs)
    return num_accepted, sample(probs, generator)
