"""An external draft model: any smaller causal LM with the target's tokenizer, with its own cache.

The session keeps the draft model's KV cache and the token ids it holds. Each proposal crops
that cache to the longest prefix it shares with the committed sequence (accepted draft tokens
stay cached; rejected ones are dropped), feeds what is new, then drafts token by token: argmax
under greedy, otherwise a sample from the draft's processed distribution (same temperature,
top-k, top-p as the target), whose probabilities go to the rejection sampler. With a confidence
threshold, drafting stops once the draft's probability of its own token falls below it.
"""

from __future__ import annotations

from trtspec.runtime import sampling
from trtspec.runtime.drafters.base import Draft, Drafter, DraftSession


class DraftModelDrafter(Drafter):
    kind = "draft-model"

    def __init__(self, model):
        self.model = model

    def session(self, prompt_ids, params, generator, *, confidence_threshold=0.0, tree=None) -> DraftModelSession:
        return DraftModelSession(self.model, params, generator, confidence_threshold)


class DraftModelSession(DraftSession):
    def __init__(self, model, params: sampling.SamplingParams, generator, confidence_threshold: float):
        from transformers import DynamicCache

        self.model = model
        self.params = params
        self.generator = generator
        self.threshold = confidence_threshold
        self.cache = DynamicCache(config=model.config)
        self.cached: list[int] = []  # token ids whose KV is in self.cache, in order

    def _sync(self, tokens: list[int]) -> list[int]:
        """Crop the cache to the shared prefix (keeping >= 1 token to feed); return what to feed."""
        shared = 0
        limit = min(len(self.cached), len(tokens) - 1)
        while shared < limit and self.cached[shared] == tokens[shared]:
            shared += 1
        if shared < len(self.cached):
            from trtspec.runtime.kvcache import crop

            crop(self.cache, shared, self.model.config)
            del self.cached[shared:]
        return tokens[shared:]

    def propose(self, tokens: list[int], max_len: int) -> Draft | None:
        import torch

        feed = self._sync(tokens)
        draft_ids, draft_rows = [], []
        for position in range(max_len):
            logits = self.model(input_ids=torch.tensor([feed]), past_key_values=self.cache, use_cache=True,
                                logits_to_keep=1).logits[0, -1:].float()
            self.cached.extend(feed)
            if self.params.greedy:
                token = int(logits[0].argmax())
                confidence = float(logits[0].softmax(-1)[token]) if self.threshold > 0 else 1.0
            else:
                probs = sampling.logits_to_probs(logits, self.params)
                token = int(sampling.sample(probs, self.generator)[0])
                confidence = float(probs[0, token])
                draft_rows.append(probs[0])
            if confidence < self.threshold and position > 0:
                if draft_rows:
                    draft_rows.pop()
                break
            draft_ids.append(token)
            feed = [token]
        if not draft_ids:
            return None
        return Draft(torch.tensor(draft_ids, dtype=torch.long),
                     torch.stack(draft_rows) if draft_rows else None)
