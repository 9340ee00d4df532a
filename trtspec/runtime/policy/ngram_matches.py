"""Acceptance of n-gram drafts by the length of their lookup's match, for the load policy.

Why (SmolLM2, n-gram chains of 4 at batch 1; the 30 dev prompts and the 15 held-back ones, 64
tokens each): a draft continuing a 3-token match passed its first position 66-68 % of the time and
kept 0.44-0.48 tokens per drafted token; one continuing a 2-token match 48-49 % and 0.28-0.29. In a
full batch of 16 on 2 cores a drafted token costs 2-3 % of the step while a kept one adds 1/16 of
its tokens: a 2-token match's draft brings back 1.8 % per drafted token and loses, a 3-token one's
2.8-3.0 % (its first position 4 %) and about pays. The cost model
(trtspec.runtime.policy.by_load) therefore also weighs chains drafted only where the match is at
least M tokens (Choice.min_match), from these counts. Model drafters' drafts have no match length
(0) and are not counted here.
"""

from __future__ import annotations

from collections.abc import Iterable


class MatchStats:
    """Per match length: how often lookups found one and, per chain position, the drafts where
    that position was at stake and the ones it passed (forgotten as the cost model's own counts)."""

    def __init__(self, decay: float):
        self.decay = decay  # per step
        self.found: dict[int, float] = {}
        self.offered: dict[int, list[float]] = {}
        self.accepted: dict[int, list[float]] = {}

    def observe_found(self, matches: Iterable[int]) -> None:
        """One step's lookups: the match length of every draft found."""
        for match in self.found:
            self.found[match] *= self.decay
        for match in matches:
            if match:
                self.found[match] = self.found.get(match, 0.0) + 1.0

    def observe_chain(self, match: int, offered: int, accepted: int, decay: float) -> None:
        """A chain of `offered` tokens from a `match`-token lookup kept its first `accepted`
        (positions at stake as in CostModel._observe_chain); `decay`: the forgetting per draft."""
        if not match:
            return
        at_stake = self.offered.setdefault(match, [])
        passed = self.accepted.setdefault(match, [])
        while len(at_stake) < offered:
            at_stake.append(0.0)
            passed.append(0.0)
        for j in range(min(accepted + 1, offered)):
            at_stake[j] = at_stake[j] * decay + 1.0
            passed[j] = passed[j] * decay + (1.0 if j < accepted else 0.0)

    def levels(self) -> list[int]:
        """The match lengths a chain may require: each one seen above the shortest (requiring the
        shortest is drafting on every match)."""
        return sorted(self.found)[1:]

    def found_at_least(self, level: int) -> float:
        """Decayed count of lookups that matched at least `level` tokens."""
        return sum(count for match, count in self.found.items() if match >= level)

    def at_least(self, level: int, position: int) -> tuple[float, float]:
        """(drafts where chain `position` was at stake, drafts it passed) over matches of at least
        `level` tokens."""
        offered = accepted = 0.0
        for match, at_stake in self.offered.items():
            if match >= level and position < len(at_stake):
                offered += at_stake[position]
                accepted += self.accepted[match][position]
        return offered, accepted

    def at_least_positions(self, level: int, positions: int) -> tuple[list[float], list[float]]:
        """`at_least(level, j)` for j < `positions`, in one walk over the match lengths (the same
        sums, added in the same order)."""
        offered, accepted = [0.0] * positions, [0.0] * positions
        for match, at_stake in self.offered.items():
            if match >= level:
                passed = self.accepted[match]
                for j in range(min(positions, len(at_stake))):
                    offered[j] += at_stake[j]
                    accepted[j] += passed[j]
        return offered, accepted
