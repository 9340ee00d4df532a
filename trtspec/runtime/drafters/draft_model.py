"""An external draft model: any smaller causal LM with the target's tokenizer, on its own paged cache.

Each session keeps which token ids its slice of the draft model's cache holds. A proposal first
rolls that cache back to the longest prefix it shares with the committed sequence (accepted draft
tokens stay cached, rejected ones are dropped), then drafts token by token: argmax under greedy,
otherwise a sample from the draft's processed distribution (same temperature, top-k, top-p as the
target), whose probabilities go to the rejection sampler. With a confidence threshold, drafting
stops once the draft's probability of its own token falls below it.

Batched: every draft position is ONE forward of the draft model over all sessions still drafting
(the first one also carries each session's catch-up tokens, the prompt on a session's first
proposal), through trtspec.runtime.batch like the target.
"""

from __future__ import annotations

from trtspec.runtime import sampling
from trtspec.runtime.drafters.base import ChainDrafts, Drafter, DraftSession


class DraftModelDrafter(Drafter):
    kind = "draft-model"

    def __init__(self, model):
        from trtspec.runtime.attention import use_paged_attention

        use_paged_attention(model)
        self.model = model
        self.kv_config = model.config

    def session(self, prompt_ids, params, generator, *, confidence_threshold=0.0, tree=None,
                kv=None) -> DraftModelSession:
        if kv is None:
            raise ValueError("a draft-model session needs its slice of the draft model's KV pool (kv=)")
        return DraftModelSession(kv, params, generator, confidence_threshold)

    def propose_batch(self, sessions, tokens, max_lens):
        from trtspec.runtime.batch import Feed, forward

        chains = ChainDrafts(len(sessions))
        active = list(range(len(sessions)))
        feeds = {i: sessions[i].catch_up(tokens[i]) for i in active}
        for position in range(max(max_lens)):
            if not active:
                break
            logits, _ = forward(self.model, [Feed(sessions[i].kv, feeds[i]) for i in active])
            still = []
            for i, row in zip(active, logits, strict=True):
                session = sessions[i]
                session.cached.extend(feeds[i])
                token = chains.take(i, session, row, position)
                if token is None:
                    continue
                feeds[i] = [token]
                if len(chains.ids[i]) < max_lens[i]:
                    still.append(i)
            active = still
        return chains.drafts()


class DraftModelSession(DraftSession):
    def __init__(self, kv, params: sampling.SamplingParams, generator, confidence_threshold: float):
        self.kv = kv
        self.params = params
        self.generator = generator
        self.threshold = confidence_threshold
        self.cached: list[int] = []  # token ids whose KV is in this session's cache, in order

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
            token = int(logits[0].argmax())
            confidence = float(logits[0].softmax(-1)[token]) if self.threshold > 0 else 1.0
            return token, None, confidence >= self.threshold
        probs = sampling.logits_to_probs(logits, self.params)
        token = int(sampling.sample(probs, self.generator)[0])
        return token, probs[0], float(probs[0, token]) >= self.threshold
