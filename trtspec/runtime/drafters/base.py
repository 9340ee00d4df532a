"""The one interface every drafter implements.

A `Drafter` is shared by all requests and holds only read-only things (weights, settings). Each
request opens its own `DraftSession` (its caches, its n-gram index), so concurrent requests never
share mutable state. Per verify step the engine calls, in order:

1. `session.propose(tokens, max_len)` -> a `Draft` of 0..max_len tokens continuing `tokens`
   (the whole committed sequence, prompt included);
2. the engine verifies the draft with one target pass;
3. `session.on_verified(kept_hidden)` with the target's auxiliary hidden states for the
   positions the target kept in its KV cache this step (only drafters whose
   `needs_aux_hidden` is true get them; others receive None).

A drafter never sees the target's logits, never touches the target's KV cache, and never decides
acceptance: that is the engine's job.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any


@dataclass
class Draft:
    """Proposed tokens and, for sampled drafts, the distributions they were drawn from."""

    # [k] long
    token_ids: Any
    # [k, vocab_size] float, or None when each token is a point mass (greedy or n-gram)
    draft_probs: Any = None
    # for tree drafts: the static tree (trtspec.runtime.tree.Tree) the tokens fill, node by node
    tree: Any = None

    @property
    def size(self) -> int:
        return int(self.token_ids.shape[0])


class DraftSession:
    """Per-request drafting state. Subclasses override `propose` (and `on_verified` if needed)."""

    def propose(self, tokens: list[int], max_len: int) -> Draft | None:
        raise NotImplementedError

    def on_verified(self, kept_hidden: Any) -> None:
        """Receive the target's aux hidden states for the positions it kept (EAGLE-3 only)."""


class Drafter:
    """Shared, read-only drafter. `aux_layer_ids` lists target layers whose outputs it needs."""

    kind: str = "?"
    aux_layer_ids: tuple[int, ...] = ()

    @property
    def needs_aux_hidden(self) -> bool:
        return bool(self.aux_layer_ids)

    def session(self, prompt_ids: list[int], params: Any, generator: Any, *,
                confidence_threshold: float = 0.0, tree: Any = None) -> DraftSession:
        """Open one request's session. `tree` (trtspec.runtime.tree.Tree) asks for static tree
        drafts; drafters that only draft chains ignore it."""
        raise NotImplementedError
