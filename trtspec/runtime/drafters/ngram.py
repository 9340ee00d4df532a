"""N-gram prompt lookup: propose the continuation of an earlier occurrence of the last n tokens.

Searches prompt and generated text for the longest n in [ngram_min, ngram_max] whose last-n
tokens occurred before, and proposes what followed the first such occurrence (as HF's
prompt-lookup does). The index is a dict per n, updated incrementally as tokens are committed,
so a lookup costs O(ngram_max) instead of a scan of the sequence. Drafts are point masses: under
sampling, rejection sampling with a one-hot draft distribution keeps the output lossless.
"""

from __future__ import annotations

from trtspec.runtime.drafters.base import Draft, Drafter, DraftSession


class NgramDrafter(Drafter):
    kind = "ngram"

    def __init__(self, ngram_min: int = 1, ngram_max: int = 3):
        if not 1 <= ngram_min <= ngram_max:
            raise ValueError(f"need 1 <= ngram_min <= ngram_max, got {ngram_min}, {ngram_max}")
        self.ngram_min = ngram_min
        self.ngram_max = ngram_max

    def session(self, prompt_ids, params, generator, *, confidence_threshold=0.0, tree=None, kv=None) -> NgramSession:
        return NgramSession(self.ngram_min, self.ngram_max)


class NgramSession(DraftSession):
    def __init__(self, ngram_min: int, ngram_max: int):
        self.sizes = range(ngram_max, ngram_min - 1, -1)
        # n -> {n-gram tuple: index just past its first occurrence}
        self.index: dict[int, dict[tuple[int, ...], int]] = {n: {} for n in self.sizes}
        self.indexed_until = 0  # n-grams ending at or before this index are in the index

    def _extend_index(self, tokens: list[int]) -> None:
        # Index an n-gram only once a token follows it, so a lookup never finds the query itself.
        for end in range(self.indexed_until + 1, len(tokens)):
            for n in self.sizes:
                if end >= n:
                    self.index[n].setdefault(tuple(tokens[end - n:end]), end)
        self.indexed_until = max(self.indexed_until, len(tokens) - 1)

    def propose(self, tokens: list[int], max_len: int) -> Draft | None:
        import torch

        self._extend_index(tokens)
        for n in self.sizes:
            if len(tokens) < n:
                continue
            start = self.index[n].get(tuple(tokens[-n:]))
            if start is not None:
                continuation = tokens[start:start + max_len]
                if continuation:
                    return Draft(torch.tensor(continuation, dtype=torch.long), match=n)
        return None
