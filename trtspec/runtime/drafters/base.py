"""The one interface every drafter implements.

A `Drafter` is shared by all requests and holds only read-only things (weights, settings). Each
request opens its own `DraftSession` (its n-gram index, its slice of the drafter's paged KV
cache), so requests never share mutable state. Per engine step the scheduler calls, in order:

1. `drafter.propose_batch(sessions, tokens, max_lens)` -> per session a `Draft` of
   0..max_len tokens continuing its `tokens` (the whole committed sequence, prompt included), or
   None. Model drafters run one forward for all sessions per draft position; the default asks
   each session's `propose` in turn (n-gram lookup);
2. the engine verifies every draft in one target pass;
3. `session.on_verified(kept_hidden)` with the target's auxiliary hidden states for the
   positions the target kept in its KV cache (prompt chunks included; only drafters with
   `aux_layer_ids` get them); and, for drafters with `wants_target_tokens` (lookahead), after a
   chain's verification `session.on_target_tokens(draft_ids, target_ids, num_accepted)`: the
   target's argmax token at every row of its verify pass (its Jacobi guesses).

A drafter with its own model says so with `kv_config` (the transformers config its cache is
shaped by); the engine then makes a pool for it and opens each session with `kv`, that
sequence's view of it (same block table as the target's). A drafter that runs the target's own
first layers (layerskip) says so with `shares_target_kv` instead: its sessions get a view of the
target's pool, in which they read the committed positions' keys and values of those layers and
write only past them, in the sequence's own reserved blocks (scratch that verification
overwrites, or keeps where a Draft's `hidden` rows let it skip those layers for them).

A drafter never sees the target's logits (at most their argmax tokens, above), never writes the
target's KV cache below a sequence's committed length, and never decides acceptance: that is the
engine's job.
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
    # for tree drafts: the static tree (trtspec.runtime.verify.tree.Tree) the tokens fill, node by node
    tree: Any = None
    # for dynamic trees: per node (Tree order) its place in the search's score order, 0 the best
    # (the N' best-scored nodes are the tree a budget of N' would have kept: load_policy)
    score_rank: Any = None
    # for dynamic trees: the node budget the search kept up to (num_draft_tokens); the tree holds
    # fewer where min_path_prob cut it, and the load policy prices what was really verified
    budget: int | None = None
    # for n-gram drafts: how many tokens the lookup matched (0: not a lookup); the load policy
    # may draft only on longer matches under load (trtspec.runtime.policy.ngram_matches)
    match: int = 0
    # for chains drafted by the target's first `hidden_layer` layers (layerskip), where reusing
    # them is exact: [n, hidden_size] those layers' output for the verify rows [pending] +
    # token_ids[:n - 1] (the rows the draft fed); verification runs only the later layers for them
    hidden: Any = None
    hidden_layer: int = 0

    @property
    def size(self) -> int:
        return int(self.token_ids.shape[0])


class ChainDrafts:
    """Chains that model drafters grow one position at a time, one list per session.

    `take` asks the session to choose a token from its logits row and keeps it, except that
    after the first position a token the session is not confident about ends that chain."""

    def __init__(self, count: int):
        self.ids: list[list[int]] = [[] for _ in range(count)]
        self.rows: list[list] = [[] for _ in range(count)]

    def take(self, index: int, session: Any, logits: Any, position: int) -> int | None:
        """The token kept for session `index` at `position`, or None when its chain ends here."""
        token, probs, confident = session.choose(logits)
        if position > 0 and not confident:
            return None
        self.ids[index].append(token)
        if probs is not None:
            self.rows[index].append(probs)
        return token

    def drafts(self) -> list[Draft | None]:
        """A Draft per session, None where nothing was drafted."""
        import torch

        return [Draft(torch.tensor(ids, dtype=torch.long), torch.stack(rows) if rows else None) if ids else None
                for ids, rows in zip(self.ids, self.rows, strict=True)]


class DraftSession:
    """Per-request drafting state. Subclasses override `propose` (and `on_verified` if needed)."""

    def propose(self, tokens: list[int], max_len: int) -> Draft | None:
        raise NotImplementedError

    def on_target_tokens(self, draft_ids: list[int], target_ids: list[int], num_accepted: int) -> None:
        """The target's argmax after [pending] + draft[:i], i = 0..k (drafters that ask for them)."""

    def on_verified(self, kept_hidden: Any) -> None:
        """Receive the target's aux hidden states for the positions it kept (EAGLE-3 only)."""

    def backlog(self, num_tokens: int) -> int:
        """Rows the next draft's first forward feeds beyond the one every draft feeds, for a
        sequence of `num_tokens` tokens: the positions verified since this session last drafted
        (0 for drafters without a cache). The load policy prices them (trtspec.runtime.policy.step_rates.CATCH_UP_HORIZON)."""
        return 0


class Drafter:
    """Shared, read-only drafter. `aux_layer_ids` lists target layers whose outputs it needs."""

    kind: str = "?"
    aux_layer_ids: tuple[int, ...] = ()
    kv_config: Any = None  # config of the model whose KV cache sessions keep (None: no cache)
    shares_target_kv: bool = False  # sessions draft in the target's pool (its first layers): module docstring
    wants_target_tokens: bool = False  # sessions get on_target_tokens after each chain's verification
    tree: Any = None  # a static tree (verify.tree.Tree) every session fills: Medusa's; the engine plans for it

    def session(self, prompt_ids: list[int], params: Any, generator: Any, *,
                confidence_threshold: float = 0.0, tree: Any = None, kv: Any = None) -> DraftSession:
        """Open one request's session. `tree` (trtspec.runtime.verify.tree.Tree) asks for static tree
        drafts; drafters that only draft chains ignore it. `kv`: see the module docstring."""
        raise NotImplementedError

    def propose_batch(self, sessions: list[DraftSession], tokens: list[list[int]],
                      max_lens: list[int]) -> list[Draft | None]:
        """One draft per session; this default asks each session in turn."""
        return [session.propose(seq, max_len) for session, seq, max_len in zip(sessions, tokens, max_lens,
                                                                                strict=True)]
