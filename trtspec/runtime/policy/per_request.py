"""How many tokens to draft next: fixed, or dynamic; and when to stop speculating altogether.

Dynamic policy (as HF's assisted generation's "heuristic" schedule, one step finer): after a
fully accepted draft the next draft may be one token longer (up to max_draft_len), after a
rejection one shorter (down to 1). Independently, the drafter may stop early when its own
confidence drops below a threshold (the drafter applies that; see drafters).

Acceptance floor: after `warmup` drafts, while the acceptance rate over the last `window`
drafts stays below `floor`, the engine decodes plainly (no drafts, so no wasted verify width)
and only re-probes with one draft every `probe_every` plain steps. Entering this state sets
stats.fallback.
"""

from __future__ import annotations

from collections import deque


class DraftPolicy:
    """Per-request draft-length and fallback state."""

    def __init__(self, max_draft_len: int, *, dynamic: bool = False, floor: float = 0.0,
                 warmup: int = 4, window: int = 8, probe_every: int = 16):
        self.max_draft_len = max_draft_len
        self.dynamic = dynamic
        self.floor = floor
        self.warmup = warmup
        self.probe_every = probe_every
        self.length = max_draft_len
        self.recent: deque[tuple[int, int]] = deque(maxlen=window)  # (draft tokens, accepted)
        self.num_drafts = 0
        self.in_fallback = False
        self.plain_steps = 0

    def next_length(self) -> int:
        """Tokens to draft this step; 0 means decode plainly."""
        if self.in_fallback:
            self.plain_steps += 1
            if self.plain_steps % self.probe_every:
                return 0
        return self.length

    def update(self, num_draft_tokens: int, num_accepted: int) -> bool:
        """Record one verified draft; return True when this update entered fallback."""
        self.num_drafts += 1
        self.recent.append((num_draft_tokens, num_accepted))
        if self.dynamic:
            if num_accepted == num_draft_tokens:
                self.length = min(self.max_draft_len, self.length + 1)
            else:
                self.length = max(1, self.length - 1)
        if self.floor <= 0.0 or self.num_drafts < self.warmup:
            return False
        drafted = sum(d for d, _ in self.recent)
        rate = sum(a for _, a in self.recent) / drafted if drafted else 0.0
        entered = rate < self.floor and not self.in_fallback
        self.in_fallback = rate < self.floor
        return entered

