"""Static draft trees as data, and their one-pass verification with a tree attention mask.

A tree is a list of index paths, like TensorRT-LLM's `eagle_choices`: [[0], [1], [0, 0]] means
the drafter's top-1 and top-2 tokens at depth 1, and the top-1 child of the top-1 node at
depth 2. Nodes are ordered by (depth, path), so every ancestor comes before its descendants.
From the paths we derive parents, depths and an ancestor mask (after Medusa's
`generate_medusa_buffers`); the verifier uses them and never special-cases a shape.

Verification feeds [pending] + all nodes in one target pass: node i sits at position
past + depth(i) and attends to the cache, the pending token and its own ancestors. Greedy
acceptance walks from the root, each time to the child whose token equals the target's argmax;
the KV of the accepted path is kept (kvcache.keep_positions), the rest dropped.
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


def verify_tree(engine, tokens, cache, session, draft, params, generator, stats, aux_ids) -> list[int]:
    """Verify a tree draft in one target pass (greedy); return the committed tokens."""
    import time

    import torch

    from trtspec.runtime.kvcache import keep_positions

    tree: Tree = draft.tree
    node_tokens = draft.token_ids.tolist()
    past = len(tokens) - 1
    width = 1 + tree.num_nodes
    # 2. One target pass: [pending] + nodes, positions by depth, tree attention mask.
    position_ids = torch.tensor([[past] + [past + d for d in tree.depth]])
    mask = torch.zeros(width, past + width, dtype=torch.bool)
    mask[:, : past + 1] = True
    mask[1:, past + 1:] = tree.ancestors
    started = time.perf_counter()
    logits, aux = engine._forward(tokens[-1:] + node_tokens, cache, num_logits=width, aux_ids=aux_ids,
                                  position_ids=position_ids, attention_mask=mask[None, None])
    # 3. Accept: walk down while a child carries the target's argmax.
    argmax = logits.argmax(dim=-1).tolist()
    path, node = [], -1
    while True:
        wanted = argmax[0 if node < 0 else 1 + node]
        child = next((c for c in tree.children[node] if node_tokens[c] == wanted), None)
        if child is None:
            break
        path.append(child)
        node = child
    # 4. Keep the KV of pending + the accepted path only.
    keep_positions(cache, past, [past] + [past + 1 + i for i in path])
    stats.verify_time_s += time.perf_counter() - started
    stats.num_target_passes += 1
    if aux_ids:
        session.on_verified(aux[[0] + [1 + i for i in path]])
    # 5. Statistics: a tree offers at most max_depth tokens along any path.
    stats.record_draft(tree.max_depth, len(path))
    return [node_tokens[i] for i in path] + [wanted]
