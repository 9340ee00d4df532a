"""What one engine step may draft, and how much drafting work each choice is.

A `Choice` is off, a chain of k tokens (optionally only where an n-gram match is long enough), or
a tree (a dynamic tree's shape at some node budget, or the engine's static tree). The load policy
(trtspec.runtime.policy.by_load) prices them; the step counters name them by `Choice.key`.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any


@dataclass(frozen=True)
class Choice:
    """One step's draft: off (length 0), a chain of `length` tokens, or a tree (`tree`: a
    TreeShape, or the engine's static Tree; `length` its depth). `probe`: only one sequence
    drafts it (trtspec.runtime.policy.plan.one_prober). `min_match` (chains of an n-gram drafter): only
    sequences whose lookup matched at least that many tokens draft (0: every match)."""

    length: int
    tree: Any = None
    probe: bool = False
    min_match: int = 0

    @property
    def key(self) -> str:
        """The name the step counters use: off, chain:K (chain:K@M with a min_match of M),
        tree:TOPK,DEPTH,NODES, tree:static:NODES, each prefixed probe: for a probe step."""
        if self.length == 0:
            name = "off"
        elif self.tree is None:
            name = f"chain:{self.length}" + (f"@{self.min_match}" if self.min_match else "")
        elif hasattr(self.tree, "topk"):
            name = f"tree:{self.tree.topk},{self.tree.depth},{self.tree.num_draft_tokens}"
        else:
            name = f"tree:static:{self.tree.num_nodes}"
        return f"probe:{name}" if self.probe else name


def tree_budgets(tree: Any) -> list[int]:
    """The node budgets the cost model weighs for the engine's tree: a dynamic tree's N, N/2,
    N/4, ... while not below its depth; a static tree only as it is."""
    if not hasattr(tree, "topk"):
        return [tree.num_nodes]
    budgets, nodes = [], tree.num_draft_tokens
    while nodes >= tree.depth and nodes not in budgets:
        budgets.append(nodes)
        nodes //= 2
    return sorted(budgets)


def with_budget(tree: Any, nodes: int) -> Any:
    """`tree` verifying `nodes` nodes (a dynamic tree; a static tree stays as it is)."""
    if not hasattr(tree, "topk") or nodes == tree.num_draft_tokens:
        return tree
    return replace(tree, num_draft_tokens=nodes)


def draft_work(choice: Choice) -> tuple[int, float]:
    """(forwards, rows per forward per sequence) one draft of `choice` makes: a chain of k, k
    forwards of one row; a dynamic tree of depth d, d forwards of (1 + topk (d - 1)) / d rows; a
    static tree, its depth in forwards over the nodes that have children."""
    tree = choice.tree
    if tree is None:
        return choice.length, 1.0
    depth = tree.max_depth
    if hasattr(tree, "topk"):
        return depth, (1 + tree.topk * (depth - 1)) / depth
    return depth, (1 + sum(1 for n in range(tree.num_nodes) if tree.children[n])) / depth
