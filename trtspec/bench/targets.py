"""What bench and tune send requests to: the cpu engine in-process, or a Triton server.

Both adapt their source to trtspec.bench.load's Target contract: `stream(...)` yields Chunks
(new-token count, final flag, speculative counters on the final chunk), `counters()` returns
monotonic counters that the load generator diffs before/after a run.
"""

from __future__ import annotations

import time
from collections.abc import AsyncIterator, Callable, Iterator
from typing import Any

from trtspec.bench.load import Chunk
from trtspec.bench.metrics import COUNTER_PREFIX, SpecCounts
from trtspec.client.metrics import metric_total


def spec_counts_from_stats(stats: Any) -> SpecCounts | None:
    """SpecCounts from a runtime GenerationStats (or its to_dict()), None when absent."""
    if stats is None:
        return None
    get = stats.get if isinstance(stats, dict) else lambda key, default=None: getattr(stats, key, default)
    positions = get("accepted_per_position")
    return SpecCounts(num_drafts=int(get("num_drafts", 0) or 0), num_draft_tokens=int(get("num_draft_tokens", 0) or 0),
                      num_accepted_tokens=int(get("num_accepted_tokens", 0) or 0),
                      accepted_per_position=list(positions) if positions is not None else None,
                      fallback=bool(get("fallback", False)),
                      num_verified_tokens=int(get("num_verified_tokens", 0) or 0))


def spec_counts_from_triton(stats: dict[str, Any] | None) -> SpecCounts | None:
    """SpecCounts from the perf-metrics outputs of a Triton response (DESIGN.md Triton I/O):
    total_draft_tokens, total_accepted_draft_tokens and, on the cpu backend, num_drafts.
    Positions are not reported per request; bench.json's server_counters carry them if the
    server exports them."""
    if not stats:
        return None
    drafted = stats.get("total_draft_tokens", stats.get("num_draft_tokens"))
    accepted = stats.get("total_accepted_draft_tokens", stats.get("num_accepted_tokens"))
    if drafted is None or accepted is None:
        return None
    positions = stats.get("accepted_per_position")
    return SpecCounts(num_drafts=int(stats.get("num_drafts", 0) or 0), num_draft_tokens=int(drafted),
                      num_accepted_tokens=int(accepted),
                      accepted_per_position=list(positions) if positions is not None else None)


SETTLE_S = 5.0  # longest wait for a server's idle report before its counters are read anyway
IDLE_GAUGES = ("trtspec:num_requests_running", "trtspec:num_requests_waiting")


def _busy(metrics: dict[str, float]) -> bool:
    """Whether a cpu model's gauges say requests are still running or waiting."""
    return any(metric_total(metrics, name) > 0 for name in IDLE_GAUGES)


def _chunk(event: Any, speculative: bool) -> Chunk:
    """A Triton stream event as a Chunk: text counts as one token until the final response's
    num_output_tokens gives the exact count; num_input_tokens (the cpu model's) puts the request in
    its context-length bucket."""
    stats = event.stats if event.final else None
    total, prompt = (stats or {}).get("num_output_tokens"), (stats or {}).get("num_input_tokens")
    return Chunk(1 if event.text else 0, final=bool(event.final),
                 spec=spec_counts_from_triton(stats) if speculative else None,
                 output_tokens=int(total) if total is not None else None,
                 prompt_tokens=int(prompt) if prompt is not None else None)


class TritonTarget:
    """A Triton server through trtspec.client.triton (gRPC streaming)."""

    def __init__(self, url: str, model: str = "tensorrt_llm", metrics_url: str | None = None,
                 render: Callable[[str], str] | None = None):
        # render: prompt -> text_input (trtspec.client.prompting: the chat template, client-side)
        self.render = render or (lambda prompt: prompt)
        try:
            from trtspec.client.triton import TritonLLMClient
        except ImportError as error:
            from trtspec.errors import TrtSpecError

            raise TrtSpecError(f"the Triton client is not available ({error})",
                               fix="bench in-process with --engine DIR") from None
        self.client = TritonLLMClient(url=url, model=model, metrics_url=metrics_url)
        self.name = f"triton {url}"
        self.settled = True  # whether the last counters() found the server idle (else read at SETTLE_S)

    def stream(self, prompt: str, *, max_tokens: int, speculative: bool, temperature: float,
               seed: int | None) -> Iterator[Chunk]:
        for event in self.client.stream(self.render(prompt), max_tokens=max_tokens, temperature=temperature,
                                        seed=seed, speculative=speculative, perf_metrics=True):
            yield _chunk(event, speculative)

    def async_streams(self) -> Any:
        """The requests of one block on one channel and event loop (trtspec.client.triton_aio):
        `async with target.async_streams() as streams`, then `astream(streams, ...)` per request."""
        from trtspec.client.triton_aio import AsyncStreams

        return AsyncStreams(self.client)

    async def astream(self, streams: Any, prompt: str, *, max_tokens: int, speculative: bool, temperature: float,
                      seed: int | None) -> AsyncIterator[Chunk]:
        """`stream` on an open `async_streams()`."""
        async for event in streams.stream(self.render(prompt), max_tokens=max_tokens, temperature=temperature,
                                          seed=seed, speculative=speculative, perf_metrics=True):
            yield _chunk(event, speculative)

    def metrics_problem(self) -> str | None:
        """Why the server's counters cannot be read (None when they can): without them a report
        lacks the load policy's steps, acceptance per position and the engine's thread fallbacks."""
        try:
            self.client.server_metrics()
        except Exception as error:  # noqa: BLE001 - any failure means the same: no counters
            return f"no server counters at {self.client.metrics_url} ({type(error).__name__})"
        return None

    def counters(self) -> dict[str, float] | None:
        """The server's counters once its engine has reported its last step.

        The cpu model sends its step counters at most every 0.1 s while requests run and at once
        when it goes busy or its batch empties (trtspec.triton_model.model.gauges_due: before,
        idle gauges left from the last block could stand through a short block, and a loaded
        machine's bench read them as its end: a speculative cell without steps, issue 71), but
        a block's last response can reach the client before that
        report: read then, a block's last steps were counted in the next block's cell (seen as a
        few speculating steps in a baseline cell). So the read waits, up to SETTLE_S, until the
        model's running and waiting gauges say it is idle. Servers without them are read once.
        A server still busy at SETTLE_S (another client's requests, or a machine so loaded that
        the engine's idle report lags) is read anyway and `settled` is False: bench marks the
        cell (server_counters_unsettled_reads) whose counters may then hold a neighbour's steps."""
        deadline = time.monotonic() + SETTLE_S
        while True:
            try:
                values = self.client.server_metrics()
            except Exception:  # noqa: BLE001 - a server without a metrics port still benches
                return None
            self.settled = not _busy(values)
            if self.settled or time.monotonic() >= deadline:
                return values
            time.sleep(0.02)


class EngineTarget:
    """The cpu engine (trtspec.runtime.Engine), called from the load generator's threads."""

    def __init__(self, engine: Any, name: str | None = None, chat: bool | None = None):
        self.engine = engine
        self.name = name or f"in-process engine {getattr(engine, 'name', '')}".strip()
        self.chat = chat  # None: the chat template where the tokenizer has one; False: the prompt as given
        self._prompt_tokens: dict[str, int] = {}

    def stream(self, prompt: str, *, max_tokens: int, speculative: bool, temperature: float,
               seed: int | None) -> Iterator[Chunk]:
        if prompt not in self._prompt_tokens:
            self._prompt_tokens[prompt] = len(self.engine.encode(prompt, self.chat))
        chunks = self.engine.generate(prompt, max_new_tokens=max_tokens, temperature=temperature, seed=seed,
                                      speculative=speculative, stream=True, chat=self.chat)
        for chunk in chunks:
            final = chunk.finish_reason is not None
            yield Chunk(len(chunk.token_ids), final=final,
                        spec=spec_counts_from_stats(chunk.stats) if final else None,
                        prompt_tokens=self._prompt_tokens[prompt] if final else None)

    def metrics_problem(self) -> None:
        """In process the engine's counters are always read (`counters`)."""
        return None

    def counters(self) -> dict[str, float]:
        """The engine's cumulative sums under the cpu model's Prometheus names, so the same
        parser reads both (ratios such as acceptance_rate cannot be diffed and are left out)."""
        stats = self.engine.cumulative_stats()
        flat: dict[str, float] = {COUNTER_PREFIX + key: getattr(stats, key) for key in (
            "num_drafts", "num_draft_tokens", "num_accepted_tokens", "num_target_passes", "num_output_tokens",
            "draft_time_s", "verify_time_s")}
        for position, count in enumerate(stats.accepted_per_position):
            flat[f'{COUNTER_PREFIX}num_accepted_tokens_per_pos{{position="{position}"}}'] = count
        scheduler = self.engine.scheduler.snapshot()
        flat["trtspec:prefix_cache_queries"] = scheduler.prefix_cache_queries
        flat["trtspec:prefix_cache_hits"] = scheduler.prefix_cache_hits
        flat["trtspec:engine_steps_on_fewer_threads"] = scheduler.engine_steps_on_fewer_threads
        return flat


def engine_variant(engine: Any, max_draft_len: int, eagle_choices: Any = None, tree: Any = None,
                   exit_layer: int | None = None) -> Any:
    """A second Engine sharing `engine`'s weights, tokenizer and drafter, proposing `max_draft_len`
    tokens per step at any load; with `eagle_choices` (EAGLE-3 only) it drafts that static tree,
    with `tree` (topk, depth, num_draft_tokens) dynamic trees (EAGLE-3 or a draft model), without
    either chains; with `exit_layer` (layerskip only) its own LayerSkipDrafter exiting there (a view
    of the same target modules: no weight memory). Close it when done (it hooks the shared target)."""
    from trtspec.errors import TrtSpecError
    from trtspec.spec.schema import TREE_MODES

    if eagle_choices is not None and engine.mode != "eagle3":
        raise TrtSpecError(f"static draft trees need an EAGLE-3 engine (this one is {engine.mode})",
                           fix="tune eagle_choices trees only with speculative.mode eagle3")
    if tree is not None and engine.mode not in TREE_MODES:
        raise TrtSpecError(f"dynamic draft trees need an EAGLE-3 or draft-model engine (this one is {engine.mode})",
                           fix="tune --tree-shapes only with speculative.mode eagle3 or draft-target")
    if exit_layer is not None:
        if engine.mode != "layerskip":
            raise TrtSpecError(f"exit layers are a layerskip setting (this engine is {engine.mode})",
                               fix="tune --exit-layers only with speculative.mode layerskip")
        from trtspec.runtime.drafters.layerskip import LayerSkipDrafter

        return mode_variant(engine, "layerskip", LayerSkipDrafter(engine.target, exit_layer), max_draft_len,
                            name=f"{engine.name}-e{exit_layer}-k{max_draft_len}")
    choices = tuple(tuple(int(i) for i in path) for path in eagle_choices) if eagle_choices else None
    # the draft length fixed at every batch size: tune measures exactly one choice per variant
    return engine.variant(max_draft_len=max_draft_len, eagle_choices=choices, draft_len_schedule=((1, max_draft_len),),
                          tree=tuple(tree) if tree is not None else None,
                          name=f"{engine.name}-k{max_draft_len}")


def mode_variant(engine: Any, mode: str, drafter: Any, max_draft_len: int, name: str | None = None) -> Any:
    """An Engine over `engine`'s target and tokenizer that drafts with `drafter` as mode `mode`,
    `max_draft_len` tokens (chains; a drafter's own static tree, as Medusa's) at every batch size,
    with its own scheduler and cache. Close it when done."""
    import dataclasses

    config = dataclasses.replace(engine.config, mode=mode, name=name or mode, max_draft_len=max_draft_len,
                                 eagle_choices=None, tree=None, draft_len_schedule=((1, max_draft_len),))
    return type(engine)(engine.target, engine.tokenizer, drafter, config)
