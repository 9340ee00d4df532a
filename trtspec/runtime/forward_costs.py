"""T(n): what a target forward over n tokens costs, measured online for the load policy.

Every step's forward is fitted as a + b n over the tokens it fed (`LinearFit`, forgetting old
steps). Besides, steps that only decode (no prompt chunk in them) are fitted per batch size B,
and T(n) for a step of B sequences is that fit where it has data: its own slope once drafts of
several lengths were verified at B, else its own level along the overall fit's shape.

Why per batch size: the cost of one more token is not one number. At 16 sequences on 2 cores
(SmolLM2, n-gram chains, trtspec.runtime.load_policy) a drafted row cost 2.4-3 ms of the step,
while the overall line, fitted mostly on prompt chunks (rows without logits, cheaper) and on
smaller batches, priced it at 1.5 ms: chains estimated a few percent faster than plain decoding
measured 0.85-0.97x of it (docs/BENCHMARKS.md).
"""

from __future__ import annotations

from trtspec.runtime.linear_fit import LinearFit

# cost of each token of a forward relative to one plain step, before measurements
# (a verify pass of n tokens at batch 1: about 1 + 0.035 n plain steps, docs/BENCHMARKS-engine.md)
PRIOR_SLOPE = 0.035


class ForwardCosts:
    """Target forward timings in, `seconds(n, batch_size)` out (in plain steps before any)."""

    def __init__(self, decay: float):
        self.decay = decay
        self.overall = LinearFit(decay)            # seconds by tokens fed, every forward
        self.by_batch: dict[int, LinearFit] = {}   # ... of decode-only forwards, per batch size

    def observe(self, num_tokens: int, seconds: float, batch_size: int | None = None) -> None:
        """A forward fed `num_tokens` tokens in `seconds`; `batch_size`: the sequences of a step
        that only decoded (None when a prompt chunk was in it)."""
        self.overall.add(float(num_tokens), seconds)
        if batch_size:
            self.by_batch.setdefault(batch_size, LinearFit(self.decay)).add(float(num_tokens), seconds)

    def seconds(self, num_tokens: float, batch_size: int | None = None) -> float:
        """T(n) for a decode step of `batch_size` sequences, or for any forward when None."""
        local = self.by_batch.get(batch_size) if batch_size else None
        measured = local.predict(num_tokens, self._overall) if local is not None else None
        return measured if measured is not None else self._overall(num_tokens)

    def _overall(self, num_tokens: float) -> float:
        measured = self.overall.predict(num_tokens, _prior)
        return measured if measured is not None else _prior(num_tokens)


def _prior(num_tokens: float) -> float:
    return 1.0 + PRIOR_SLOPE * num_tokens
