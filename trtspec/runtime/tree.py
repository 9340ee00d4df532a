"""Static draft trees as data, and their one-pass verification with a tree attention mask.

A tree is a list of index paths, like TensorRT-LLM's `eagle_choices`: [[0], [1], [0, 0]] means
the drafter's top-1 and top-2 tokens at depth 1, and the top-1 child of the top-1 node at
depth 2. Nodes are ordered by (depth, path), so every ancestor comes before its descendants.
From the paths we derive parents, depths and an ancestor mask (after Medusa's
`generate_medusa_buffers`); the verifier uses them and never special-cases a shape.

Verification feeds [pending] + all nodes in one target pass: node i sits at position
past + depth(i) and attends to the cache, the pending token and its own ancestors. Greedy
acceptance walks from the root, each time to the child whose token equals the target's argmax;
the KV of the accepted path is kept (moved to follow the pending token), the rest dropped.
"""

from __future__ import annotations

from trtspec.errors import TrtSpecError


class Tree:
    """The static tree derived from index paths."""

    def __init__(self, paths: list[list[int]]):
        import torch

        unique = sorted({tuple(int(i) for i in p) for p in paths}, key=lambda p: (len(p), p))
        if not unique or any(len(p) == 0 or min(p) < 0 for p in unique):
            raise TrtSpecError(f"eagle_choices {paths!r}: need non-empty paths of non-negative ranks",
                               fix="write it like [[0], [1], [0, 0]]")
        index = {p: i for i, p in enumerate(unique)}
        missing = [list(p) for p in unique if len(p) > 1 and p[:-1] not in index]
        if missing:
            raise TrtSpecError(f"eagle_choices: {missing[0]} has no parent path {missing[0][:-1]}",
                               fix="list every prefix of every path")
        self.paths = [list(p) for p in unique]
        self.parent = [index[p[:-1]] if len(p) > 1 else -1 for p in unique]
        self.depth = [len(p) for p in unique]
        self.rank = [p[-1] for p in unique]
        self.num_nodes = len(unique)
        self.max_depth = max(self.depth)
        self.children: dict[int, list[int]] = {-1: []}
        for node, parent in enumerate(self.parent):
            self.children.setdefault(parent, []).append(node)
            self.children.setdefault(node, [])
        # ancestors[i, j]: node i may attend node j (j is i or an ancestor of i)
        self.ancestors = torch.zeros(self.num_nodes, self.num_nodes, dtype=torch.bool)
        for node in range(self.num_nodes):
            walk = node
            while walk >= 0:
                self.ancestors[node, walk] = True
                walk = self.parent[walk]

    @property
    def is_chain(self) -> bool:
        return all(len(kids) <= 1 for kids in self.children.values())

    def max_rank(self, node: int) -> int:
        """Highest child rank under `node` (-1: the root), i.e. how many top-k tokens it needs."""
        return max((self.rank[c] for c in self.children[node]), default=-1)


def tree_inputs(tree: Tree, past: int):
    """Position ids and attention mask for one verify pass over [pending] + the tree's nodes.

    `past` is the number of tokens already in the KV cache (the pending token sits at `past`).
    Node i sits at position past + depth(i) and attends to the cache, the pending token and its
    own ancestors. Returns (position_ids [1, 1 + num_nodes] long, mask [1 + num_nodes, past + 1 +
    num_nodes] bool).
    """
    import torch

    width = 1 + tree.num_nodes
    position_ids = torch.tensor([[past] + [past + d for d in tree.depth]])
    mask = torch.zeros(width, past + width, dtype=torch.bool)
    mask[:, : past + 1] = True
    mask[1:, past + 1:] = tree.ancestors
    return position_ids, mask


def accept_tree(tree: Tree, node_tokens: list[int], target_ids: list[int]) -> tuple[list[int], int]:
    """Greedy acceptance of a tree: walk from the root, each time to the child whose token is the
    target's argmax. Returns (accepted node indices, next token).

    # target_ids: [1 + num_nodes] argmax of the verify pass (row 0 follows the pending token,
    # row 1 + i follows node i)
    """
    path, node = [], -1
    while True:
        wanted = target_ids[0 if node < 0 else 1 + node]
        child = next((c for c in tree.children[node] if node_tokens[c] == wanted), None)
        if child is None:
            return path, wanted
        path.append(child)
        node = child
