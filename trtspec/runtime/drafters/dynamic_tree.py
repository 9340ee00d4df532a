"""EAGLE-2 dynamic draft trees: expand the likeliest nodes, keep the best-scored candidates.

One `TreeSearch` per sequence and step (after SafeAILab/EAGLE `Model.topK_genrate` and SGLang's
`build_tree_kernel_efficient`, written anew): the root's `topk` likeliest tokens are the depth-1
candidates; at every further depth the drafter runs the `topk` best-scored nodes of the level
before (one batched forward for every sequence), and each of them gets its `topk` likeliest
tokens as candidates. A candidate's score is its path's cumulative draft log-probability. In the
end the `budget` best-scored candidates are kept, less those whose path probability is under the
shape's `min_path_prob` (the best one always): a child's score is never above its parent's and its
depth is larger, so ordering by (score descending, depth) puts every parent before its children
and any prefix of that order is a tree by construction. The result is data (index paths -> Tree);
the verifier does not know the tree was dynamic.

The search knows nothing about models: the drafter feeds `to_feed()` nodes with `feed_mask` and
hands back one logits row (and one state row, e.g. EAGLE's pre-norm hidden state) per node.
"""

from __future__ import annotations

import math
from typing import Any

from trtspec.runtime.drafters.base import Draft
from trtspec.runtime.verify.tree import Tree, TreeShape


class TreeSearch:
    """One sequence's expansion. Candidates are numbered in creation order."""

    def __init__(self, shape: TreeShape, budget: int, root_logits: Any, root_state: Any, to_target: Any):
        self.topk = shape.topk
        self.depth = min(shape.depth, budget)
        self.budget = budget
        # scores are log-probabilities; below this a node is not worth its row of the verify pass
        self.floor = math.log(shape.min_path_prob) if shape.min_path_prob > 0 else -math.inf
        self.to_target = to_target    # draft-vocabulary ids -> target ids (EAGLE-3's d2t)
        self.tokens: list[int] = []
        self.parent: list[int] = []   # -1: child of the root
        self.rank: list[int] = []     # place among its parent's topk
        self.score: list[float] = []  # cumulative log-probability of the path
        self.level: list[int] = []    # depth, 1 for the root's children
        self.state: list[Any] = []    # the parent's state row, fed with the token when expanded
        self.fed: list[int] = []      # candidates already fed, in the drafter's cache order
        self._frontier = self._add_children(-1, root_logits, root_state)
        self.levels_done = 1

    @property
    def done(self) -> bool:
        return self.levels_done >= self.depth

    def to_feed(self) -> list[int]:
        """The candidates to expand next: the topk best-scored of the newest level."""
        return self._frontier

    def feed_mask(self, committed: int):
        """[rows, committed + len(fed) + rows] bool: each fed node sees the committed positions,
        its ancestors among the nodes fed before, and itself."""
        import torch

        rows, past = len(self._frontier), committed + len(self.fed)
        mask = torch.zeros(rows, past + rows, dtype=torch.bool)
        mask[:, :committed] = True
        column = {node: committed + i for i, node in enumerate(self.fed)}
        seen_rows, seen_columns = [], []  # every (row, key) a node sees beyond the committed ones: one write
        for row, node in enumerate(self._frontier):
            walk = self.parent[node]
            while walk >= 0:
                seen_rows.append(row)
                seen_columns.append(column[walk])
                walk = self.parent[walk]
            seen_rows.append(row)
            seen_columns.append(past + row)
        if seen_rows:
            mask[seen_rows, seen_columns] = True
        return mask

    def expanded(self, logits: Any, states: Any) -> None:
        """The drafter ran `to_feed()`: per node a logits row and a state row.
        # logits: [rows, draft_vocab]; states: [rows, state_size] (or a list of None)"""
        fed, children = self._frontier, []
        self.fed.extend(fed)
        for row, node in enumerate(fed):
            children.extend(self._add_children(node, logits[row], states[row]))
        self.levels_done += 1
        best = sorted(children, key=lambda c: (-self.score[c], c))[: self.topk]
        self._frontier = sorted(best)

    def _add_children(self, parent: int, logits: Any, state: Any) -> list[int]:
        top = logits.float().log_softmax(-1).topk(self.topk)
        base = self.score[parent] if parent >= 0 else 0.0
        depth = self.level[parent] + 1 if parent >= 0 else 1
        ids = self.to_target(top.indices).tolist()
        added = []
        for rank, (token, logp) in enumerate(zip(ids, top.values.tolist(), strict=True)):
            added.append(len(self.tokens))
            self.tokens.append(int(token))
            self.parent.append(parent)
            self.rank.append(rank)
            self.score.append(base + logp)
            self.level.append(depth)
            self.state.append(state)
        return added

    def tree(self) -> tuple[Tree, list[int]]:
        """The `budget` best-scored candidates as a Tree and its node tokens (in Tree order)."""
        tree, tokens, _ = self._kept()
        return tree, tokens

    def draft(self) -> Draft:
        """The kept tree as a Draft, each node's score rank with it (Draft.score_rank)."""
        import torch

        tree, tokens, score_rank = self._kept()
        return Draft(torch.tensor(tokens, dtype=torch.long), tree=tree, score_rank=score_rank, budget=self.budget)

    def _kept(self) -> tuple[Tree, list[int], list[int]]:
        order = sorted(range(len(self.tokens)), key=lambda c: (-self.score[c], self.level[c], c))
        kept = [c for i, c in enumerate(order[: self.budget]) if i == 0 or self.score[c] >= self.floor]
        chosen = set(kept)
        assert all(self.parent[c] < 0 or self.parent[c] in chosen for c in kept), "a kept node lost its parent"
        paths: dict[int, tuple[int, ...]] = {}
        for c in sorted(kept, key=lambda c: self.level[c]):
            paths[c] = (paths[self.parent[c]] if self.parent[c] >= 0 else ()) + (self.rank[c],)
        tree = Tree([list(p) for p in paths.values()])
        at = {p: c for c, p in paths.items()}
        place = {c: i for i, c in enumerate(kept)}
        candidates = [at[tuple(p)] for p in tree.paths]
        return tree, [self.tokens[c] for c in candidates], [place[c] for c in candidates]


def grow(searches: list[TreeSearch], feed: Any, forward: Any) -> list[Draft]:
    """Expand every search depth by depth until each is done, and return their drafts.
    `feed(i, search, nodes)`: session i's input for its frontier `nodes`; `forward(feeds)`: one
    batched forward over the feeds of the searches still growing, per feed (logits rows, states
    rows or None each)."""
    while True:
        active = [i for i, search in enumerate(searches) if not search.done]
        if not active:
            break
        feeds = [feed(i, searches[i], searches[i].to_feed()) for i in active]
        for i, (logits, states) in zip(active, forward(feeds), strict=True):
            searches[i].expanded(logits, states)
    return [search.draft() for search in searches]
