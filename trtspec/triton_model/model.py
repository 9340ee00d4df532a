"""The cpu backend's Triton Python model: a thin adapter from Triton requests to the trtspec engine.

The rendered repository's `tensorrt_llm/1/model.py` is one import of `TritonPythonModel` from
here, so the serving code is versioned, linted and tested with the rest of trtspec. Contract:

- I/O is the stock llmapi model's of `build.trtllm_version` (trtspec.repository.llmapi_io) plus
  trtspec's optional additions `speculative` (false turns speculation off for that request),
  `chat_template`, `messages` and `stream_delta`. A request means what it means to the stock
  model: `text_input` is the prompt text as sent, tokenized as TensorRT-LLM tokenizes a prompt
  (the tokenizer's own special tokens, no chat template: the stock model.py `_convert_request`
  passes text_input[0] to generate_async); only `messages`, or `chat_template: true`, asks for the
  chat template here. trtspec's clients template client-side (trtspec.client.prompting) (streamed responses carry only the new text; by
  default each carries the text so far, as the stock model does). Outputs `text_output`, `finish_reason` and, with perf metrics,
  `acceptance_rate`, `total_accepted_draft_tokens`, `total_draft_tokens` and the additions
  `num_drafts`, `num_output_tokens`, `num_input_tokens`. `stop: true` cancels the requests sent
  with the same request id, as the stock model.py does, and is answered CANCELLED.
- In-flight batching: `execute` checks each request and hands it to the engine's scheduler
  (Engine.submit) with a `Responder` as its sink (trtspec.triton_model.sinks, handed this model's
  `Replies`, never the model); there is no thread per request. The engine's
  one loop thread runs every admitted request's steps together and the responders queue what each
  step committed (decoupled: streamed pieces, then the last with the final flag) for the model's
  one sending thread (trtspec.triton_model.outbox), so the loop does not wait on Triton; only a
  request's first streamed piece is sent from the loop's thread (time to first token). A request whose
  client went away (`is_cancelled()`) leaves the batch at the next step and frees its KV blocks.
- Refusals cost nothing: a bad request gets an INVALID_ARG error naming the problem (checks in
  trtspec.triton_model.request, pure), a full queue (serve.max_queue_size) an UNAVAILABLE
  "server busy" error at once. Nothing a request sends can stop the model.
- Metrics, named like vLLM's under `trtspec:`: counters spec_decode_num_drafts,
  _num_draft_tokens, _num_accepted_tokens, _num_accepted_tokens_per_pos (label `position`),
  num_requests_cancelled, num_requests_failed (label `reason`: invalid | busy | internal);
  gauges num_requests_running (the batch), num_requests_waiting (the queue), kv_cache_blocks_used,
  kv_cache_blocks_total, spec_decode_draft_len (the last step's), engine_threads (the last
  step's thread count: fewer while other processes use the cores, trtspec.runtime.cores.contention);
  counter engine_steps (label `draft`: the load policy's choice per step,
  SchedulerStats.draft_shapes: off | chain:K | chain:K@M (only on n-gram matches of M+ tokens) |
  tree:... | probe:...),
  counters prefix_cache_queries and prefix_cache_hits (prompt tokens, as vLLM's),
  engine_thread_fallbacks and engine_steps_on_fewer_threads. While requests run, the gauges and
  the counters above reach the server at most every METRICS_INTERVAL_S (each change is a message
  to it), and always when the engine goes idle or busy (gauges_due). Triton's own
  nv_inference_request_success counts error responses of a Python model as successes
  (triton-inference-server/server#7713), so failures are read from num_requests_failed.
"""

from __future__ import annotations

import json
import threading
import time
from typing import Any

from trtspec.triton_model.outbox import Outbox
from trtspec.triton_model.request import (
    INPUT_NAMES,
    InvalidRequest,
    Request,
    StopRequest,
    parse_request,
    prompt_byte_limit,
)
from trtspec.triton_model.sinks import Collector, Replies, Responder

METRIC_PREFIX = "trtspec:spec_decode_"
METRICS = {
    "num_drafts": "Number of speculative drafts proposed",
    "num_draft_tokens": "Number of draft tokens proposed",
    "num_accepted_tokens": "Number of draft tokens accepted by the target",
    "num_accepted_tokens_per_pos": "Accepted draft tokens by position in the draft",
}
GAUGES = {
    "trtspec:num_requests_running": "Requests in the engine's running batch",
    "trtspec:num_requests_waiting": "Requests queued for a batch slot or KV cache blocks",
    "trtspec:kv_cache_blocks_used": "Paged KV cache blocks held by running requests",
    "trtspec:kv_cache_blocks_total": "Paged KV cache blocks in the pool",
    "trtspec:spec_decode_draft_len": "Draft tokens per sequence in the last engine step (0: speculation off)",
    "trtspec:engine_threads": "Threads the engine's last step ran on (fewer while other processes use its cores)",
}
# counters kept by the scheduler (SchedulerStats attributes of the same names)
STATS_COUNTERS = {
    "prefix_cache_queries": "Prompt tokens of admitted requests",
    "prefix_cache_hits": "Prompt tokens copied from the shared chat start or a kept prompt instead of prefilled",
    "engine_thread_fallbacks": "Times other processes on the engine's cores made it step on fewer threads",
    "engine_steps_on_fewer_threads": "Engine steps run on fewer threads than the server's because other processes "
                                     "computed on its cores",
}
FAILURE_REASONS = ("invalid", "busy", "internal")
# Why (docs/BENCHMARKS-log.md, "Triton's round trips off the engine loop"): each metric update is a
# round trip to the server process, ~1.4 % of the engine loop's samples at 8 streams on 2 cores
# when sent every step (tokens/s through Triton did not change measurably: both cores stay busy).
METRICS_INTERVAL_S = 0.1  # gauges and step counters sent at most this often while the engine runs


def gauges_due(stats: Any, sent: tuple[int, bool] | None, sent_at: float, now: float) -> bool:
    """Whether a scheduler snapshot goes to the server now. `sent`: (num_steps, busy) of the last
    snapshot sent (None: none yet), `sent_at` its time.monotonic().

    `trtspec bench` reads a block's counters once the gauges say idle, so idle gauges must never
    stand while steps go unsent. Always sent: a change between idle and busy (gauges left idle
    from the last block while this block's steps waited for the interval, a tiny model's block
    can run within it, were read as this block's end and its steps lost: a speculative cell
    without steps under load, issue 71). Never sent: a snapshot older than the last sent (the
    engine loop and Triton's execute thread both send; fewer steps, or an idle one at the same
    step count as a busy one: a request came in after it was taken). Otherwise at most every
    METRICS_INTERVAL_S."""
    if sent is None:
        return True
    steps, was_busy = sent
    busy = bool(stats.running or stats.waiting)
    if stats.num_steps < steps or (stats.num_steps == steps and was_busy and not busy):
        return False
    return busy != was_busy or not busy or now - sent_at >= METRICS_INTERVAL_S


class TritonPythonModel:
    """Triton's entry points: initialize, execute, finalize."""

    def initialize(self, args: dict[str, Any]) -> None:
        import triton_python_backend_utils as pb_utils

        from trtspec.runtime import load_engine

        self.pb = pb_utils
        config = json.loads(args["model_config"])
        params = {k: v["string_value"] for k, v in config.get("parameters", {}).items()}
        self.decoupled = pb_utils.using_decoupled_model_transaction_policy(config)
        overrides = {key: int(params[key]) for key in ("max_batch_size", "max_queue_size") if key in params}
        self.engine = load_engine(params["engine_dir"], **overrides)
        self.outbox = Outbox()  # decoupled responses are sent from its thread, not the engine loop
        self.max_seq_len = int(params.get("max_seq_len", self.engine.max_seq_len))
        self.stream_interval = int(params.get("stream_interval", 1))  # steps a streamed response gathers
        # Refuse an oversized prompt by its byte length, before decoding or tokenizing it.
        self.max_prompt_bytes = prompt_byte_limit(self.engine.tokenizer, self.engine.max_input_len)
        self._metrics_lock = threading.Lock()
        self._stopped: set[str] = set()  # request ids a `stop: true` request cancelled
        self._stopped_lock = threading.Lock()
        self._init_metrics(args["model_name"], args.get("model_version", "1"))
        self._metrics_sent_at = float("-inf")  # time.monotonic() of the last gauge update
        self._metrics_sent: tuple[int, bool] | None = None  # its (num_steps, busy): gauges_due
        self.engine.scheduler.on_step = self._set_gauges
        self._set_gauges(self.engine.scheduler.snapshot())
        # all the sinks know of this model (they never import it)
        self.replies = Replies(post=self.outbox.post, send_now=self.outbox.send_now,
                               final_flag=pb_utils.TRITONSERVER_RESPONSE_COMPLETE_FINAL,
                               response=self.response, error=self.error_response, record=self.record,
                               count_failure=self.count_failure, count_cancelled=self.count_cancelled,
                               stream_interval=self.stream_interval)

    def _init_metrics(self, model: str, version: str) -> None:
        pb = self.pb
        labels = {"model": model, "version": str(version)}
        self.families = {key: pb.MetricFamily(name=METRIC_PREFIX + key, description=text,
                                              kind=pb.MetricFamily.COUNTER)
                         for key, text in METRICS.items()}
        self.counters = {key: self.families[key].Metric(labels=labels)
                         for key in ("num_drafts", "num_draft_tokens", "num_accepted_tokens")}
        family = self.families["num_accepted_tokens_per_pos"]
        self.per_pos = [family.Metric(labels={**labels, "position": str(i)})
                        for i in range(max(1, int(self.engine.max_draft_len)))]
        self.cancelled_family = pb.MetricFamily(name="trtspec:num_requests_cancelled",
                                                description="Requests stopped because the client went away",
                                                kind=pb.MetricFamily.COUNTER)
        self.cancelled = self.cancelled_family.Metric(labels=labels)
        self.failed_family = pb.MetricFamily(name="trtspec:num_requests_failed",
                                             description="Requests answered with an error, by reason "
                                                         "(invalid input, server busy, internal error)",
                                             kind=pb.MetricFamily.COUNTER)
        self.failed = {reason: self.failed_family.Metric(labels={**labels, "reason": reason})
                       for reason in FAILURE_REASONS}
        self.gauge_families = {name: pb.MetricFamily(name=name, description=text, kind=pb.MetricFamily.GAUGE)
                               for name, text in GAUGES.items()}
        self.gauges = {name: family.Metric(labels=labels) for name, family in self.gauge_families.items()}
        self._gauge_values: dict[str, int] = {}  # what each gauge was last set to
        self.steps_family = pb.MetricFamily(name="trtspec:engine_steps",
                                            description="Engine steps with speculating sequences, by the draft the load "
                                                        "policy chose (off, chain:K, chain:K@M: only on n-gram "
                                                        "matches of M tokens or more, tree:TOPK,DEPTH,NODES, "
                                                        "probe: one sequence drafted it)",
                                            kind=pb.MetricFamily.COUNTER)
        self._labels = labels
        # prompt tokens looked up / copied from the chat template's shared start (vLLM's names), thread fallbacks
        self.stats_families = {name: pb.MetricFamily(name=f"trtspec:{name}", description=text,
                                                     kind=pb.MetricFamily.COUNTER)
                               for name, text in STATS_COUNTERS.items()}
        self.stats_counters = {name: family.Metric(labels=labels) for name, family in self.stats_families.items()}
        self._stats_counted = dict.fromkeys(STATS_COUNTERS, 0)
        self.steps: dict[str, Any] = {}            # draft label -> counter
        self._steps_counted: dict[str, int] = {}   # what each counter was last brought to

    def _set_gauges(self, stats: Any) -> None:
        """Scheduler.on_step: the batch, the queue and the cache as the last step left them (when
        gauges_due: at once between idle and busy, else at most every METRICS_INTERVAL_S while
        requests run; every counter is cumulative, so a skipped update loses nothing)."""
        values = {"trtspec:num_requests_running": stats.running, "trtspec:num_requests_waiting": stats.waiting,
                  "trtspec:kv_cache_blocks_used": stats.kv_blocks_used,
                  "trtspec:kv_cache_blocks_total": stats.kv_blocks_total,
                  "trtspec:spec_decode_draft_len": stats.last_draft_len,
                  "trtspec:engine_threads": stats.engine_threads}
        with self._metrics_lock:  # decided under the lock: the engine loop and execute() both send
            now = time.monotonic()
            if not gauges_due(stats, self._metrics_sent, self._metrics_sent_at, now):
                return
            self._metrics_sent_at = now
            self._metrics_sent = (stats.num_steps, bool(stats.running or stats.waiting))
            for label, count in stats.draft_shapes.items():
                if label not in self.steps:
                    self.steps[label] = self.steps_family.Metric(labels={**self._labels, "draft": label})
                if (new := count - self._steps_counted.get(label, 0)) > 0:
                    self.steps[label].increment(new)
                    self._steps_counted[label] = count
            for name in STATS_COUNTERS:
                if (new := getattr(stats, name) - self._stats_counted[name]) > 0:
                    self.stats_counters[name].increment(new)
                    self._stats_counted[name] = getattr(stats, name)
            # the gauges last: a scrape that reads the batch empty then finds its steps counted
            # (trtspec bench reads a block's counters once these say idle)
            for name, value in values.items():
                if self._gauge_values.get(name) != value:  # each set() is a message to the server process
                    self.gauges[name].set(float(value))
                    self._gauge_values[name] = value

    def record(self, stats: Any) -> None:
        with self._metrics_lock:
            self.counters["num_drafts"].increment(int(stats.num_drafts))
            self.counters["num_draft_tokens"].increment(int(stats.num_draft_tokens))
            self.counters["num_accepted_tokens"].increment(int(stats.num_accepted_tokens))
            for position, count in enumerate(stats.accepted_per_position or []):
                if position < len(self.per_pos) and count:
                    self.per_pos[position].increment(int(count))

    def count_failure(self, reason: str) -> None:
        with self._metrics_lock:
            self.failed[reason].increment(1)

    def count_cancelled(self) -> None:
        self.cancelled.increment(1)

    def execute(self, requests: list[Any]) -> list[Any] | None:
        if self.decoupled:
            for request in requests:
                responder = Responder(self.replies, request.get_response_sender())
                self._submit(request, responder, responder.is_cancelled)
            self._set_gauges(self.engine.scheduler.snapshot())
            return None
        # Not decoupled: one response per request, returned in order once every request is done.
        collectors = [Collector(self.replies) for _ in requests]
        for request, collector in zip(requests, collectors, strict=True):
            self._submit(request, collector, None)
        return [collector.wait() for collector in collectors]

    def _submit(self, request: Any, sink: Responder | Collector, is_cancelled) -> None:
        """Check one request and queue it in the engine; a refusal is answered at once."""
        from trtspec.errors import TrtSpecError
        from trtspec.runtime.loop.request import ServerBusyError

        try:
            parsed = self._parse(request)
            if isinstance(parsed, StopRequest):
                self._stop(request.request_id(), sink)
                return
            sink.bind(parsed)
            prompt = self._token_ids(parsed)
            sink.num_input_tokens = len(prompt)
            self.engine.submit(prompt, max_new_tokens=parsed.max_tokens, temperature=parsed.temperature,
                               top_k=parsed.top_k, top_p=parsed.top_p, seed=parsed.seed,
                               speculative=parsed.speculative, stop=parsed.stop, sink=sink,
                               is_cancelled=self._cancel_check(request.request_id(), is_cancelled),
                               grammar=_grammar(parsed))
        except ServerBusyError as error:
            sink.refuse(str(error), "busy", "UNAVAILABLE")
        except (InvalidRequest, TrtSpecError) as error:
            sink.refuse(str(error), "invalid", "INVALID_ARG")
        except Exception as error:  # noqa: BLE001 - a request must never take the model down
            sink.refuse(f"internal error: {type(error).__name__}: {error}", "internal", "INTERNAL")

    def _token_ids(self, parsed: Request) -> list[int]:
        """The prompt's token ids: a conversation through the chat template (trtspec.chat, the one
        rule); text_input as plain text, as the stock model sends it to TensorRT-LLM, unless the
        request sets chat_template (then one user turn through the template)."""
        from trtspec.chat import conversation_ids

        if parsed.messages is not None:
            return conversation_ids(self.engine.tokenizer, parsed.messages, add_generation_prompt=True)
        return self.engine.encode(parsed.prompt, chat=None if parsed.chat_template else False)

    def _cancel_check(self, request_id: str, is_cancelled: Any) -> Any:
        """is_cancelled for the engine: the client went away, or a `stop` request named this id."""
        if not request_id:
            return is_cancelled
        stopped = self._stopped

        def check() -> bool:
            return request_id in stopped or bool(is_cancelled and is_cancelled())
        return check

    def _stop(self, request_id: str, sink: Responder | Collector) -> None:
        """`stop: true` (stock model.py handle_stop_request): cancel that id's requests."""
        if not request_id:
            sink.finish(self.error_response("stop: a request id must be provided for request cancellation"))
            return
        with self._stopped_lock:
            self._stopped.add(request_id)
            if len(self._stopped) > 10000:  # ids of long-finished requests: forget the oldest half
                self._stopped = set(list(self._stopped)[5000:])
        sink.finish(self.error_response("Request cancelled by client", "CANCELLED"))

    def _parse(self, request: Any) -> Request | StopRequest:
        values = {}
        for name in INPUT_NAMES:
            tensor = self.pb.get_input_tensor_by_name(request, name)
            if tensor is not None:
                values[name] = tensor.as_numpy()
        return parse_request(values, max_seq_len=self.max_seq_len, max_prompt_bytes=self.max_prompt_bytes,
                             parameters=request.parameters())

    def response(self, text: str, finish_reason: str | None, extra: dict[str, tuple[Any, str]] | None = None):
        import numpy as np

        pb = self.pb
        tensors = [pb.Tensor("text_output", np.array([text.encode("utf-8")], dtype=np.object_))]
        if finish_reason is not None:
            tensors.append(pb.Tensor("finish_reason", np.array([finish_reason.encode()], dtype=np.object_)))
        for name, (value, dtype) in (extra or {}).items():
            tensors.append(pb.Tensor(name, np.array([value], dtype=dtype)))
        return pb.InferenceResponse(output_tensors=tensors)

    def error_response(self, message: str, code: str = "INVALID_ARG"):
        pb = self.pb
        value = getattr(pb.TritonError, code, None)
        error = pb.TritonError(message, value) if value is not None else pb.TritonError(message)
        return pb.InferenceResponse(output_tensors=[], error=error)

    def finalize(self) -> None:
        self.engine.close()
        self.outbox.close()


def _grammar(parsed: Request) -> Any:
    """The request's guided-decoding input as the engine's GrammarSpec (None: unconstrained)."""
    if parsed.guide_type is None:
        return None
    from trtspec.runtime.grammar.compile import GrammarSpec

    return GrammarSpec(parsed.guide_type, parsed.guide)
