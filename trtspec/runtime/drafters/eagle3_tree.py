"""EAGLE-3 tree drafting, batched over sessions: one head forward per tree depth.

Static trees (greedy, `propose_trees`): every session fills the same tree (the engine's eagle_choices). At depth d each node takes the
rank-th most likely token of its parent's head logits; the nodes of depth d that have children
are fed to the head in one forward for all sessions, each attending to its committed positions
and its own ancestors among the nodes fed before (a tree mask over its cache), at EAGLE position
base + d. Dynamic trees (EAGLE-2, greedy and sampled, `propose_dynamic_trees`): each session grows
its own tree (trtspec.runtime.drafters.dynamic_tree), the frontiers of all sessions in one forward
per depth. The fed nodes leave the cache when the proposal ends (Eagle3Drafter.propose_batch).
"""

from __future__ import annotations

from typing import Any

from trtspec.runtime.drafters.base import Draft
from trtspec.runtime.drafters.head_feed import HeadFeed


def propose_trees(drafter: Any, sessions: list[Any], tokens: list[list[int]], last: list[tuple]) -> list[Draft]:
    """One tree draft per session. `last`: per session (logits, h) of its last committed position."""
    import torch

    tree = sessions[0].tree
    node_tokens = [[0] * tree.num_nodes for _ in sessions]
    node_logits = [{-1: logits} for logits, _ in last]
    node_h = [{-1: h} for _, h in last]
    fed: list[int] = []  # tree nodes in cache order after each session's committed positions
    for depth in range(1, tree.max_depth + 1):
        level = [n for n in range(tree.num_nodes) if tree.depth[n] == depth]
        for s, session in enumerate(sessions):
            tops: dict[int, list[int]] = {}  # per parent its ranked tokens, once for all its children
            for node in level:
                parent = tree.parent[node]
                if parent not in tops:
                    tops[parent] = torch.topk(node_logits[s][parent], tree.max_rank(parent) + 1).indices.tolist()
                node_tokens[s][node] = int(session.to_target_vocab(tops[parent][tree.rank[node]]))
        expand = [n for n in level if tree.children[n]]
        if not expand:
            break
        # [expand, fed]: which nodes fed before each expanded node sees (its ancestors); the same for every session
        seen = tree.ancestors[expand][:, fed] if fed else None
        feeds = []
        for s, session in enumerate(sessions):
            committed = session.committed
            past = committed + len(fed)
            mask = torch.zeros(len(expand), past + len(expand), dtype=torch.bool)
            mask[:, :committed] = True
            if seen is not None:
                mask[:, committed:past] = seen
            mask[:, past:] = torch.eye(len(expand), dtype=torch.bool)  # and itself
            base = len(tokens[s]) - 2  # EAGLE position of the root (it predicts depth 1)
            feeds.append(HeadFeed(session.kv, [node_tokens[s][n] for n in expand],
                                  torch.stack([node_h[s][tree.parent[n]] for n in expand]),
                                  positions=[base + depth] * len(expand), mask=mask, num_logits=len(expand)))
        for s, (logits, h) in enumerate(drafter.forward(feeds)):
            for row, node in enumerate(expand):
                node_logits[s][node], node_h[s][node] = logits[row], h[row]
        fed.extend(expand)
    return [Draft(torch.tensor(node_tokens[s], dtype=torch.long), tree=tree) for s in range(len(sessions))]


def propose_dynamic_trees(drafter: Any, sessions: list[Any], tokens: list[list[int]], last: list[tuple],
                          budgets: list[int]) -> list[Draft]:
    """One EAGLE-2 dynamic tree per session (its `tree` is a TreeShape; `budgets`: nodes each may
    verify). Every depth after the first is ONE head forward over every session's frontier, each
    frontier node fed with the pre-norm h of the forward that proposed it, at EAGLE position
    base + depth, under a tree mask over the session's cache."""
    import torch

    from trtspec.runtime.drafters.dynamic_tree import TreeSearch, grow

    searches = [TreeSearch(s.tree, budget, logits, h, s.to_target_vocab)
                for s, budget, (logits, h) in zip(sessions, budgets, last, strict=True)]

    def feed(i, search, nodes):
        base = len(tokens[i]) - 2  # EAGLE position of the root (it predicts depth 1)
        return HeadFeed(sessions[i].kv, [search.tokens[n] for n in nodes], torch.stack([search.state[n] for n in nodes]),
                        positions=[base + search.levels_done] * len(nodes),
                        mask=search.feed_mask(sessions[i].committed), num_logits=len(nodes))

    return grow(searches, feed, drafter.forward)
