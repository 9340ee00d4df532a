"""The load generator: streams every prompt at each concurrency, speculative and baseline interleaved.

Contract: a *target* is anything with `stream(prompt, max_tokens=, speculative=, temperature=,
seed=)` yielding `Chunk`s, a `name`, and `counters()` returning a flat dict of monotonic
counters (or None). This module owns the clock: it stamps each chunk as it arrives, so targets
stay free of timing code. It never aggregates; trtspec.bench.metrics does. A target that also has
`async_streams()` and `astream(streams, prompt, ...)` (a Triton server) runs each block's requests
on one event loop and channel instead of a thread each (a caller already inside an event loop
gets the threads): the load generator shares the machine it measures, and that client leaves more
of it to the server.

Interleaving: at each concurrency c the requests are cut into blocks of `requests_per_slot x c`;
every block is run once per variant, alternating which goes first (ABBA), and each variant's
wall time is the sum of its blocks. Noise from the shared machine thus hits both variants alike.
Each repeat runs every concurrency before the next repeat starts.
A cell sends every prompt once, or `requests_per_slot x c` requests when c > 1 and the prompt
set is smaller (request j sends prompt j mod n with seed j), so c requests really are in flight. The
cost of blocks: each drains at its end, so throughput at concurrency c reads lower than a
never-draining stream would, the same for both variants; metrics reports the mean number of
requests in flight, and a larger `requests_per_slot` brings it closer to c.
"""

from __future__ import annotations

import asyncio
import functools
import threading
import time
from collections.abc import Awaitable, Callable, Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any, Protocol

from trtspec.bench.metrics import BASELINE, SPECULATIVE, RequestRecord, SpecCounts
from trtspec.bench.server_counters import UNSETTLED_READS, diff_counters
from trtspec.prompts import Prompt


@dataclass
class Chunk:
    """One streamed response: how many new tokens it carried; the last one may carry counters."""

    num_tokens: int
    final: bool = False
    spec: SpecCounts | None = None
    prompt_tokens: int | None = None
    # The request's exact output token count when the source knows it only at the end (a Triton
    # stream carries text, so each chunk counts as at least one token until the final says).
    output_tokens: int | None = None


class Target(Protocol):
    name: str

    def stream(self, prompt: str, *, max_tokens: int, speculative: bool, temperature: float,
               seed: int | None) -> Iterator[Chunk]: ...

    def counters(self) -> dict[str, float] | None: ...

    def metrics_problem(self) -> str | None: ...


@dataclass
class BenchRun:
    records: list[RequestRecord] = field(default_factory=list)
    durations: dict[tuple[str, int, int], float] = field(default_factory=dict)
    counters_delta: dict[str, float] | None = None            # the whole run
    cell_counters: dict[tuple[str, int], dict[str, float]] = field(default_factory=dict)  # per (variant, conc)


class _Tally:
    """One request's chunks as they arrive, stamped against its start; `record()` when it ends."""

    def __init__(self) -> None:
        self.start = time.perf_counter()
        self.chunk_times: list[float] = []
        self.tokens = 0
        self.spec: SpecCounts | None = None
        self.prompt_tokens: int | None = None
        self.error: str | None = None

    def add(self, chunk: Chunk) -> None:
        now = time.perf_counter() - self.start
        if chunk.num_tokens > 0:
            self.chunk_times.append(now)
            self.tokens += chunk.num_tokens
        if chunk.spec is not None:
            self.spec = chunk.spec
        if chunk.prompt_tokens is not None:
            self.prompt_tokens = chunk.prompt_tokens
        if chunk.output_tokens is not None:
            self.tokens = chunk.output_tokens

    def failed(self, exc: BaseException) -> None:
        self.error = f"{type(exc).__name__}: {exc}".splitlines()[0][:300]

    def record(self, prompt: Prompt, variant: str, speculative: bool, concurrency: int, repeat: int) -> RequestRecord:
        return RequestRecord(variant=variant, concurrency=concurrency, repeat=repeat, prompt_index=prompt.index,
                             category=prompt.category, chunk_times_s=self.chunk_times, output_tokens=self.tokens,
                             e2e_s=time.perf_counter() - self.start, prompt_tokens=self.prompt_tokens,
                             spec=self.spec if speculative else None, error=self.error, sent_s=self.start)


def measure_request(target: Target, prompt: Prompt, variant: str, speculative: bool, concurrency: int,
                    repeat: int, max_tokens: int, temperature: float, seed: int | None = None) -> RequestRecord:
    """Send one request and stamp its chunks. Errors are recorded, not raised: one failed
    request must not end a benchmark, and the report counts failures."""
    tally = _Tally()
    try:
        for chunk in target.stream(prompt.text, max_tokens=max_tokens, speculative=speculative,
                                   temperature=temperature, seed=prompt.index if seed is None else seed):
            tally.add(chunk)
    except Exception as exc:  # noqa: BLE001 - any failure of one request is data, see docstring
        tally.failed(exc)
    return tally.record(prompt, variant, speculative, concurrency, repeat)


async def measure_request_async(target: Any, streams: Any, prompt: Prompt, variant: str, speculative: bool,
                                concurrency: int, repeat: int, max_tokens: int, temperature: float,
                                seed: int) -> RequestRecord:
    """measure_request on a target's open `async_streams()` (`target.astream`)."""
    tally = _Tally()
    try:
        async for chunk in target.astream(streams, prompt.text, max_tokens=max_tokens, speculative=speculative,
                                          temperature=temperature, seed=seed):
            tally.add(chunk)
    except Exception as exc:  # noqa: BLE001 - any failure of one request is data, see measure_request
        tally.failed(exc)
    return tally.record(prompt, variant, speculative, concurrency, repeat)


def schedule(num_prompts: int, concurrencies: Sequence[int], repeats: int, variants: Sequence[str],
             requests_per_slot: int = 2) -> list[tuple[int, int, str, list[int]]]:
    """The run order as (concurrency, repeat, variant, request numbers) blocks; request j sends
    prompt j mod num_prompts. Pure, for tests."""
    plan: list[tuple[int, int, str, list[int]]] = []
    # repeat-major: each repeat visits every concurrency, so a scaling ratio (repeat r at c over
    # repeat r at the lowest c) compares cells minutes apart, not a whole run apart
    for repeat in range(repeats):
        for concurrency in concurrencies:
            block = max(1, requests_per_slot * concurrency)
            # one slot never idles; several need requests to spare or the block is one long drain
            requests = max(num_prompts, block) if concurrency > 1 else num_prompts
            blocks = [list(range(i, min(i + block, requests))) for i in range(0, requests, block)]
            for position, numbers in enumerate(blocks):
                order = list(variants) if (position + repeat) % 2 == 0 else list(reversed(variants))
                plan.extend((concurrency, repeat, variant, numbers) for variant in order)
    return plan


def run_bench(target: Target, prompts: Sequence[Prompt], concurrencies: Sequence[int], *, max_tokens: int,
              baseline: bool, **options: Any) -> BenchRun:
    """Speculative (and, with `baseline`, the same target with speculation off), interleaved."""
    variants = {SPECULATIVE: (target, True)}
    if baseline:
        variants[BASELINE] = (target, False)
    return run_variants(variants, prompts, concurrencies, max_tokens=max_tokens, **options)


def warm_up(variants: dict[str, tuple[Target, bool]], prompts: Sequence[Prompt], max_tokens: int,
            temperature: float) -> None:
    """First requests pay for lazy loading and allocator growth: a few per target, before any counter
    is read, so they stay out of the figures."""
    for label, (target, speculative) in variants.items():
        # a target behind a router (a Dynamo stack) asks for one per worker, sent at once so the
        # router spreads them: else one worker's cold first request lands in the first cell
        count = max(1, int(getattr(target, "warmup_requests", 1)))
        with ThreadPoolExecutor(max_workers=count) as pool:
            list(pool.map(lambda i, target=target, label=label, speculative=speculative: measure_request(
                target, prompts[i % len(prompts)], label, speculative, 0, -1, min(max_tokens, 8), temperature),
                range(count)))


def run_variants(variants: dict[str, tuple[Target, bool]], prompts: Sequence[Prompt], concurrencies: Sequence[int],
                 *, max_tokens: int, repeats: int = 1, temperature: float = 0.0, requests_per_slot: int = 2,
                 warmup: bool = True, on_request: Callable[[RequestRecord], Any] | None = None) -> BenchRun:
    """Run the whole schedule over labelled (target, speculative) variants; `on_request` is called
    after every request (progress bars). Counters are diffed on the first variant's target."""
    if warmup:
        warm_up(variants, prompts, max_tokens, temperature)
    run = BenchRun()
    lock = threading.Lock()
    counted = next(iter(variants.values()))[0]
    before = counted.counters()

    def keep(record: RequestRecord) -> None:
        with lock:
            run.records.append(record)
        if on_request is not None:
            on_request(record)

    def one(number: int, label: str, concurrency: int, repeat: int) -> None:
        target, speculative = variants[label]
        keep(measure_request(target, prompts[number % len(prompts)], label, speculative, concurrency, repeat,
                             max_tokens, temperature, seed=number))

    async def one_async(streams: Any, number: int, label: str, concurrency: int, repeat: int) -> None:
        target, speculative = variants[label]
        keep(await measure_request_async(target, streams, prompts[number % len(prompts)], label, speculative,
                                         concurrency, repeat, max_tokens, temperature, seed=number))

    for concurrency, repeat, label, numbers in schedule(len(prompts), concurrencies, repeats, list(variants),
                                                        requests_per_slot):
        block_before = counted.counters() if before is not None else None
        unsettled = int(not getattr(counted, "settled", True))
        start = time.perf_counter()
        target = variants[label][0]
        if hasattr(target, "async_streams") and not _in_event_loop():
            asyncio.run(_run_block_async(target, numbers, concurrency,
                                         functools.partial(one_async, label=label, concurrency=concurrency,
                                                           repeat=repeat)))
        else:
            with ThreadPoolExecutor(max_workers=concurrency) as pool:
                futures = [pool.submit(one, number, label, concurrency, repeat) for number in numbers]
                for future in futures:
                    future.result()
        key = (label, concurrency, repeat)
        run.durations[key] = run.durations.get(key, 0.0) + time.perf_counter() - start
        block_after = counted.counters() if block_before is not None else None
        unsettled += not getattr(counted, "settled", True)
        if block_before is not None and block_after is not None and target is counted:
            # blocks run one at a time, so this block's counter delta belongs to this cell alone
            # (unless a read found the server still busy: then the cell says so)
            cell = run.cell_counters.setdefault((label, concurrency), {})
            for name, value in diff_counters(block_before, block_after).items():
                cell[name] = cell.get(name, 0) + value
            cell[UNSETTLED_READS] = cell.get(UNSETTLED_READS, 0) + unsettled
    after = counted.counters()
    if before is not None and after is not None:
        run.counters_delta = diff_counters(before, after)
    return run


def _in_event_loop() -> bool:
    """Whether this thread already runs an asyncio loop (a notebook, an async caller): asyncio.run
    cannot start another there, so such a caller's blocks take the thread pool."""
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        return False
    return True


async def _run_block_async(target: Any, numbers: list[int], concurrency: int,
                           request: Callable[..., Awaitable[None]]) -> None:
    """One block on one event loop: `concurrency` workers take the block's requests in order, as
    the thread pool's do, each sent by `request(streams, number)` over one channel
    (trtspec.client.triton_aio: a lighter client)."""
    pending = iter(numbers)

    async with target.async_streams() as streams:
        async def worker() -> None:
            for number in pending:  # one shared iterator: each worker takes the next request
                await request(streams, number)

        await asyncio.gather(*(worker() for _ in range(min(concurrency, len(numbers)))))
