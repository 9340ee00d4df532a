"""Draft trees as data, and their one-pass verification with a tree attention mask.

A tree is a list of index paths, like TensorRT-LLM's `eagle_choices`: [[0], [1], [0, 0]] means
the drafter's top-1 and top-2 tokens at depth 1, and the top-1 child of the top-1 node at
depth 2. Nodes are ordered by (depth, path), so every ancestor comes before its descendants.
From the paths we derive parents, depths and an ancestor mask (after Medusa's
`generate_medusa_buffers`); the verifier uses them and never special-cases a shape.

Verification feeds [pending] + all nodes in one target pass: node i sits at position
past + depth(i) and attends to the cache, the pending token and its own ancestors. Greedy
acceptance walks from the root, each time to the child whose token equals the target's argmax;
the KV of the accepted path is kept (moved to follow the pending token), the rest dropped.
Sampling walks the same way with multi-candidate rejection (`rejection_accept_tree`).

A static tree (`eagle_choices`) is one Tree for every step. A dynamic tree (EAGLE-2, `TreeShape`)
is a new Tree per sequence and step, built by the drafter from its own scores
(trtspec.runtime.drafters.dynamic_tree); the verifier treats both alike.
"""

from __future__ import annotations

from dataclasses import dataclass

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
    def room(self) -> int:
        """Cache slots a step may write past the committed tokens for this tree (its nodes)."""
        return self.num_nodes

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


def rejection_accept_tree(tree: Tree, node_tokens: list[int], target_probs, generator) -> tuple[list[int], int]:
    """Lossless sampling over a tree: multi-candidate rejection (SpecInfer's multi-step speculative
    sampling; EAGLE's evaluate_posterior), with each child a point-mass draft.

    # node_tokens: [num_nodes]; target_probs: [1 + num_nodes, vocab_size] (row 0 follows the
    # pending token, row 1 + i follows node i)
    At a node, start from the target's distribution there; try its children in rank order: child
    x is accepted with probability residual[x] (Leviathan's min(1, target / draft) with draft = 1 at
    x); on rejection x leaves the residual (residual[x] = 0, renormalized: normalize(max(0, target -
    draft))). An accepted child becomes the node; when every child is rejected, the next token is
    drawn from the residual. Each trial is a Leviathan step against the current residual, so the
    committed token is distributed exactly as the target's (tests/runtime/drafters/test_rt_dynamic_tree.py,
    chi-square). Returns (accepted node indices, next token).
    """
    import torch

    from trtspec.runtime.verify.sampling import sample

    path, node = [], -1
    while True:
        residual = target_probs[0 if node < 0 else 1 + node].clone()  # [vocab_size]
        accepted = None
        for child in tree.children[node]:
            token = node_tokens[child]
            mass = float(residual[token])
            if mass > 0.0 and float(torch.rand(1, generator=generator)) < mass:
                accepted = child
                break
            residual[token] = 0.0
            total = float(residual.sum())
            if total <= 0.0:  # every token the target allows was a rejected child: impossible but safe
                break
            residual /= total
        if accepted is None:
            return path, int(sample(residual.unsqueeze(0), generator)[0])
        path.append(accepted)
        node = accepted


@dataclass(frozen=True)
class TreeShape:
    """A dynamic (EAGLE-2) draft tree's budget: `depth` levels of expansion, `topk` children per
    expanded node (the `topk` best-scored nodes of a level are expanded), the `num_draft_tokens`
    best-scored candidates verified. Names elsewhere: SGLang --speculative-eagle-topk,
    --speculative-num-steps, --speculative-num-draft-tokens (which counts the root: ours + 1);
    EAGLE top_k, depth (ours - 1), total_token (ours + 1); TensorRT-LLM dynamic_tree_max_topK,
    max_draft_len, max_total_draft_tokens."""

    topk: int
    depth: int
    num_draft_tokens: int
    min_path_prob: float = 0.0
    """Of the num_draft_tokens best, verify only nodes whose path's draft probability (the product
    along it) is at least this (the best node always): a node the drafter gives 2 % costs a whole
    row of the verify pass for ~0.02 expected tokens. 0 verifies all of them."""

    @property
    def num_nodes(self) -> int:
        """Nodes one verify pass checks per sequence."""
        return self.num_draft_tokens

    @property
    def max_depth(self) -> int:
        return self.depth

    @property
    def num_candidates(self) -> int:
        """Candidates the expansion scores: topk at depth 1, topk^2 at every further depth."""
        return self.topk + (self.depth - 1) * self.topk * self.topk

    @property
    def room(self) -> int:
        """Cache slots a step may write past the committed tokens: the verified nodes in the
        target's cache, the expanded frontier ((depth - 1) topk nodes) in the head's."""
        return max(self.num_draft_tokens, (self.depth - 1) * self.topk)

    def problems(self) -> list[str]:
        """What makes this shape unusable, one phrase each (empty: fine)."""
        problems = [f"{name} must be at least 1 (got {value})" for name, value in
                    (("topk", self.topk), ("depth", self.depth), ("num_draft_tokens", self.num_draft_tokens))
                    if value < 1]
        if not problems and not self.depth <= self.num_draft_tokens <= self.num_candidates:
            problems.append(f"num_draft_tokens must lie between depth ({self.depth}) and the "
                            f"{self.num_candidates} candidates topk + (depth - 1) topk^2 scores "
                            f"(got {self.num_draft_tokens})")
        return problems
