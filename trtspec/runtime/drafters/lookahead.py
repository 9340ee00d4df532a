"""Lookahead decoding in its simplest exact form: an n-gram pool fed by the sequence and by the
target's Jacobi guesses, proposed as chain drafts for the engine's verifier.

Vocabulary (Fu et al. 2024, "Break the Sequential Dependency of LLM Inference Using Lookahead
Decoding"; TensorRT-LLM's (W, N, G)):
- pool: per first token, up to G (verification set) continuations of N - 1 tokens, the newest
  first (LADE's token_map with FIFO eviction). It takes every N-gram of the committed sequence,
  prompt included (LADE's POOL_FROM_PROMPT), and every Jacobi n-gram.
- Jacobi guesses: the target's argmax at every verified position. Row i of a verify pass over
  [pending] + draft predicts the token after draft[:i]; past the first rejection those rows
  condition on a wrong token, which is what a Jacobi iteration does with its guesses: they are one
  iteration on from the draft. The rows after the next committed token become the window (at most
  W guesses for the positions that follow), and (draft token, its row's argmax, ...) become pool
  n-grams.
- draft: from the last token, the pool continuation that agrees most with the window (ties: the
  newest), then again from its last token, until max_len; without a pool entry, the window's
  guesses where they line up with the sequence. Where the last token's pool holds candidates with
  other first tokens (the verification set), they are verified beside the chain as a tree, one
  node each, the chain shortened by as many: max_len nodes either way.

What this leaves out of the paper's algorithm: the lookahead branch (W x (N - 1) extra positions
decoded in the same target pass) and verifying all G candidates whole; here the guesses come
only from verified chains (a tree step gives none), and the other candidates are verified by
their first token only. Drafts are point masses chosen from the past alone, so rejection
sampling (multi-candidate over a tree) keeps sampling lossless and greedy output is the target's own.
"""

from __future__ import annotations

from typing import Any

from trtspec.runtime.drafters.base import Draft, Drafter, DraftSession


class LookaheadDrafter(Drafter):
    kind = "lookahead"
    wants_target_tokens = True  # step.py hands every session its verify rows' argmax tokens

    def __init__(self, window: int = 4, ngram: int = 3, verification_set: int = 4):
        if window < 1 or ngram < 2 or verification_set < 1:
            raise ValueError(f"lookahead needs window >= 1, ngram >= 2, verification_set >= 1 "
                             f"(got {window}, {ngram}, {verification_set})")
        self.window, self.ngram, self.verification_set = window, ngram, verification_set

    def session(self, prompt_ids, params, generator, *, confidence_threshold=0.0, tree=None,
                kv=None) -> LookaheadSession:
        return LookaheadSession(self.window, self.ngram, self.verification_set)


class LookaheadSession(DraftSession):
    def __init__(self, window: int, ngram: int, verification_set: int):
        self.window, self.ngram, self.verification_set = window, ngram, verification_set
        self.pool: dict[int, list[tuple[int, ...]]] = {}
        self.indexed_until = 0           # sequence n-grams ending before this index are pooled
        self.guesses: list[int] = []     # Jacobi window: guesses for positions guess_start, ...
        self.guess_start = -1
        self.proposed_at = -1            # sequence length when the last draft was made

    def _add(self, first: int, continuation: tuple[int, ...]) -> None:
        entries = self.pool.setdefault(first, [])
        if continuation in entries:
            entries.remove(continuation)
        entries.insert(0, continuation)
        del entries[self.verification_set:]

    def _extend_pool(self, tokens: list[int]) -> None:
        n = self.ngram
        for end in range(max(self.indexed_until, n), len(tokens) + 1):
            self._add(tokens[end - n], tuple(tokens[end - n + 1:end]))
        self.indexed_until = max(self.indexed_until, len(tokens) + 1)

    def _window_at(self, position: int) -> list[int]:
        """The Jacobi guesses for positions position, position + 1, ... (empty where none line up)."""
        if self.guess_start < 0 or position < self.guess_start:
            return []
        return self.guesses[position - self.guess_start:]

    def propose(self, tokens: list[int], max_len: int) -> Draft | None:
        import torch

        # 1. Pool every n-gram of the committed sequence.
        self._extend_pool(tokens)
        # 2. Chain pool continuations from the last token, each the one the window agrees with most.
        draft: list[int] = []
        last = tokens[-1]
        while len(draft) < max_len:
            candidates = self.pool.get(last)
            if not candidates:
                break
            guesses = self._window_at(len(tokens) + len(draft))
            best = max(candidates, key=lambda c: sum(a == b for a, b in zip(c, guesses, strict=False)))  # ties: newest
            draft.extend(best[:max_len - len(draft)])
            last = draft[-1]
        # 3. No pool entry at all: the window's guesses, where they line up.
        if not draft:
            draft = self._window_at(len(tokens))[:max_len]
        self.proposed_at = len(tokens)
        if not draft:
            return None
        # 4. Other candidates with another first token: verified beside the chain, one node each.
        others = [] if len(draft) < 2 else list(dict.fromkeys(
            c[0] for c in self.pool.get(tokens[-1], ()) if c[0] != draft[0]))[:len(draft) - 1]
        if not others:
            return Draft(torch.tensor(draft, dtype=torch.long))
        return verification_set_draft(draft[:len(draft) - len(others)], others)

    def on_target_tokens(self, draft_ids: list[int], target_ids: list[int], num_accepted: int) -> None:
        """The target's argmax after [pending] + draft[:i] for every row i of the last verify pass
        (`num_accepted` draft tokens were kept): the next Jacobi window and pool n-grams."""
        if self.proposed_at < 0:
            return
        # rows past the committed token guess the positions after it (one Jacobi iteration on)
        self.guesses = list(target_ids[num_accepted + 1:])[:self.window]
        self.guess_start = self.proposed_at + num_accepted + 1
        # (draft token, the target's guesses after it) of the rejected part: Jacobi n-grams
        n = self.ngram
        for j in range(num_accepted + 1, len(draft_ids) - n + 3):
            self._add(draft_ids[j - 1], tuple(target_ids[j:j + n - 1]))


def verification_set_draft(chain: list[int], others: list[int]) -> Draft:
    """A tree draft: `chain` from the root (rank 0 at every depth) and each of `others` as a
    further child of the root (ranks 1, 2, ...), tokens in the Tree's node order."""
    import torch

    from trtspec.runtime.verify.tree import Tree

    paths = [[0] * depth for depth in range(1, len(chain) + 1)] + [[rank] for rank in range(1, len(others) + 1)]
    tree = Tree(paths)
    by_path = {(0,) * depth: token for depth, token in enumerate(chain, start=1)}
    by_path.update({(rank,): token for rank, token in enumerate(others, start=1)})
    return Draft(torch.tensor([by_path[tuple(p)] for p in tree.paths], dtype=torch.long), tree=tree)


def make(parts: Any) -> LookaheadDrafter:
    """The mode's factory (trtspec.modes row `lookahead`); options["lookahead"] = [W, N, G]."""
    window, ngram, verification_set = parts.options.get("lookahead") or (4, 3, 4)
    return LookaheadDrafter(int(window), int(ngram), int(verification_set))
