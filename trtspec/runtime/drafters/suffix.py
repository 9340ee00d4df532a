"""Suffix decoding: drafts from suffix trees over the request and over earlier responses.

SuffixDecoding (Oliaro et al. 2024, arXiv 2411.04975), as Arctic Inference's suffix cache does
it (vLLM `method: "suffix"`): every sequence's suffixes, cut at `depth` tokens, are counted in a
trie. A request's own trie holds its prompt and output so far; one global trie, shared by the
drafter, holds the outputs of earlier (and running) requests. Per step, for every match length m
(the last m tokens found in a trie, m = 1, 2, ... until they are not), the continuation is scored
by frequency: a child's probability is its count over its parent's, a path's the product along it.
A draft of at most `factor * m + offset` tokens (the draft length adapted to the match length) is
grown from the match: a chain along the most frequent child while its path probability stays at
least `min_token_prob`, or with `tree` a tree of the best-scored nodes (best-first, Arctic's
_speculate_tree). Its score is the sum of its nodes' probabilities; the best-scored draft over
both tries and every m wins (ties: the longer match). Defaults are vLLM's: depth 24, factor 1,
min_token_prob 0.1.

The cap is the mode's own, speculative.suffix.max_draft_len (24), not the engine-wide
speculative.max_draft_len: suffix decoding wants a high cap, since the match length already keeps
drafts short where they would fail, and upstream runs it at the tree depth (vLLM
vllm/config/speculative.py, SpeculativeConfig._validate_suffix_decoding: num_speculative_tokens
defaults to suffix_decoding_max_tree_depth, 24, treated "as a maximum limit"; Arctic Inference
arctic_inference/vllm/config.py: num_speculative_tokens = suffix_cache_max_depth, 64). A suffix
engine is built for that cap (builders.engine_json.engine_max_draft_len), the load policy chooses
up to it, and `propose` never drafts more than the drafter's own `max_draft_len`, whatever it is
asked. Capped at 8 on SmolLM2's
copy-heavy edit prompts it accepts 2.79 tokens a step verifying 2.7 draft tokens, prompt lookup 2.90
verifying 3.6; at 16 it does 2.91 (2.99 with depth 64) at 2.9 verified while prompt lookup's fixed
length wastes more (3.21 at 6.1): docs/BENCHMARKS-log.md, "Suffix decoding's draft cap".

The global trie is bounded: `max_cached_requests` responses and `max_cached_nodes` trie nodes at
most (its memory: about 150 bytes a node in CPython); past either, the oldest responses are
evicted whole (FIFO, as Arctic's cache), their suffixes' counts taken back out. A response is
added as it is generated, so a running request's tokens already serve the others.

Contract deviation from drafters/base.py: the drafter is not read-only (its global trie is
mutable state shared by sessions). Sessions are opened and asked in the scheduler's loop thread
only, one at a time, so no lock is needed; a session never reads another request's prompt. Engine
variants that share the drafter (bench's modes and tune's shapes) run one after another, never at
once; two engines stepping at the same time on one SuffixDrafter would need a lock here.
Drafts are point masses chosen from past tokens only, so rejection sampling keeps sampling
lossless and greedy output is the target's own.

Why not arctic-inference itself: 0.3.0 is an sdist only (no wheel), whose build needs torch>=2.10,
nanobind, cmake and protobuf==5.29.6 at build time (trtspec pins protobuf 6) and, with pip's build
isolation, downloads a CUDA torch; this file is the same algorithm in about 200 lines of Python.
"""

from __future__ import annotations

import heapq
from collections import OrderedDict
from typing import Any

from trtspec.runtime.drafters.base import Draft, Drafter, DraftSession

DEPTH, FACTOR, OFFSET, MIN_TOKEN_PROB = 24, 1.0, 0.0, 0.1       # vLLM's suffix_decoding_* defaults
MAX_DRAFT_LEN = 24   # vLLM's cap for suffix: num_speculative_tokens = suffix_decoding_max_tree_depth (spec.suffix)
MAX_CACHED_REQUESTS, MAX_CACHED_NODES = 10_000, 1_000_000
# Draft.match is capped here: the load policy weighs chains drafted only on matches of at least M
# tokens for every M it has seen (policy.ngram_matches), and 23 levels x max_draft_len choices per
# step would price far more options than the few n-gram lookup has, for little more information
MATCH_LEVELS = 8


class _Node:
    __slots__ = ("count", "children")

    def __init__(self) -> None:
        self.count = 0
        self.children: dict[int, _Node] | None = None


class SuffixTrie:
    """Counts of every substring of at most `depth` tokens of the sequences it holds: the node of
    path p counts p's occurrences. Sequences grow at their end (`extend`) and leave whole (`remove`)."""

    def __init__(self, depth: int = DEPTH):
        self.depth = depth
        self.root = _Node()
        self.num_nodes = 0
        self.seqs: dict[int, list[int]] = {}
        # per sequence: the nodes of its suffixes shorter than depth, [root, last token, last 2, ...]
        self._open: dict[int, list[_Node]] = {}

    def extend(self, seq_id: int, tokens: list[int]) -> None:
        # The inner loop runs up to depth times per token, and a request's first draft indexes its
        # whole prompt, so it is written out: no method call or second dict lookup per node (0.83x
        # the time of the loop calling a method per node, about 25 us a token at depth 24 here).
        seq = self.seqs.setdefault(seq_id, [])
        open_nodes = self._open.setdefault(seq_id, [self.root])
        root, depth, added = self.root, self.depth, 0
        for token in tokens:
            seq.append(token)
            grown = [root]
            for node in open_nodes:
                children = node.children
                if children is None:
                    children = node.children = {}
                child = children.get(token)
                if child is None:
                    child = children[token] = _Node()
                    added += 1
                child.count += 1
                if len(grown) < depth:
                    grown.append(child)
            root.count += 1
            open_nodes[:] = grown
        self.num_nodes += added

    def remove(self, seq_id: int) -> None:
        """Take every suffix of the sequence back out; nodes left with no count go."""
        seq = self.seqs.pop(seq_id, [])
        self._open.pop(seq_id, None)
        for start in range(len(seq)):
            node = self.root
            node.count -= 1
            for token in seq[start:start + self.depth]:
                assert node.children is not None
                child = node.children[token]
                child.count -= 1
                if child.count == 0:
                    del node.children[token]
                    self.num_nodes -= _size(child)
                    break
                node = child

    def find(self, pattern: list[int]) -> _Node | None:
        node = self.root
        for token in pattern:
            if node.children is None or token not in node.children:
                return None
            node = node.children[token]
        return node


def _size(node: _Node) -> int:
    stack, count = [node], 0
    while stack:
        n = stack.pop()
        count += 1
        if n.children:
            stack.extend(n.children.values())
    return count


def speculate(trie: SuffixTrie, context: list[int], max_len: int, factor: float, offset: float,
              min_token_prob: float, tree: bool) -> tuple[float, int, list[int], list[int]]:
    """(score, match length, tokens, parents) of the best draft from `trie` continuing `context`;
    parents[i] is the index of token i's parent in tokens (-1: the root)."""
    best: tuple[float, int, list[int], list[int]] = (0.0, 0, [], [])
    for match in range(1, min(len(context), trie.depth)):
        node = trie.find(context[-match:])
        if node is None:
            break
        budget = min(max_len, int(match * factor + offset + 1e-6))
        tokens, parents, score = (_tree if tree else _chain)(node, budget, min_token_prob)
        if tokens and score >= best[0]:
            best = (score, match, tokens, parents)
    return best


def _chain(node: _Node, budget: int, min_token_prob: float) -> tuple[list[int], list[int], float]:
    tokens: list[int] = []
    prob, score = 1.0, 0.0
    while len(tokens) < budget and node.children:
        token, child = max(node.children.items(), key=lambda item: item[1].count)
        prob *= child.count / node.count
        if prob < min_token_prob:
            break
        tokens.append(token)
        score += prob
        node = child
    return tokens, list(range(-1, len(tokens) - 1)), score


def _tree(node: _Node, budget: int, min_token_prob: float) -> tuple[list[int], list[int], float]:
    tokens: list[int] = []
    parents: list[int] = []
    score, order = 0.0, 0
    heap: list[tuple[float, int, int, int, _Node]] = []   # (-prob, tie, token, parent index, node)

    def push(parent_node: _Node, prob: float, parent: int) -> None:
        nonlocal order
        for token, child in (parent_node.children or {}).items():
            p = prob * child.count / parent_node.count
            if p >= min_token_prob:
                order += 1
                heapq.heappush(heap, (-p, order, token, parent, child))

    push(node, 1.0, -1)
    while heap and len(tokens) < budget:
        negative, _, token, parent, child = heapq.heappop(heap)
        tokens.append(token)
        parents.append(parent)
        score -= negative
        push(child, -negative, len(tokens) - 1)
    return tokens, parents, score


class GlobalCache:
    """The global trie over responses, bounded in responses and in nodes (oldest evicted first)."""

    def __init__(self, depth: int, max_cached_requests: int, max_cached_nodes: int):
        self.trie = SuffixTrie(depth)
        self.max_cached_requests, self.max_cached_nodes = max_cached_requests, max_cached_nodes
        self.cached: OrderedDict[int, None] = OrderedDict()   # response ids, oldest first
        self._next_id = 0
        self.num_evicted = 0

    @property
    def enabled(self) -> bool:
        return self.max_cached_requests > 0

    def open(self) -> int | None:
        """A slot for a new response (evicting the oldest past max_cached_requests), or None when off."""
        if not self.enabled:
            return None
        while len(self.cached) >= self.max_cached_requests:
            self._evict_oldest()
        self._next_id += 1
        self.cached[self._next_id] = None
        return self._next_id

    def add(self, response: int | None, tokens: list[int]) -> None:
        if response is None or response not in self.cached or not tokens:
            return
        self.trie.extend(response, tokens)
        while self.trie.num_nodes > self.max_cached_nodes and self.cached:
            self._evict_oldest()

    def _evict_oldest(self) -> None:
        oldest, _ = self.cached.popitem(last=False)
        self.trie.remove(oldest)
        self.num_evicted += 1


class SuffixDrafter(Drafter):
    kind = "suffix"

    def __init__(self, depth: int = DEPTH, factor: float = FACTOR, offset: float = OFFSET,
                 min_token_prob: float = MIN_TOKEN_PROB, tree: bool = False,
                 max_cached_requests: int = MAX_CACHED_REQUESTS, max_cached_nodes: int = MAX_CACHED_NODES,
                 max_draft_len: int = MAX_DRAFT_LEN):
        if (depth < 2 or factor <= 0 or not 0 <= min_token_prob <= 1 or max_cached_requests < 0
                or max_cached_nodes < 1 or max_draft_len < 1):
            raise ValueError(f"suffix needs depth >= 2, factor > 0, 0 <= min_token_prob <= 1, max_cached_requests >= 0, "
                             f"max_cached_nodes >= 1 and max_draft_len >= 1 (got {depth}, {factor}, {min_token_prob}, "
                             f"{max_cached_requests}, {max_cached_nodes}, {max_draft_len})")
        self.max_draft_len = max_draft_len        # the mode's own cap (bench --compare-modes sizes its variant by it)
        self.depth, self.factor, self.offset = depth, factor, offset
        self.min_token_prob, self.use_tree = min_token_prob, tree  # not `tree`: Drafter.tree is a static tree
        self.max_cached_requests, self.max_cached_nodes = max_cached_requests, max_cached_nodes
        self.cache = GlobalCache(depth, max_cached_requests, max_cached_nodes)

    def session(self, prompt_ids, params, generator, *, confidence_threshold=0.0, tree=None, kv=None) -> SuffixSession:
        return SuffixSession(self, len(prompt_ids))


class SuffixSession(DraftSession):
    def __init__(self, drafter: SuffixDrafter, num_prompt: int):
        self.drafter = drafter
        self.local = SuffixTrie(drafter.depth)
        self.num_prompt = num_prompt
        self.indexed = 0                          # tokens[:indexed] are in the request's trie
        self.response = drafter.cache.open()      # this request's output in the global trie

    def propose(self, tokens: list[int], max_len: int) -> Draft | None:
        d = self.drafter
        # 1. Index what was committed since the last draft: the request's trie, the output globally.
        if len(tokens) > self.indexed:
            self.local.extend(0, tokens[self.indexed:])
            d.cache.add(self.response, tokens[max(self.indexed, self.num_prompt):])
            self.indexed = len(tokens)
        # 2. The best-scored draft from either trie, over every match length, at most the mode's cap.
        context, max_len = tokens[-d.depth:], min(max_len, d.max_draft_len)
        drafts = [speculate(trie, context, max_len, d.factor, d.offset, d.min_token_prob, d.use_tree)
                  for trie in (self.local, d.cache.trie)]
        score, match, ids, parents = max(drafts, key=lambda draft: draft[0])
        if not ids:
            return None
        return as_draft(ids, parents, min(match, MATCH_LEVELS))


def as_draft(ids: list[int], parents: list[int], match: int) -> Draft:
    """A chain, or a tree (verify.tree.Tree) whose ranks are each node's order among its siblings
    (best first, as drafted), its tokens in the Tree's node order."""
    import torch

    if all(parent == i - 1 for i, parent in enumerate(parents)):
        return Draft(torch.tensor(ids, dtype=torch.long), match=match)
    from trtspec.runtime.verify.tree import Tree

    paths: list[tuple[int, ...]] = []
    siblings: dict[int, int] = {}
    for parent in parents:
        rank = siblings.get(parent, 0)
        siblings[parent] = rank + 1
        paths.append((paths[parent] if parent >= 0 else ()) + (rank,))
    tree = Tree([list(p) for p in paths])
    by_path = dict(zip(paths, ids, strict=True))
    return Draft(torch.tensor([by_path[tuple(p)] for p in tree.paths], dtype=torch.long), tree=tree, match=match)


def make(parts: Any) -> SuffixDrafter:
    """The mode's factory (trtspec.modes row `suffix`); options["suffix"] = the spec section's fields."""
    return SuffixDrafter(**(parts.options.get("suffix") or {}))
