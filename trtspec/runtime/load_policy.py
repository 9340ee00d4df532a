"""Speculation that adapts to load: how many tokens each sequence drafts in a step of B sequences.

Why: verifying k draft tokens per sequence makes a step feed B (k + 1) tokens instead of B. At
batch 1 on a CPU that costs little more than one token (the weights are read once either way);
as B grows the step turns compute-bound and the extra tokens cost almost their full price, so
drafting stops paying (the reason vLLM, SGLang and TensorRT-LLM shorten or drop drafts under load).

Two sources, in this order:
1. A measured table, `speculative.draft_len_schedule` ([[batch_size, draft_len], ...], written
   by `trtspec tune --concurrency 1,2,4,8`): from that batch size on, that draft length (0: off).
2. Otherwise, for two or more sequences, a cost model fed by the engine's own measurements
   (`CostModel`): per step it picks the k in 0..max_draft_len with the most committed tokens per
   second (a lone sequence drafts max_draft_len: its verify pass costs about one plain step, and
   its seeded sampling stays reproducible),

       rate(k) = B (1 + f sum_{j<=k} q_j) / (T(B + f B k) + k D(B))

   q_j: how often the j-th draft token is accepted (per-position acceptance, recent drafts);
   f: how often the drafter proposes anything (n-gram lookup often finds nothing);
   T(n): a target forward over n tokens, fitted online as a + b n from the steps' timings;
   D(B): one batched draft position (model drafters; n-gram lookup costs nothing).
   k = 0 (speculation off for the step) when rate(0) is the highest. While off, every
   PROBE_EVERY-th step one sequence drafts anyway (`probe`; a tree's probes come as much more
   rarely as it has more nodes than max_draft_len), so q_j stays current for the price
   of k tokens, not B k (with all B drafting, a probe step at batch 8 and k = 4 fed 40 tokens
   instead of 12). Before enough steps are measured the
   model assumes a verify pass costs 1 + 0.035 n plain steps (docs/BENCHMARKS-engine.md) and
   acceptance 0.5 per position.
"""

from __future__ import annotations

from typing import Any

PROBE_EVERY = 8
DECAY = 0.98            # forgetting per observation: the machine's speed and the text change
PRIOR_SLOPE = 0.035     # cost of each token of a forward relative to one plain step, before measurements
PRIOR_ACCEPT = 0.5      # acceptance per draft position before measurements


class LinearFit:
    """y = a + b x by least squares with exponential forgetting (no opinion until it has data)."""

    def __init__(self):
        self.s = self.sx = self.sy = self.sxx = self.sxy = 0.0

    def add(self, x: float, y: float) -> None:
        for name in ("s", "sx", "sy", "sxx", "sxy"):
            setattr(self, name, getattr(self, name) * DECAY)
        self.s += 1.0
        self.sx += x
        self.sy += y
        self.sxx += x * x
        self.sxy += x * y

    def predict(self, x: float, prior_slope: float) -> float | None:
        """a + b x; with too little spread in x so far, the mean scaled along the prior shape
        (1 + prior_slope x); None before any data."""
        if self.s < 1e-9:
            return None
        mean_x, mean_y = self.sx / self.s, self.sy / self.s
        variance = self.sxx / self.s - mean_x * mean_x
        if self.s >= 4 and variance > 1.0:
            b = max((self.sxy / self.s - mean_x * mean_y) / variance, 0.0)
            a = max(mean_y - b * mean_x, 1e-6)
            return a + b * x
        return mean_y * (1 + prior_slope * x) / (1 + prior_slope * mean_x)


class CostModel:
    """The engine's measured costs and acceptance; `best_length(B)` picks a step's draft length."""

    def __init__(self, max_draft_len: int, drafts_cost: bool):
        self.max_draft_len = max_draft_len
        self.drafts_cost = drafts_cost
        self.target = LinearFit()   # seconds of a target forward by tokens fed
        self.draft = LinearFit()    # seconds of one batched draft position by batch size
        self.offered = [2.0] * max_draft_len  # pseudo-counts: acceptance PRIOR_ACCEPT per position
        self.accepted = [2.0 * PRIOR_ACCEPT ** (j + 1) for j in range(max_draft_len)]
        self.proposed = 2.0  # proposals asked, of which `found` returned a draft (f = found / proposed)
        self.found = 2.0
        self.steps_off = 0
        self.probe = False  # the last best_length was a probe: one sequence drafts (step.py)

    def observe_forward(self, num_tokens: int, seconds: float) -> None:
        self.target.add(float(num_tokens), seconds)

    def observe_draft(self, batch_size: int, positions: int, seconds: float) -> None:
        if positions > 0 and self.drafts_cost:
            self.draft.add(float(batch_size), seconds / positions)

    def observe_verify(self, offered: int, accepted: int) -> None:
        """One sequence's draft: `offered` tokens (a tree: its depth), the first `accepted` kept."""
        for j in range(min(offered, self.max_draft_len)):
            self.offered[j] = self.offered[j] * DECAY + 1.0
            self.accepted[j] = self.accepted[j] * DECAY + (1.0 if j < accepted else 0.0)

    def observe_proposals(self, asked: int, found: int) -> None:
        if asked:
            self.proposed = self.proposed * DECAY + asked
            self.found = self.found * DECAY + found

    def forward_seconds(self, num_tokens: float) -> float:
        measured = self.target.predict(num_tokens, PRIOR_SLOPE)
        return measured if measured is not None else 1.0 + PRIOR_SLOPE * num_tokens

    def draft_seconds(self, batch_size: int) -> float:
        if not self.drafts_cost:
            return 0.0
        measured = self.draft.predict(batch_size, 0.0)
        return measured if measured is not None else 0.1 * self.forward_seconds(batch_size)

    def rate(self, batch_size: int, k: int, tokens_per_draft: int | None = None) -> float:
        """Expected committed tokens per second for drafts of k (a tree: tokens_per_draft nodes)."""
        found = self.found / self.proposed
        gain = sum(self.accepted[j] / self.offered[j] for j in range(k))
        width = tokens_per_draft if tokens_per_draft is not None else k
        seconds = self.forward_seconds(batch_size * (1 + found * width)) + k * self.draft_seconds(batch_size)
        return batch_size * (1 + found * gain) / seconds

    def best_length(self, batch_size: int, tree: Any = None) -> int:
        """The draft length for a step of `batch_size` decoding sequences (0: plain decoding).
        With a static tree (trtspec.runtime.tree.Tree) the choice is all (max_draft_len) or nothing."""
        if batch_size < 1:
            return 0
        if tree is not None:
            depth = min(tree.max_depth, self.max_draft_len)
            choices = {0: self.rate(batch_size, 0),
                       self.max_draft_len: self.rate(batch_size, depth, tokens_per_draft=tree.num_nodes)}
        else:
            choices = {k: self.rate(batch_size, k) for k in range(self.max_draft_len + 1)}
        best = max(choices, key=lambda k: (choices[k], -k))
        self.probe = False
        if best == 0:
            self.steps_off += 1
            if self.steps_off % probe_every(self.max_draft_len, tree) == 0:  # keep measuring acceptance while off
                self.probe = True
                return self.max_draft_len
        return best


def probe_every(max_draft_len: int, tree: Any = None) -> int:
    """Steps between probes while speculation is off: PROBE_EVERY for a chain, proportionally more
    for a tree, whose probe verifies all its nodes, so probes cost the same share of the steps
    (at batch 8, 16-node dynamic-tree probes every 8th step cost 0.92x plain, chain probes 0.99x)."""
    nodes = tree.num_nodes if tree is not None else max_draft_len
    return PROBE_EVERY * max(1, -(-nodes // max(1, max_draft_len)))


def schedule_length(schedule: Any, batch_size: int, max_draft_len: int) -> int:
    """The table's draft length for `batch_size`: its last entry at or below it (the first entry
    below its own size), capped by max_draft_len."""
    length = schedule[0][1]
    for size, draft_len in schedule:
        if size <= batch_size:
            length = draft_len
    return min(length, max_draft_len)
