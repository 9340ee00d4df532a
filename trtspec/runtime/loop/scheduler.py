"""The engine loop: iteration-level scheduling (Orca; TensorRT-LLM's batch manager) on a paged cache.

Requests join and leave between steps. Each step (trtspec.runtime.loop.step) drafts for every
decoding sequence, runs ONE target forward over all of them plus prompt chunks of new ones, then
accepts, rolls back and streams per sequence. This module owns what lies around the steps:

- Admission (TensorRT-LLM's GUARANTEED_NO_EVICT policy): a request is admitted when a batch
  slot (`max_batch_size`) is free and the pool has blocks for its longest possible sequence
  (prompt + max_new_tokens + the widest draft), so no running sequence is ever evicted and
  memory stays bounded. The blocks go back at finish, cancel and error.
- A bounded queue: what cannot be admitted waits in FIFO order; past `max_queue_size` waiting
  requests a new one is refused at once with ServerBusyError (no unbounded time to first token).
  A request that could never fit the pool is refused at once too.
- One loop thread per engine, started by the first request and ending when nothing is left, so
  an idle engine holds no thread; all torch work happens on it (intra-op threads use the cores).
- Counters and gauges for metrics: running (batch size), waiting (queue depth), KV blocks in use,
  refused and failed requests.
"""

from __future__ import annotations

import atexit
import os
import threading
import time
import weakref
from collections import deque
from typing import Any

from trtspec.runtime.loop.request import EngineFailedError, RequestCancelled, ServerBusyError
from trtspec.runtime.loop.sequence import Request, Sequence
from trtspec.runtime.loop.stats import SchedulerStats

# Every scheduler whose loop may run. The loop is a daemon thread (a forgotten engine must not
# keep the interpreter alive), but one still inside torch when the interpreter finalizes aborts
# the process ("terminate called without an active exception": 2 of 6 `trtspec generate` runs,
# after the answer was printed). So before finalization every loop is ended and joined.
_LIVE: weakref.WeakSet = weakref.WeakSet()


@atexit.register
def _end_loops_at_exit() -> None:
    for scheduler in list(_LIVE):
        scheduler.close()


class Scheduler:
    """Admission, queue and loop thread of one Engine; the steps themselves are step.run_step."""

    def __init__(self, engine: Any):
        from trtspec.runtime.cache.paged import BlockAllocator, KVPool

        config = engine.config
        self.engine = engine
        self.config = config
        from trtspec.runtime.forward.attention import window_end

        block = config.tokens_per_block
        lane = window_end(config.max_seq_len + self.widest_draft())  # the longest sequence's reservation
        tokens = config.kv_cache_max_tokens or config.max_batch_size * lane
        self.allocator = BlockAllocator(-(-tokens // block), block, lane_blocks=-(-lane // block))
        slots = self.allocator.num_blocks * block
        self.pool = KVPool.for_model(engine.target.config, slots)
        drafter_kv = getattr(engine.drafter, "kv_config", None)
        self.draft_pool = KVPool.for_model(drafter_kv, slots) if drafter_kv is not None else None
        from trtspec.runtime.policy.by_load import CostModel

        shares = getattr(engine.drafter, "shares_target_kv", False)  # layerskip: drafts in self.pool
        self.cost_model = CostModel(config.max_draft_len, drafts_cost=drafter_kv is not None or shares)
        self.waiting: deque[Sequence] = deque()
        self.running: list[Sequence] = []
        self._unprepared: list[Sequence] = []    # admitted, blocks not yet zeroed (_prepare_admitted)
        self.stats = SchedulerStats(kv_blocks_total=self.allocator.num_blocks)
        from trtspec.runtime.cache.prefix_reuse import PrefixReuse

        # reused prompt rows: the chat template's shared start and prompts kept after their prefill
        self.reuse = (PrefixReuse(engine, self.pool, self.allocator, self.stats, config.kv_cache_reuse_mib << 20)
                      if config.kv_cache_reuse else None)
        self._lock = threading.Lock()
        self._thread: threading.Thread | None = None
        self._closed = False
        self._dead: BaseException | None = None  # what ended the loop outside a step: every request gets it
        self._threads = None  # LoopThreads: the loop's thread count beside other processes
        self.on_step = None  # callback(SchedulerStats) after every step, for gauges
        self._step_delay_s = float(os.environ.get("TRTSPEC_INJECT_STEP_DELAY_S") or 0)  # tests only: _injected_failure
        self.view: Any = None  # step.StepView: what a step sees of this loop (built with the first step)

    def widest_draft(self) -> int:
        """Most tokens a step may write past the committed ones (pending + drafts, or tree nodes)."""
        from trtspec.runtime.policy.plan import widest_room

        return 1 + widest_room(self.config, self.engine.tree)

    # -- admission -------------------------------------------------------------------------

    def submit(self, request: Request) -> Sequence:
        """Admit or queue a request; raises ServerBusyError when it must be refused."""
        from trtspec.runtime.forward.attention import window_end

        engine = self.engine
        # the cache positions this request may ever use, to the end of attention's last key window
        reserve = window_end(min(len(request.prompt_ids) + request.max_new_tokens, self.config.max_seq_len)
                             + self.widest_draft() - 1)
        sequence = Sequence(request, tokenizer=engine.tokenizer, eos_ids=engine.eos_ids, config=self.config,
                            reserve=reserve)
        needed = self.allocator.blocks_for(reserve)
        with self._lock:
            if self._dead is not None:
                raise self._dead
            if self._closed:
                raise ServerBusyError("the engine is shut down", fix="send the request to a running server")
            if needed > self.allocator.num_blocks:
                self.stats.num_refused += 1
                raise ServerBusyError(
                    f"request needs {needed} KV blocks ({reserve} tokens) but the pool has {self.allocator.num_blocks}",
                    fix="ask for fewer max_tokens, or raise build.kv_cache_max_tokens")
            if not self.waiting and self._try_admit(sequence):
                pass
            elif len(self.waiting) >= self.config.max_queue_size:
                self.stats.num_refused += 1
                raise ServerBusyError(
                    f"server busy: {len(self.running)} requests running and {len(self.waiting)} queued "
                    f"(serve.max_queue_size {self.config.max_queue_size})",
                    fix="retry later, or raise serve.max_queue_size / build.max_batch_size")
            else:
                self.waiting.append(sequence)
            self._refresh_gauges()
            if self._thread is None:
                self._thread = threading.Thread(target=self._loop, name="trtspec-engine", daemon=True)
                self._thread.start()
                _LIVE.add(self)
        return sequence

    def _try_admit(self, sequence: Sequence) -> bool:
        """Give `sequence` a batch slot and its blocks if both are free (lock held)."""
        from trtspec.runtime.cache.paged import BlockTable, SeqKV

        if len(self.running) >= self.config.max_batch_size:
            return False
        blocks = self.allocator.allocate(self.allocator.blocks_for(sequence.reserve))
        if blocks is None:
            return False
        sequence.table = BlockTable(blocks, self.allocator.block_size)
        sequence.kv = SeqKV(self.pool, sequence.table)
        self.running.append(sequence)
        self._unprepared.append(sequence)
        return True

    def _prepare_admitted(self) -> None:
        """Zero the admitted sequences' blocks and open their draft sessions (loop thread, lock held).

        This is torch work, so it runs in the loop thread and never in a caller's: a caller thread
        that runs a parallel torch op gets an OpenMP team of its own, and two teams on the same
        cores made 2 threads no faster than 1 (trtspec/runtime/cores/threads.py, docs/BENCHMARKS-log.md)."""
        from trtspec.runtime.cache.paged import SeqKV

        engine = self.engine
        for sequence in self._unprepared:
            if sequence not in self.running:
                continue                      # retired (closed) before its first step
            for pool in (self.pool, self.draft_pool):
                if pool is not None:
                    pool.zero_blocks(sequence.table)
            if sequence.request.speculative and engine.drafter is not None:
                pool = self.pool if getattr(engine.drafter, "shares_target_kv", False) else self.draft_pool
                kv = SeqKV(pool, sequence.table) if pool is not None else None
                sequence.session = engine.drafter.session(sequence.tokens, sequence.params, sequence.generator,
                                                          confidence_threshold=self.config.confidence_threshold,
                                                          tree=engine.tree, kv=kv)
            if self.reuse is not None:
                self.reuse.admit(sequence)
        self._unprepared.clear()

    def _admit_waiting(self) -> None:
        """FIFO: admit from the head of the queue while it fits (lock held)."""
        while self.waiting and self._try_admit(self.waiting[0]):
            self.waiting.popleft()

    def retire(self, sequence: Sequence, error: BaseException | None = None) -> None:
        """Remove a finished, cancelled or failed sequence; its blocks go back to the pool."""
        with self._lock:
            if sequence in self.running:
                self.running.remove(sequence)
                self.allocator.free(sequence.table.blocks)
            elif sequence in self.waiting:
                self.waiting.remove(sequence)
            if isinstance(error, RequestCancelled):
                self.stats.num_cancelled += 1
            elif error is not None:
                self.stats.num_failed += 1
            else:
                self.stats.num_finished += 1
        if error is not None:
            sequence.fail(error)

    def _refresh_gauges(self) -> None:
        self.stats.running = len(self.running)
        self.stats.waiting = len(self.waiting)
        self.stats.kv_blocks_used = self.allocator.num_used

    def snapshot(self) -> SchedulerStats:
        with self._lock:
            self._refresh_gauges()
            return SchedulerStats(**vars(self.stats))

    # -- the loop --------------------------------------------------------------------------

    def _loop(self) -> None:
        """The loop thread: steps until nothing is left. Whatever ends it otherwise (an error outside
        a step: admission, a drafter session, the thread governor, the gauges' callback) ends the
        engine: every running, queued and later request fails at once with that error, instead of
        waiting on a loop that is gone."""
        try:
            self._steps()
        except BaseException as error:  # noqa: BLE001 - the loop is gone: say so to everyone waiting on it
            self._die(error)

    def _steps(self) -> None:
        import torch

        from trtspec.runtime.cores.contention import LoopThreads
        from trtspec.runtime.loop.step import StepView, run_step

        if self._threads is None:
            self._threads = LoopThreads(self.engine)
        if self.view is None:
            self.view = StepView(self.engine, self.config, self.stats, self.pool, self.cost_model, self.reuse,
                                 self.retire)
        threads = self._threads
        threads.start()
        while True:
            with self._lock:
                batch = self._next_batch()
                if not batch or self._closed:
                    threads.stop()  # before a new loop thread can start and set its own count
                    self._thread = None
                    self._refresh_gauges()
                    return
            try:
                with torch.inference_mode():
                    threads.timed_step(run_step, self.view, batch)
            except Exception as error:  # noqa: BLE001 - one bad step fails its batch, not the engine
                failure = RuntimeError(f"internal error: {type(error).__name__}: {error}")
                for sequence in batch:
                    if not sequence.done:
                        self.retire(sequence, failure)
            with self._lock:
                self.stats.num_steps += 1
                self.stats.engine_threads = threads.governor.threads
                self.stats.engine_thread_fallbacks = threads.fallbacks
                self.stats.engine_steps_on_fewer_threads = threads.steps_on_fewer_threads
                self._refresh_gauges()
                stats = SchedulerStats(**vars(self.stats))
            _injected_failure(stats.num_steps)
            if self._step_delay_s:
                time.sleep(self._step_delay_s)
            if self.on_step is not None:
                self.on_step(stats)

    def _die(self, error: BaseException) -> None:
        import traceback

        if os.environ.get("TRTSPEC_DEBUG"):
            traceback.print_exception(error)
        dead = EngineFailedError(f"the engine stopped: {type(error).__name__}: {error}",
                                 fix="restart the server or engine (TRTSPEC_DEBUG=1 prints the traceback)")
        with self._lock:
            self._dead = dead
            self._thread = None
            failed = list(self.running) + list(self.waiting)
            for sequence in self.running:
                self.allocator.free(sequence.table.blocks)
            self.running.clear()
            self.waiting.clear()
            self._unprepared.clear()
            self.stats.num_failed += len(failed)
            self._refresh_gauges()
        for sequence in failed:
            sequence.fail(dead)
        if self._threads is not None:
            self._threads.stop()

    def _next_batch(self) -> list[Sequence]:
        """Drop cancelled queued requests, admit what fits, and return the running batch (lock held)."""
        for sequence in [s for s in self.waiting if s.wants_cancel()]:
            self.waiting.remove(sequence)
            self.stats.num_cancelled += 1
            sequence.fail(RequestCancelled("the request was cancelled while queued"))
        self._admit_waiting()
        self._prepare_admitted()
        return list(self.running)

    @property
    def failure(self) -> BaseException | None:
        """The error that ended the engine's loop, or None while it can serve."""
        return self._dead

    def close(self) -> None:
        """Refuse new requests, end queued and running ones with an error, wait for the loop."""
        with self._lock:
            self._closed = True
            thread = self._thread
            pending = list(self.waiting)
            self.waiting.clear()
        for sequence in pending:
            sequence.fail(ServerBusyError("the engine shut down before this request started",
                                          fix="send it again to a running server"))
        if thread is not None and thread is not threading.current_thread():
            thread.join(timeout=60)
        with self._lock:
            for sequence in list(self.running):
                self.allocator.free(sequence.table.blocks)
                sequence.fail(ServerBusyError("the engine shut down", fix="send it again to a running server"))
            self.running.clear()
            self._unprepared.clear()


def _injected_failure(steps: int) -> None:
    """TRTSPEC_INJECT_LOOP_FAILURE=N (tests only): the loop raises after its Nth step, outside the
    step, as a failure the step's own handling never sees would; how the tests prove that a dead
    loop fails every request in process, in `trtspec build`'s smoke test and through Triton.
    TRTSPEC_INJECT_STEP_DELAY_S=S (tests only) makes the loop sleep S seconds after each step, so a
    stream outlasts a cancel or a killed stub on any machine (the tiny model writes 400 tokens
    before a loaded machine delivers either)."""
    after = os.environ.get("TRTSPEC_INJECT_LOOP_FAILURE")
    if after and steps >= int(after):
        raise RuntimeError(f"injected failure after step {steps} (TRTSPEC_INJECT_LOOP_FAILURE={after})")
