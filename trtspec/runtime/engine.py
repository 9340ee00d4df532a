"""The cpu speculative engine: draft -> one target pass -> accept -> commit, crop the KV cache.

Contract: `Engine.generate` returns exactly what the target alone would produce under the same
settings: greedy speculative output equals greedy plain output token for token (up to
floating-point near-ties between the one-token and the multi-token forward), and sampled output
follows the target's distribution (lossless rejection sampling). Per-request state lives in
local variables and the drafter's session, so several threads may call `generate` at once;
only the cumulative statistics are shared, under a lock.

KV invariant of the decode loop: the target's cache holds every committed token except the last
one (`pending`); each step feeds [pending] + draft and crops the cache back to the committed
tokens, so one target forward per step verifies the draft and produces the next token.
"""

from __future__ import annotations

import dataclasses
import functools
import threading
import time
from collections.abc import Iterator
from typing import Any

from trtspec.chat import prompt_ids
from trtspec.runtime import sampling
from trtspec.runtime.config import EngineConfig
from trtspec.runtime.policy import DraftPolicy
from trtspec.runtime.request import GenerationResult, OutputAssembler, StreamChunk, validate
from trtspec.runtime.stats import GenerationStats


class Engine:
    """A target model, its tokenizer and an optional drafter, run as one EngineConfig says."""

    def __init__(self, target: Any, tokenizer: Any, drafter: Any = None, config: EngineConfig | None = None):
        self.target = target
        self.tokenizer = tokenizer
        self.drafter = drafter
        self.config = config or EngineConfig()
        self.tree = None
        if self.config.eagle_choices:
            from trtspec.runtime.tree import Tree

            self.tree = Tree([list(path) for path in self.config.eagle_choices])
        self.eos_ids = _eos_ids(target, tokenizer)
        self._lock = threading.Lock()
        self._cumulative = GenerationStats()
        # The drafter's auxiliary states are taken as ModelOpt and vLLM take them, each layer's own
        # output through a forward hook (transformers' hidden_states ends with the final norm's
        # output instead), kept per thread because requests run concurrently. The handles are
        # kept: several engines may share one target (bench variants), and close() detaches them.
        self._layer_outputs = threading.local()
        layers = target.get_decoder().layers
        self._hooks = [layers[index - 1].register_forward_hook(functools.partial(self._keep_layer_output, index))
                       for index in (drafter.aux_layer_ids if drafter is not None else ())]

    # Read-only views of the config, for callers that predate it.
    mode = property(lambda self: self.config.mode)
    name = property(lambda self: self.config.label)
    max_draft_len = property(lambda self: self.config.max_draft_len)
    max_input_len = property(lambda self: self.config.max_input_len)
    max_seq_len = property(lambda self: self.config.max_seq_len)

    def variant(self, **changes: Any) -> Engine:
        """Another Engine over the same weights, tokenizer and drafter with some settings changed
        (dataclasses.replace on the config). Close it when done: it hooks the shared target."""
        return Engine(self.target, self.tokenizer, self.drafter, dataclasses.replace(self.config, **changes))

    def close(self) -> None:
        """Detach what this engine attached to the (possibly shared) target. Idempotent."""
        for handle in self._hooks:
            handle.remove()
        self._hooks = []

    def __enter__(self) -> Engine:
        return self

    def __exit__(self, *exc_info: Any) -> None:
        self.close()

    @classmethod
    def from_checkpoints(cls, target_dir, mode: str = "ngram", draft_dir=None, max_draft_len: int = 4,
                         **runtime_options: Any) -> Engine:
        """Load a target checkpoint (FP8 dequantized if it is one) and the drafter `mode` needs."""
        from trtspec.runtime.loading import engine_from_checkpoints

        return engine_from_checkpoints(cls, target_dir, mode=mode, draft_dir=draft_dir,
                                       max_draft_len=max_draft_len, **runtime_options)

    def cumulative_stats(self) -> GenerationStats:
        """A copy of the statistics summed over every finished request."""
        with self._lock:
            total = GenerationStats()
            total.merge(self._cumulative)
            return total

    def encode(self, prompt: str | list[int], chat: bool | None = None) -> list[int]:
        """Token ids for a prompt. Text goes through the chat template when the tokenizer has
        one (chat=None) or when chat=True; token ids are used as given."""
        if not isinstance(prompt, str):
            return [int(t) for t in prompt]
        return prompt_ids(self.tokenizer, prompt, chat)

    def generate(self, prompt: str | list[int], max_new_tokens: int = 64, temperature: float = 0.0,
                 top_k: int = 0, top_p: float = 1.0, seed: int | None = None, speculative: bool = True,
                 stream: bool = False, stop: list[str] | str | None = None, chat: bool | None = None):
        """Generate a continuation; a GenerationResult, or an iterator of StreamChunk if stream."""
        prompt_ids = self.encode(prompt, chat)
        validate(num_prompt_tokens=len(prompt_ids), max_input_len=self.max_input_len,
                 max_new_tokens=max_new_tokens, temperature=temperature, top_k=top_k, top_p=top_p)
        params = sampling.SamplingParams(temperature=float(temperature), top_k=int(top_k), top_p=float(top_p))
        stops = [stop] if isinstance(stop, str) else stop
        output = OutputAssembler(self.tokenizer, eos_ids=self.eos_ids, max_new_tokens=max_new_tokens, stop=stops)
        chunks = self._run(prompt_ids, params, seed, speculative and self.drafter is not None, output)
        if stream:
            return chunks
        stats = None
        for chunk in chunks:
            stats = chunk.stats
        return GenerationResult(token_ids=list(output.token_ids), text=output.text,
                                finish_reason=output.finish_reason, stats=stats, prompt_token_ids=prompt_ids)

    # -- the loop ---------------------------------------------------------------------------

    def _run(self, prompt_ids: list[int], params: sampling.SamplingParams, seed: int | None,
             speculative: bool, output: OutputAssembler) -> Iterator[StreamChunk]:
        import torch

        generator = torch.Generator()
        generator.manual_seed(seed if seed is not None else int(torch.seed()) % (2**63))
        stats = GenerationStats()
        room = self.max_seq_len - len(prompt_ids)
        steps = self._steps(prompt_ids, params, generator, speculative, stats)
        try:
            for committed in steps:
                output.add(committed)
                if output.finish_reason is None and len(output.token_ids) >= room:
                    output.finish_reason = "length"
                if output.finish_reason is not None:
                    break
                yield output.chunk(stats)
        finally:
            steps.close()
        stats.num_output_tokens = len(output.token_ids)
        with self._lock:
            self._cumulative.merge(stats)
        yield output.chunk(stats)

    def _steps(self, prompt_ids: list[int], params, generator, speculative: bool,
               stats: GenerationStats) -> Iterator[list[int]]:
        """Yield the tokens each target pass commits, forever; the caller stops it."""
        import torch
        from transformers import DynamicCache

        config = self.config
        session = None
        policy = DraftPolicy(config.max_draft_len, dynamic=config.dynamic_draft, floor=config.acceptance_floor)
        if speculative:
            session = self.drafter.session(prompt_ids, params, generator,
                                           confidence_threshold=config.confidence_threshold, tree=self.tree)
        aux_ids = self.drafter.aux_layer_ids if session is not None else ()
        cache = DynamicCache(config=self.target.config)
        tokens = list(prompt_ids)
        with torch.inference_mode():
            logits, aux = self._forward(tokens, cache, num_logits=1, aux_ids=aux_ids)
            first = self._choose(logits[-1:], params, generator)
            if session is not None and aux_ids:
                session.on_verified(aux)
        tokens.append(first)
        yield [first]
        while True:
            with torch.inference_mode():
                committed = self._step(tokens, cache, session, policy, params, generator, stats, aux_ids)
            tokens.extend(committed)
            yield committed

    def _step(self, tokens, cache, session, policy, params, generator, stats, aux_ids) -> list[int]:
        """One verify step, chain or tree alike; returns the committed tokens (accepted drafts +
        the recovered or bonus token)."""
        from trtspec.runtime.kvcache import keep_positions
        from trtspec.runtime.tree import accept_tree, tree_inputs

        # 1. Draft (unless speculation is off or in acceptance-floor fallback).
        draft, length = None, policy.next_length() if session is not None else 0
        if length > 0:
            started = time.perf_counter()
            draft = session.propose(tokens, length)
            stats.draft_time_s += time.perf_counter() - started
            if draft is not None and draft.size == 0:
                draft = None
        tree = draft.tree if draft is not None else None
        # 2. One target pass over [pending] + draft (a tree: positions by depth, tree attention mask).
        past = len(tokens) - 1
        k = draft.size if draft is not None else 0
        draft_ids = draft.token_ids.tolist() if k else []
        position_ids, mask = tree_inputs(tree, past) if tree is not None else (None, None)
        started = time.perf_counter()
        logits, aux = self._forward(tokens[-1:] + draft_ids, cache, num_logits=k + 1, aux_ids=aux_ids,
                                    position_ids=position_ids,
                                    attention_mask=mask[None, None] if mask is not None else None)
        # 3. Accept: the accepted draft positions (a prefix of a chain, a path of a tree) and the next token.
        if k == 0:
            path, next_token = [], self._choose(logits, params, generator)
        elif tree is not None:
            path, next_token = accept_tree(tree, draft_ids, logits.argmax(dim=-1).tolist())
        elif params.greedy:
            num_accepted, next_token = sampling.greedy_accept(draft.token_ids, logits)
            path = list(range(num_accepted))
        else:
            target_probs = sampling.logits_to_probs(logits, params)
            num_accepted, next_token = sampling.rejection_accept(draft.token_ids, draft.draft_probs,
                                                                 target_probs, generator)
            path = list(range(num_accepted))
        # 4. Keep the KV of the pending token and the accepted positions (the new pending one is not in it).
        kept_rows = [0] + [1 + i for i in path]
        keep_positions(cache, past, [past + row for row in kept_rows])
        stats.verify_time_s += time.perf_counter() - started
        stats.num_target_passes += 1
        if aux_ids:
            session.on_verified(aux[kept_rows])
        # 5. Update statistics and the draft-length policy (a tree offers at most its depth).
        if k:
            offered = tree.max_depth if tree is not None else k
            stats.record_draft(offered, len(path))
            if policy.update(offered, len(path)):
                stats.fallback = True
        return [draft_ids[i] for i in path] + [next_token]

    def _forward(self, input_ids: list[int], cache, *, num_logits: int, aux_ids=(), position_ids=None,
                 attention_mask=None):
        """Target forward over `input_ids` appended to `cache`.

        Returns (logits [num_logits, vocab] of the last positions, aux hidden [len, sum(hidden)]
        concatenated from the outputs `aux_ids` (hidden_states numbering) of this forward, or None).
        """
        import torch

        out = self.target(input_ids=torch.tensor([input_ids]), past_key_values=cache, use_cache=True,
                          logits_to_keep=num_logits, position_ids=position_ids, attention_mask=attention_mask)
        kept = vars(self._layer_outputs)
        aux = torch.cat([kept[i][0] for i in aux_ids], dim=-1) if aux_ids else None
        return out.logits[0].float(), aux

    def _keep_layer_output(self, index: int, module, args, output) -> None:
        """Forward hook: layer `index - 1`'s output, under its hidden_states index `index`."""
        vars(self._layer_outputs)[index] = output[0] if isinstance(output, tuple) else output

    @staticmethod
    def _choose(logits, params, generator) -> int:
        """The next token from one row of logits. # logits: [1, vocab_size]"""
        if params.greedy:
            return int(logits[-1].argmax())
        return int(sampling.sample(sampling.logits_to_probs(logits[-1:], params), generator)[0])


def _eos_ids(target: Any, tokenizer: Any) -> set[int]:
    ids: set[int] = set()
    for source in (getattr(target, "generation_config", None), target.config):
        value = getattr(source, "eos_token_id", None) if source is not None else None
        if value is not None:
            ids.update(value if isinstance(value, (list, tuple)) else [value])
    if getattr(tokenizer, "eos_token_id", None) is not None:
        ids.add(tokenizer.eos_token_id)
    return ids
