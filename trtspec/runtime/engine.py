"""The cpu speculative engine: requests in, one batched loop of draft -> verify -> accept -> commit.

Contract: every request gets exactly what the target alone would produce under the same settings,
whatever else runs beside it. Greedy: the target's own greedy output, token for token and bit for
bit, at any concurrency and any draft length (prepacked weights: trtspec.runtime.forward.attention and
prepack explain how the batch is made not to change a sequence's numbers; static trees are exact up
to float rounding). Sampling: the target's distribution (lossless rejection sampling).

How: `generate` and `submit` hand requests to the engine's Scheduler (trtspec.runtime.loop.scheduler),
whose one loop thread runs every admitted sequence through the numbered phases of
trtspec.runtime.loop.step on a paged KV cache. Each request's state lives in its Sequence and its
drafter session; the engine itself holds only the weights, the config and cumulative statistics.
"""

from __future__ import annotations

import dataclasses
import functools
import queue
import threading
from collections.abc import Callable, Iterator
from typing import Any

from trtspec.chat import prompt_ids
from trtspec.runtime.checkpoints.parts import engine_parts
from trtspec.runtime.config import EngineConfig
from trtspec.runtime.loop.request import GenerationResult, StreamChunk, validate
from trtspec.runtime.loop.sequence import Request, Sequence
from trtspec.runtime.loop.stats import GenerationStats
from trtspec.runtime.verify import sampling


class Engine:
    """A target model, its tokenizer and an optional drafter, run as one EngineConfig says."""

    def __init__(self, target: Any, tokenizer: Any, drafter: Any = None, config: EngineConfig | None = None):
        from trtspec.runtime.forward.attention import use_paged_attention

        use_paged_attention(target)
        self.target = target
        self.tokenizer = tokenizer
        self.drafter = drafter
        self.config = config or EngineConfig()
        self.tree = None
        if self.config.eagle_choices:
            from trtspec.runtime.verify.tree import Tree

            self.tree = Tree([list(path) for path in self.config.eagle_choices])
        elif self.config.tree:
            self.tree = _tree_shape(self.config.tree)
        elif getattr(drafter, "tree", None) is not None:  # the drafter's own static tree (Medusa's choices)
            self.tree = drafter.tree
        for row in self.config.draft_len_schedule or ():
            if len(row) == 4:
                _tree_shape(row[1:])
        self.eos_ids = _eos_ids(target, tokenizer)
        self._lock = threading.Lock()
        self._cumulative = GenerationStats()
        self._scheduler = None
        # The drafter's auxiliary states are taken as ModelOpt and vLLM take them, each layer's own
        # output through a forward hook (transformers' hidden_states ends with the final norm's
        # output instead), kept per thread: engines sharing a target (bench variants) each run
        # their own loop thread. The handles are kept, and close() detaches them.
        self._layer_outputs = threading.local()
        # transformers < 4.57 returns None from get_decoder() on Llama; .model is the same decoder
        layers = (target.get_decoder() or target.model).layers
        self._hooks = [layers[index - 1].register_forward_hook(functools.partial(self._keep_layer_output, index))
                       for index in (drafter.aux_layer_ids if drafter is not None else ())]

    # Read-only views of the config, for callers that predate it.
    mode = property(lambda self: self.config.mode)
    name = property(lambda self: self.config.label)
    max_draft_len = property(lambda self: self.config.max_draft_len)
    max_input_len = property(lambda self: self.config.max_input_len)
    max_seq_len = property(lambda self: self.config.max_seq_len)

    @classmethod
    def from_checkpoints(cls, target_dir, mode: str = "ngram", draft_dir=None, max_draft_len: int = 4,
                         **runtime_options: Any) -> Engine:
        """Load a target checkpoint (FP8 dequantized if it is one) and the drafter `mode` needs."""
        return cls(*engine_parts(target_dir, mode=mode, draft_dir=draft_dir, max_draft_len=max_draft_len,
                                 **runtime_options))

    def variant(self, **changes: Any) -> Engine:
        """Another Engine over the same weights, tokenizer and drafter with some settings changed
        (dataclasses.replace on the config), with its own scheduler and cache. Close it when done:
        it hooks the shared target."""
        return Engine(self.target, self.tokenizer, self.drafter, dataclasses.replace(self.config, **changes))

    @property
    def scheduler(self):
        """The engine loop (created with its KV pool on first use)."""
        with self._lock:
            if self._scheduler is None:
                from trtspec.runtime.loop.scheduler import Scheduler

                self._scheduler = Scheduler(self)
            return self._scheduler

    def close(self) -> None:
        """End the loop (queued and running requests get an error) and detach the hooks. Idempotent."""
        if self._scheduler is not None:
            self._scheduler.close()
        for handle in self._hooks:
            handle.remove()
        self._hooks = []

    def __enter__(self) -> Engine:
        return self

    def __exit__(self, *exc_info: Any) -> None:
        self.close()

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
                 stream: bool = False, stop: list[str] | str | None = None, chat: bool | None = None,
                 grammar: Any = None):
        """Generate a continuation; a GenerationResult, or an iterator of StreamChunk if stream.
        Raises InvalidRequestError for bad arguments and ServerBusyError when the queue is full."""
        ids = self.encode(prompt, chat)
        results: queue.SimpleQueue = queue.SimpleQueue()
        sequence = self.submit(ids, max_new_tokens=max_new_tokens, temperature=temperature, top_k=top_k,
                               top_p=top_p, seed=seed, speculative=speculative, stop=stop, sink=results.put,
                               grammar=grammar)
        chunks = _drain(results, sequence)
        if stream:
            return chunks
        last = None
        for chunk in chunks:
            last = chunk
        output = sequence.output
        return GenerationResult(token_ids=list(output.token_ids), text=output.text, finish_reason=output.finish_reason,
                                stats=last.stats, prompt_token_ids=ids, stop_token_id=output.stop_token_id)

    def submit(self, prompt_ids: list[int], *, max_new_tokens: int, sink: Callable[[Any], None],
               temperature: float = 0.0, top_k: int = 0, top_p: float = 1.0, seed: int | None = None,
               speculative: bool = True, stop: list[str] | str | None = None,
               is_cancelled: Callable[[], bool] | None = None, grammar: Any = None) -> Sequence:
        """Queue one request without waiting: `sink` is called from the engine loop with each
        StreamChunk (the last carries finish_reason) or once with an exception (RequestCancelled
        after `is_cancelled()` turned true, or an internal error). Raises InvalidRequestError or
        ServerBusyError at once instead of calling `sink`. `grammar`: a trtspec.runtime.grammar
        GrammarSpec the output must follow (compiled here; GrammarError when it cannot be)."""
        validate(num_prompt_tokens=len(prompt_ids), max_input_len=self.max_input_len,
                 max_new_tokens=max_new_tokens, temperature=temperature, top_k=top_k, top_p=top_p)
        compiled = None
        if grammar is not None:
            from trtspec.runtime.grammar.compile import compile_grammar

            compiled = compile_grammar(grammar, self.tokenizer, self.target.config.vocab_size, self.eos_ids)
        params = sampling.SamplingParams(temperature=float(temperature), top_k=int(top_k), top_p=float(top_p))
        request = Request(prompt_ids=list(prompt_ids), params=params, max_new_tokens=max_new_tokens, sink=sink,
                          stop=[stop] if isinstance(stop, str) else stop, seed=seed,
                          speculative=speculative and self.drafter is not None, is_cancelled=is_cancelled,
                          grammar=compiled)
        return self.scheduler.submit(request)

    # -- called by the scheduler's steps ------------------------------------------------------

    def layer_outputs(self) -> dict[int, Any]:
        """This thread's latest auxiliary layer outputs (hidden_states index -> [1, T, hidden])."""
        return vars(self._layer_outputs)

    def record_finished(self, stats: GenerationStats) -> None:
        with self._lock:
            self._cumulative.merge(stats)

    def _keep_layer_output(self, index: int, module, args, output) -> None:
        """Forward hook: layer `index - 1`'s output, under its hidden_states index `index`."""
        vars(self._layer_outputs)[index] = output[0] if isinstance(output, tuple) else output


def _drain(results: queue.SimpleQueue, sequence: Sequence) -> Iterator[StreamChunk]:
    """The chunks the engine loop sends for one request; closing it early cancels the request."""
    try:
        while True:
            item = results.get()
            if isinstance(item, BaseException):
                raise item
            yield item
            if item.finish_reason is not None:
                return
    finally:
        sequence.cancelled = True  # the loop frees its blocks at the next step (a no-op once finished)


def _tree_shape(settings: tuple[int, int, int]) -> Any:
    """The dynamic tree (topk, depth, num_draft_tokens) as a TreeShape, refused when unusable."""
    from trtspec.errors import TrtSpecError
    from trtspec.runtime.verify.tree import TreeShape

    shape = TreeShape(*settings)
    if shape.problems():
        raise TrtSpecError(f"speculative.tree {list(settings)}: {shape.problems()[0]}",
                           fix="e.g. tree: {topk: 4, depth: 4, num_draft_tokens: 16}")
    return shape


def _eos_ids(target: Any, tokenizer: Any) -> set[int]:
    ids: set[int] = set()
    for source in (getattr(target, "generation_config", None), target.config):
        value = getattr(source, "eos_token_id", None) if source is not None else None
        if value is not None:
            ids.update(value if isinstance(value, (list, tuple)) else [value])
    if getattr(tokenizer, "eos_token_id", None) is not None:
        ids.add(tokenizer.eos_token_id)
    return ids
