"""An external draft model: any smaller causal LM with the target's tokenizer, on its own paged cache.

Each session keeps which token ids its slice of the draft model's cache holds. A proposal first
rolls that cache back to the longest prefix it shares with the committed sequence (accepted draft
tokens stay cached, rejected ones are dropped) and feeds the rest (catch-up); the last row's
logits start the draft. Chains then go token by token: argmax under greedy, otherwise a sample
from the draft's processed distribution (same temperature, top-k, top-p as the target), whose
probabilities go to the rejection sampler. With a confidence threshold, drafting stops once the
draft's probability of its own token falls below it.

Dynamic trees (a session whose `tree` is a TreeShape, chosen per step by the load policy or a
schedule row): the same EAGLE-2 search as the EAGLE-3 head (trtspec.runtime.drafters.dynamic_tree),
each depth's frontier fed in one forward for every session at position committed + depth - 1
under the search's tree mask; candidates are each node's top-k tokens by raw draft
log-probability, under sampling too (the verifier's multi-candidate rejection treats every child
as a point mass, so the choice of candidates never changes the output distribution). After a tree
proposal the cache is rolled back to the committed prefix: the expanded nodes are dropped, and the
next catch-up re-feeds the accepted path with the target's next token in the same forward as the
other sessions' catch-up (the simplest correct choice: no KV moves in the draft pool, at the price
of the accepted tokens fed twice).

Batched: the catch-up is ONE forward of the draft model over all sessions, then every chain
position, and every tree depth, is one forward over all sessions still drafting, through
trtspec.runtime.forward.batch like the target.
"""

from __future__ import annotations

from trtspec.runtime.drafters.base import ChainDrafts, Drafter, DraftSession
from trtspec.runtime.verify import sampling
from trtspec.runtime.verify.tree import TreeShape


class DraftModelDrafter(Drafter):
    kind = "draft-model"
    session_class: type | None = None  # the sessions' class; None: DraftModelSession (layerskip: its own)

    def __init__(self, model):
        from trtspec.runtime.forward.attention import use_paged_attention

        use_paged_attention(model)
        self.model = model
        self.kv_config = model.config

    def session(self, prompt_ids, params, generator, *, confidence_threshold=0.0, tree=None,
                kv=None) -> DraftModelSession:
        if kv is None:
            raise ValueError(f"a {self.kind} session needs its view of a KV pool (kv=)")
        return (self.session_class or DraftModelSession)(kv, params, generator, confidence_threshold,
                                                         tree if isinstance(tree, TreeShape) else None)

    def propose_batch(self, sessions, tokens, max_lens):
        from trtspec.runtime.forward.batch import Feed

        # 1. Catch every session up on the committed tokens: one forward, the last row starts its draft.
        feeds = [Feed(s.kv, s.catch_up(seq)) for s, seq in zip(sessions, tokens, strict=True)]
        roots = self._forward(sessions, feeds)
        for session, feed in zip(sessions, feeds, strict=True):
            session.cached.extend(feed.token_ids)
        drafts = [None] * len(sessions)
        trees = [i for i, s in enumerate(sessions) if s.tree is not None]
        chains = [i for i in range(len(sessions)) if sessions[i].tree is None]
        # 2. Dynamic trees, then chains, each one forward per depth or position for all sessions.
        if trees:
            for i, draft in zip(trees, self._trees([sessions[i] for i in trees], [max_lens[i] for i in trees],
                                                   [roots[i][-1] for i in trees]), strict=True):
                drafts[i] = draft
        if chains:
            for i, draft in zip(chains, self._chains([sessions[i] for i in chains], [max_lens[i] for i in chains],
                                                     [roots[i] for i in chains]), strict=True):
                drafts[i] = draft
        return drafts

    def _chains(self, sessions, max_lens, roots):
        """Token by token from each session's root logits; drafted tokens stay in the cache."""
        from trtspec.runtime.forward.batch import Feed

        chains, rows = ChainDrafts(len(sessions)), list(roots)
        active = list(range(len(sessions)))
        for position in range(max(max_lens)):
            fed = [i for i in active if chains.take(i, sessions[i], rows[i], position) is not None
                   and len(chains.ids[i]) < max_lens[i]]
            if not fed:
                break
            logits = self._forward([sessions[i] for i in fed], [Feed(sessions[i].kv, chains.ids[i][-1:]) for i in fed])
            for i, row in zip(fed, logits, strict=True):
                sessions[i].cached.append(chains.ids[i][-1])
                rows[i] = row
            active = fed
        return chains.drafts()

    def _forward(self, sessions, feeds):
        """One draft forward of the catch-up or a chain position: per feed its logits (a drafter
        that keeps more of the forward overrides this: layerskip)."""
        from trtspec.runtime.forward.batch import forward

        return forward(self.model, feeds)[0]

    def _trees(self, sessions, budgets, roots):
        """One EAGLE-2 tree per session (`budgets`: nodes each may verify); the expanded nodes
        leave the cache at the end. # roots: per session [vocab_size] logits"""
        from trtspec.runtime.drafters.dynamic_tree import TreeSearch, grow
        from trtspec.runtime.forward.batch import Feed, forward

        searches = [TreeSearch(s.tree, budget, root, None, _same_vocab)
                    for s, budget, root in zip(sessions, budgets, roots, strict=True)]
        committed = [s.kv.length for s in sessions]

        def feed(i, search, nodes):
            return Feed(sessions[i].kv, [search.tokens[n] for n in nodes],
                        positions=[committed[i] + search.levels_done - 1] * len(nodes),
                        mask=search.feed_mask(committed[i]), num_logits=len(nodes))

        def draft_forward(feeds):  # a draft model carries no state between depths
            return [(rows, [None] * rows.shape[0]) for rows in forward(self.model, feeds)[0]]

        try:
            return grow(searches, feed, draft_forward)
        finally:
            for session, length in zip(sessions, committed, strict=True):
                session.kv.length = length  # cached still lists exactly the committed tokens


def _same_vocab(ids):
    """The draft model shares the target's vocabulary: its ids are the target's."""
    return ids


class DraftModelSession(DraftSession):
    def __init__(self, kv, params: sampling.SamplingParams, generator, confidence_threshold: float,
                 tree: TreeShape | None = None):
        self.kv = kv
        self.tree = tree  # a dynamic tree to grow (set per step by the engine), or None: chains
        self.params = params
        self.generator = generator
        self.threshold = confidence_threshold
        self.cached: list[int] = []  # token ids whose KV is in this session's cache, in order

    def backlog(self, num_tokens: int) -> int:
        return max(0, num_tokens - 1 - len(self.cached))  # at least the last token is always fed

    def catch_up(self, tokens: list[int]) -> list[int]:
        """Roll the cache back to the prefix it shares with `tokens` (keeping >= 1 token to feed);
        return what to feed."""
        shared = 0
        limit = min(len(self.cached), len(tokens) - 1)
        while shared < limit and self.cached[shared] == tokens[shared]:
            shared += 1
        del self.cached[shared:]
        self.kv.length = shared
        return tokens[shared:]

    def choose(self, logits):
        """(token, draft probabilities or None, confident) from one row of draft logits.
        # logits: [1, vocab_size]"""
        if self.params.greedy:
            token = sampling.greedy_tokens(logits[0])
            confidence = float(logits[0].softmax(-1)[token]) if self.threshold > 0 else 1.0
            return token, None, confidence >= self.threshold
        probs = sampling.logits_to_probs(logits, self.params)
        token = int(sampling.sample(probs, self.generator)[0])
        return token, probs[0], float(probs[0, token]) >= self.threshold
