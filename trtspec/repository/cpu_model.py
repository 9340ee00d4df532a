"""The cpu backend's Triton Python model: a thin adapter from Triton requests to the trtspec engine.

The rendered repository's `tensorrt_llm/1/model.py` is one import of `TritonPythonModel` from
here, so the serving code is versioned, linted and tested with the rest of trtspec. Contract:

- I/O is the LLM-API model's (DESIGN.md): `text_input` plus optional `streaming`,
  `sampling_param_*`, `sampling_param_return_perf_metrics`, and `speculative` (false turns
  speculation off for that request, for baselines). Outputs `text_output`, `finish_reason` and,
  with perf metrics, `acceptance_rate`, `total_accepted_draft_tokens`, `total_draft_tokens`,
  `num_drafts`, `num_output_tokens`.
- Decoupled (streaming): each request runs in a worker thread of a pool sized by the engine's
  max_batch_size (the engine is thread-safe); text is sent as it is committed and the last
  response carries the final flag. A request whose client went away (`is_cancelled()`) stops at
  the next chunk and its sequence is freed.
- A bad request gets a Triton error naming the problem; nothing a request sends can stop the
  model. Every check is in trtspec.repository.cpu_request (pure, tested without a server).
- Counters named like vLLM's speculative-decoding metrics are exported through
  `pb_utils.MetricFamily`: num_drafts, num_draft_tokens, num_accepted_tokens and
  num_accepted_tokens_per_pos (label `position`).
"""

from __future__ import annotations

import json
import threading
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from trtspec.repository.cpu_request import INPUT_NAMES, InvalidRequest, Request, parse_request, prompt_byte_limit

METRIC_PREFIX = "trtspec:spec_decode_"
METRICS = {
    "num_drafts": "Number of speculative drafts proposed",
    "num_draft_tokens": "Number of draft tokens proposed",
    "num_accepted_tokens": "Number of draft tokens accepted by the target",
    "num_accepted_tokens_per_pos": "Accepted draft tokens by position in the draft",
}
def perf_outputs(stats: Any, num_output_tokens: int) -> dict[str, tuple[Any, str]]:
    """The perf-metric outputs of a finished request: name -> (value, numpy dtype)."""
    return {"acceptance_rate": (float(stats.acceptance_rate), "float32"),
            "total_accepted_draft_tokens": (int(stats.num_accepted_tokens), "int64"),
            "total_draft_tokens": (int(stats.num_draft_tokens), "int64"),
            "num_drafts": (int(stats.num_drafts), "int64"),
            "num_output_tokens": (int(num_output_tokens), "int64")}


class TritonPythonModel:
    """Triton's entry points: initialize, execute, finalize."""

    def initialize(self, args: dict[str, Any]) -> None:
        import triton_python_backend_utils as pb_utils

        from trtspec.runtime import load_engine

        self.pb = pb_utils
        config = json.loads(args["model_config"])
        params = {k: v["string_value"] for k, v in config.get("parameters", {}).items()}
        self.decoupled = pb_utils.using_decoupled_model_transaction_policy(config)
        self.engine = load_engine(params["engine_dir"])
        self.max_seq_len = int(params.get("max_seq_len", self.engine.max_seq_len))
        # Refuse an oversized prompt by its byte length, before decoding or tokenizing it.
        self.max_prompt_bytes = prompt_byte_limit(self.engine.tokenizer, self.engine.max_input_len)
        # The pool is the engine's scheduler: at most max_batch_size sequences in flight per instance.
        self.pool = ThreadPoolExecutor(max_workers=int(params.get("max_batch_size", 8)),
                                       thread_name_prefix="trtspec-request")
        self._metrics_lock = threading.Lock()
        self._init_metrics(args["model_name"], args.get("model_version", "1"))

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

    def _record(self, stats: Any) -> None:
        with self._metrics_lock:
            self.counters["num_drafts"].increment(int(stats.num_drafts))
            self.counters["num_draft_tokens"].increment(int(stats.num_draft_tokens))
            self.counters["num_accepted_tokens"].increment(int(stats.num_accepted_tokens))
            for position, count in enumerate(stats.accepted_per_position or []):
                if position < len(self.per_pos) and count:
                    self.per_pos[position].increment(int(count))

    def execute(self, requests: list[Any]) -> list[Any] | None:
        if self.decoupled:
            for request in requests:
                self.pool.submit(self._serve, request, request.get_response_sender())
            return None
        # Not decoupled: one response per request, returned in order.
        futures = [self.pool.submit(self._respond_once, request) for request in requests]
        return [future.result() for future in futures]

    def _parse(self, request: Any) -> Request:
        values = {}
        for name in INPUT_NAMES:
            tensor = self.pb.get_input_tensor_by_name(request, name)
            if tensor is not None:
                values[name] = tensor.as_numpy()
        return parse_request(values, max_seq_len=self.max_seq_len, max_prompt_bytes=self.max_prompt_bytes,
                             parameters=request.parameters())

    def _response(self, text: str, finish_reason: str | None, extra: dict[str, tuple[Any, str]] | None = None):
        import numpy as np

        pb = self.pb
        tensors = [pb.Tensor("text_output", np.array([text.encode("utf-8")], dtype=np.object_))]
        if finish_reason is not None:
            tensors.append(pb.Tensor("finish_reason", np.array([finish_reason.encode()], dtype=np.object_)))
        for name, (value, dtype) in (extra or {}).items():
            tensors.append(pb.Tensor(name, np.array([value], dtype=dtype)))
        return pb.InferenceResponse(output_tensors=tensors)

    def _error(self, message: str):
        pb = self.pb
        code = getattr(pb.TritonError, "INVALID_ARG", None)
        error = pb.TritonError(message, code) if code is not None else pb.TritonError(message)
        return pb.InferenceResponse(output_tensors=[], error=error)

    def _chunks(self, parsed: Request):
        return self.engine.generate(parsed.prompt, max_new_tokens=parsed.max_tokens, temperature=parsed.temperature,
                                    top_k=parsed.top_k, top_p=parsed.top_p, seed=parsed.seed,
                                    speculative=parsed.speculative, stream=True, stop=parsed.stop)

    def _serve(self, request: Any, sender: Any) -> None:
        """One decoupled request, start to final flag, in a worker thread."""
        from trtspec.errors import TrtSpecError

        final = self.pb.TRITONSERVER_RESPONSE_COMPLETE_FINAL
        try:
            parsed = self._parse(request)
            chunks = self._chunks(parsed)
            text, num_tokens = [], 0
            for chunk in chunks:
                # 1. the client went away: stop generating; closing the generator frees the sequence.
                if sender.is_cancelled():
                    chunks.close()
                    self.cancelled.increment(1)
                    sender.send(flags=final)  # releases the request in Triton (else it counts as in flight)
                    return
                num_tokens += len(chunk.token_ids)
                # 2. a finished request: record the statistics, send the last piece with the final flag.
                if chunk.finish_reason is not None:
                    self._record(chunk.stats)
                    extra = perf_outputs(chunk.stats, num_tokens) if parsed.perf_metrics else None
                    piece = chunk.text if parsed.streaming else "".join(text) + chunk.text
                    sender.send(self._response(piece, chunk.finish_reason, extra), flags=final)
                    return
                # 3. streaming: send what was committed in this step.
                if parsed.streaming:
                    if chunk.text:
                        sender.send(self._response(chunk.text, None))
                else:
                    text.append(chunk.text)
            sender.send(flags=final)  # the engine ended without a finish reason: close the stream anyway
        except (InvalidRequest, TrtSpecError) as error:
            sender.send(self._error(str(error)), flags=final)
        except Exception as error:  # noqa: BLE001 - a request must never take the model down
            sender.send(self._error(f"internal error: {type(error).__name__}: {error}"), flags=final)

    def _respond_once(self, request: Any):
        """One non-decoupled request: the whole answer in one response."""
        from trtspec.errors import TrtSpecError

        try:
            parsed = self._parse(request)
            if parsed.streaming:
                raise InvalidRequest("streaming: this model is not decoupled; redeploy with serve.streaming: true")
            result = self.engine.generate(parsed.prompt, max_new_tokens=parsed.max_tokens,
                                          temperature=parsed.temperature, top_k=parsed.top_k, top_p=parsed.top_p,
                                          seed=parsed.seed, speculative=parsed.speculative, stop=parsed.stop)
            self._record(result.stats)
            extra = perf_outputs(result.stats, len(result.token_ids)) if parsed.perf_metrics else None
            return self._response(result.text, result.finish_reason, extra)
        except (InvalidRequest, TrtSpecError) as error:
            return self._error(str(error))
        except Exception as error:  # noqa: BLE001
            return self._error(f"internal error: {type(error).__name__}: {error}")

    def finalize(self) -> None:
        self.pool.shutdown(wait=False, cancel_futures=True)
