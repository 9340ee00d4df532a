"""T(n): what a target forward over n tokens costs, measured online for the load policy.

Every step's forward is fitted as a + b n over the tokens it fed (`DecayedLine`, forgetting old
steps). Besides, steps that only decode (no prompt chunk in them) are kept per batch size B: those
without drafts (B tokens) as their mean, those with drafts as a line a + b n. T(n) for a step of B
sequences is the mean at n = B and the line above it, each along the overall fit's shape while the
other is not measured yet (the line's own slope once drafts of several lengths were verified).

Why per batch size: a line over every forward is fitted mostly on prompt chunks (rows without
logits, cheaper) and on smaller batches. At 16 sequences on 2 cores (SmolLM2, n-gram chains,
held-back prompts) it priced a drafted row at 1.5 ms, while decode steps with drafts took 2.4 ms a
drafted row more than those without (in the running engine; 1.5-1.75 ms in a controlled forward
with every sequence in one key window). Measured effect (docs/BENCHMARKS-log.md, "The forward's cost
per batch size"): the policy drafts less at 16; its tokens/s over plain decoding stayed where it
was, 0.99-1.00x, within this machine's noise.

Why decode steps without drafts are kept apart from those with: the first drafted row of a step
costs far more than the next ones (16 sequences on 2 cores: +5 to +12 ms for one drafted row, ~2 ms
a row after), so a line through both kinds passes above the steps without drafts. Fitted on
the running engine at 16 (n-gram, held-back prompts), it priced plain steps at 83.8 ms while they
took 76.7, and chains of 2, which kept as many tokens per second as plain steps, were rated 7 %
faster than them (docs/BENCHMARKS-log.md, "Drafting only on long n-gram matches"). So per batch size
B the steps that fed exactly B tokens have their own mean, and the line is fitted on the others.

Why a batch size's own plain mean needs THIN steps before it is used: a mean is only re-measured
by plain steps at that size, and where drafting is chosen there are none. Through Triton at 16
streams the batch often holds 14 or 15 sequences (a client's next request on its way); two or three
plain steps there, slow by chance, left T(15) at 60.1 ms and T(14) at 54.4 against T(16) 49.3
(50 steps' worth), so drafting at 15 was rated 1.14x plain and chosen for 226 of 228 steps, which
measured nothing that could correct it (docs/BENCHMARKS-log.md, "The load policy's plain-step costs at
batch sizes it rarely sees"). Until a size has THIN plain steps, its plain level is read off a line
over the plain steps of every size (`across`), which the steps at neighbouring sizes keep current.
"""

from __future__ import annotations

from collections.abc import Callable

from trtspec.runtime.policy.decayed_line import DecayedLine

# cost of each token of a forward relative to one plain step, before measurements
# (a verify pass of n tokens at batch 1: about 1 + 0.035 n plain steps, docs/BENCHMARKS-engine.md)
PRIOR_SLOPE = 0.035
# (decayed) plain steps a batch size needs before its own mean prices its plain steps: the mean of
# 8 steps of ~10 % noise each is within ~4 %, inside the load policy's SPEC_MARGIN
THIN = 8.0


class ForwardCosts:
    """Target forward timings in, `seconds(n, batch_size)` out (in plain steps before any)."""

    def __init__(self, decay: float):
        self.decay = decay
        self.overall = DecayedLine(decay)            # seconds by tokens fed, every forward
        self.by_batch: dict[int, DecayedLine] = {}   # ... of decode-only forwards with drafts, per batch size
        self.plain: dict[int, DecayedLine] = {}      # ... and without (B tokens: only its mean is used)
        self.across = DecayedLine(decay)             # seconds by batch size, decode-only forwards without drafts

    def observe(self, num_tokens: int, seconds: float, batch_size: int | None = None) -> None:
        """A forward fed `num_tokens` tokens in `seconds`; `batch_size`: the sequences of a step
        that only decoded (None when a prompt chunk was in it)."""
        self.overall.add(float(num_tokens), seconds)
        if batch_size:
            if num_tokens <= batch_size:
                self.across.add(float(batch_size), seconds)
            fits = self.plain if num_tokens <= batch_size else self.by_batch
            fit = fits.get(batch_size)
            if fit is None:  # not setdefault: that would build a fit on every step
                fit = fits[batch_size] = DecayedLine(self.decay)
            fit.add(float(num_tokens), seconds)

    def seconds(self, num_tokens: float, batch_size: int | None = None) -> float:
        """T(n) for a decode step of `batch_size` sequences, or for any forward when None: without
        drafts their measured mean, with drafts the line over such steps, each along the overall
        line's shape where the other is not measured yet."""
        return self.at_batch(batch_size)(num_tokens)

    def at_batch(self, batch_size: int | None) -> Callable[[float], float]:
        """`seconds(n, batch_size)` as a function of n, the fits it reads worked out once: the load
        policy prices every option of a step at one batch size (the same floats as `seconds`)."""
        overall = self.overall.curve(_prior) or _prior
        plain_fit = self._plain(batch_size, overall) if batch_size else None
        drafted_fit = self.by_batch.get(batch_size) if batch_size else None
        plain = plain_fit.curve(overall) if plain_fit is not None else None
        drafted = drafted_fit.curve(overall) if drafted_fit is not None else None
        edge = batch_size or 0

        def seconds(num_tokens: float) -> float:
            for fit in (plain, drafted) if num_tokens <= edge else (drafted, plain):
                if fit is not None:
                    return fit(num_tokens)
            return overall(num_tokens)

        return seconds

    def _plain(self, batch_size: int, overall: Callable[[float], float]) -> DecayedLine | None:
        """The plain steps' fit at `batch_size`: its own once it holds THIN steps, else (where
        plain steps of other sizes were measured) a single point read off the line across sizes
        (`overall`: T(n) over every forward, the shape a point is carried along)."""
        own = self.plain.get(batch_size)
        if (own is not None and own.s >= THIN) or self.across.s < THIN:
            return own
        level = DecayedLine(1.0)  # one point: predict() carries it along the overall line's shape
        level.add(float(batch_size), self.across.predict(float(batch_size), overall))
        return level


def _prior(num_tokens: float) -> float:
    return 1.0 + PRIOR_SLOPE * num_tokens
