"""One sequence's grammar state through the engine's steps.

Per step (trtspec.runtime.loop.step): `constrain(draft)` before verification walks the draft
through the matcher position by position, cuts a chain at its first rejected token (a tree loses
each rejected node with its subtree), records the allowed tokens at every verify row (row 0 after
the committed tokens, row 1 + i after draft token i) and rolls the matcher back to the committed
tokens; `mask(logits)` applies those rows (packed bitmasks: masking.py); `advance(committed)` (from Sequence.commit) accepts
the tokens the step committed. So the matcher only ever holds committed tokens between steps.
A row after an accepted end-of-sequence token allows everything: output ends at EOS anyway.
"""

from __future__ import annotations

import dataclasses
from typing import Any

from trtspec.runtime.grammar.compile import CompiledGrammar
from trtspec.runtime.grammar.masking import mask_logits, mask_probs, unpack_bitmask


class SequenceGrammar:
    """A sequence's xgrammar matcher and this step's allowed tokens per verify row."""

    def __init__(self, grammar: CompiledGrammar):
        import xgrammar

        self._xgrammar = xgrammar
        self.matcher = xgrammar.GrammarMatcher(grammar.compiled)
        self.vocab_size = grammar.vocab_size
        self.bitmask: Any = None  # [rows, ceil(vocab / 32)] int32: this step's verify rows, packed
        self.cut_tokens = 0       # draft tokens the grammar refused, over the request

    # -- before verification --------------------------------------------------------------------

    def constrain(self, draft: Any, stats: Any = None) -> Any:
        """The draft the grammar allows (None when nothing of it is), and this step's rows;
        refused tokens are counted in `stats.num_grammar_cut_tokens` (a GenerationStats)."""
        if draft is None:
            self.bitmask = self._walk([], [])[1]
            return None
        tokens = draft.token_ids.tolist()
        if draft.tree is None:
            parents = list(range(-1, len(tokens) - 1))
        else:
            parents = list(draft.tree.parent)
        kept, self.bitmask = self._walk(tokens, parents)
        if len(kept) == len(tokens):
            return draft
        self.cut_tokens += len(tokens) - len(kept)
        if stats is not None:
            stats.num_grammar_cut_tokens += len(tokens) - len(kept)
        if not kept:
            return None
        return _chain_prefix(draft, len(kept)) if draft.tree is None else _subtree(draft, kept)

    def _walk(self, tokens: list[int], parents: list[int]) -> tuple[list[int], Any]:
        """Depth-first over the nodes (a chain: each node's parent is the one before): the nodes
        whose path the grammar accepts, and their packed allowed rows [1 + len(those)] (root first)."""
        import torch

        xgrammar, matcher = self._xgrammar, self.matcher
        bitmask = xgrammar.allocate_token_bitmask(1 + len(tokens), self.vocab_size)
        children: dict[int, list[int]] = {}
        for node, parent in enumerate(parents):
            children.setdefault(parent, []).append(node)
        kept: list[int] = []

        def fill(row: int) -> None:
            if matcher.is_terminated():
                bitmask[row] = -1
            else:
                matcher.fill_next_token_bitmask(bitmask, row)

        def visit(node: int) -> None:
            row = 0 if node < 0 else 1 + node
            for child in children.get(node, []):
                token = tokens[child]
                # the row's bitmask first: xgrammar warns on every special token it is handed
                allowed = 0 <= token < self.vocab_size and int(bitmask[row, token >> 5]) >> (token & 31) & 1
                if not allowed or matcher.is_terminated() or not matcher.accept_token(token):
                    continue
                kept.append(child)
                fill(1 + child)
                visit(child)
                matcher.rollback(1)

        fill(0)
        visit(-1)
        kept.sort()
        if len(kept) == len(tokens):
            return kept, bitmask
        return kept, bitmask[torch.tensor([0] + [1 + node for node in kept])]

    # -- verification ---------------------------------------------------------------------------

    def mask(self, logits: Any) -> Any:
        """# logits: [rows, vocab] for this step's verify rows -> float32, -inf where not allowed"""
        return mask_logits(logits, self.bitmask[: logits.shape[0]])

    def mask_draft_probs(self, draft_probs: Any) -> Any:
        """The draft's distributions masked like the target's rows they are checked against.
        # draft_probs: [k, vocab] (row i: the distribution draft token i was drawn from)"""
        return mask_probs(draft_probs, self.bitmask[: draft_probs.shape[0]])

    def mask_next(self, logits: Any) -> Any:
        """Logits for the token after the committed ones (a prefill's first token), masked.
        # logits: [1, vocab] -> [1, vocab] float32"""
        return mask_logits(logits, self._walk([], [])[1])

    def allowed_rows(self) -> Any:
        """This step's verify rows as bool (for tests and inspection). # -> [rows, vocab] bool"""
        return unpack_bitmask(self.bitmask, self.vocab_size)

    def next_allowed(self) -> Any:
        """The allowed tokens after the committed ones. # -> [1, vocab] bool"""
        return unpack_bitmask(self._walk([], [])[1], self.vocab_size)

    # -- commit ---------------------------------------------------------------------------------

    def advance(self, committed: list[int]) -> None:
        """Accept the step's committed tokens (none after an end-of-sequence token)."""
        for token in committed:
            if self.matcher.is_terminated():
                return
            if not self.matcher.accept_token(int(token)):
                raise RuntimeError(f"the grammar refused committed token {token}; masks and matcher disagree")

    @property
    def complete(self) -> bool:
        """True once the output is a whole sentence of the grammar."""
        return bool(self.matcher.is_completed())


def _chain_prefix(draft: Any, n: int) -> Any:
    """The first n tokens of a chain draft (its distributions and early-layer rows with them)."""
    hidden = draft.hidden[: n + 1] if draft.hidden is not None else None  # rows for [pending] + tokens[:n]
    draft_probs = draft.draft_probs[:n] if draft.draft_probs is not None else None
    return dataclasses.replace(draft, token_ids=draft.token_ids[:n], draft_probs=draft_probs, hidden=hidden)


def _subtree(draft: Any, kept: list[int]) -> Any:
    """A tree draft with only the `kept` nodes (closed under ancestors, in tree order)."""
    import torch

    from trtspec.runtime.verify.tree import Tree

    tree = Tree([draft.tree.paths[node] for node in kept])
    index = torch.tensor(kept)
    score_rank = [draft.score_rank[node] for node in kept] if draft.score_rank is not None else None
    draft_probs = draft.draft_probs[index] if draft.draft_probs is not None else None
    return dataclasses.replace(draft, token_ids=draft.token_ids[index], tree=tree, score_rank=score_rank,
                               draft_probs=draft_probs)
