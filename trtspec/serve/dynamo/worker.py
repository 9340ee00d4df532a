"""A trtspec engine as an NVIDIA Dynamo worker: token ids in, token ids out, behind Dynamo's frontend.

    python -m trtspec.serve.dynamo.worker --engine-dir engines/<name> --model-name <name> [--namespace trtspec]

Dynamo's frontend templates and tokenizes (from the engine's target directory: its tokenizer,
config and chat template) and sends `{"token_ids", "sampling_options", "stop_conditions"}`; this
worker hands each request to the engine's in-flight scheduler (Engine.submit: the same loop the
Triton model drives, many requests in one target pass) and streams back what each step committed.
The last chunk carries `completion_usage` with `completion_tokens_details.accepted_prediction_tokens`
and `rejected_prediction_tokens` (OpenAI's names for the draft tokens the target kept and refused).

Registered through `dynamo.common.backend` (LLMEngine, Worker, `run`) with the engine's block size,
so the frontend's KV router learns which prompts this worker keeps: the engine's kept prompts are
published as stored/removed blocks (trtspec.serve.dynamo.kv_events). Speculative counters go to
the worker's /metrics (DYN_SYSTEM_PORT) under vLLM's names (trtspec.serve.dynamo.metrics).
Started and restarted by trtspec.serve.dynamo.launcher; the environment (file discovery, loopback
hosts) comes from there.
"""

from __future__ import annotations

import argparse
import asyncio
import threading
from typing import Any

from dynamo.common.backend import EngineConfig, LLMEngine, LlmRegistration, WorkerConfig
from dynamo.common.backend.run import run


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description="trtspec cpu engine as a Dynamo worker")
    parser.add_argument("--engine-dir", required=True, help="engine bundle built by `trtspec build --backend cpu`")
    parser.add_argument("--model-name", required=True, help="the served model name (the spec's model.name)")
    parser.add_argument("--namespace", default="trtspec")
    parser.add_argument("--component", default="backend")
    parser.add_argument("--max-queue-size", type=int, default=None)
    parser.add_argument("--no-kv-events", action="store_true", help="publish no KV blocks (no KV routing)")
    return parser.parse_args(argv)


class TrtspecEngine(LLMEngine):
    def __init__(self, args: argparse.Namespace):
        self.args = args
        self.engine: Any = None
        self.metrics: Any = None
        self.loop: asyncio.AbstractEventLoop | None = None
        self.cancelled: dict[str, threading.Event] = {}

    @classmethod
    async def from_args(cls, argv: list[str] | None = None) -> tuple[TrtspecEngine, WorkerConfig]:
        import os
        from pathlib import Path

        args = parse_args(argv)
        model_dir = str(Path(args.engine_dir).resolve() / "target")  # tokenizer, config and chat template
        config = WorkerConfig(namespace=args.namespace, component=args.component, model_name=model_dir,
                              served_model_name=args.model_name,
                              discovery_backend=os.environ.get("DYN_DISCOVERY_BACKEND", "file"),
                              request_plane="tcp", enable_kv_routing=not args.no_kv_events)
        return cls(args), config

    async def start(self, worker_id: int) -> EngineConfig:
        from pathlib import Path

        from trtspec.runtime import load_engine
        from trtspec.serve.dynamo.metrics import SpecMetrics

        self.loop = asyncio.get_running_loop()
        overrides = {"max_queue_size": self.args.max_queue_size} if self.args.max_queue_size else {}
        self.engine = await asyncio.to_thread(load_engine, self.args.engine_dir, **overrides)
        self.metrics = SpecMetrics(self.args.model_name, int(self.engine.max_draft_len))
        config = self.engine.config
        return EngineConfig(model=str(Path(self.args.engine_dir).resolve() / "target"),
                            served_model_name=self.args.model_name,
                            runtime_data={"spec_decode": {"nextn": int(self.engine.max_draft_len),
                                                          "method": config.mode, "source": "trtspec"}},
                            llm=LlmRegistration(context_length=int(self.engine.max_seq_len),
                                                kv_cache_block_size=int(config.tokens_per_block),
                                                max_num_seqs=int(config.max_batch_size)))

    async def kv_event_sources(self) -> list[Any]:
        from trtspec.serve.dynamo.kv_events import push_source

        if self.args.no_kv_events:
            return []
        source = push_source(self.engine)
        return [source] if source is not None else []

    async def register_prometheus(self, metrics: Any) -> None:
        from dynamo.common.backend.metrics import register_engine_registry

        from trtspec.serve.dynamo.metrics import PREFIX

        register_engine_registry(metrics, self.metrics.registry, prefix_filters=[PREFIX])

    async def generate(self, request: Any, context: Any):  # type: ignore[override]
        from trtspec.runtime.loop.request import RequestCancelled
        from trtspec.serve.openai_protocol import completion_usage

        prompt = list(request["token_ids"])
        sampling = request.get("sampling_options") or {}
        stops = request.get("stop_conditions") or {}
        room = max(1, int(self.engine.max_seq_len) - len(prompt))
        max_tokens = min(int(stops.get("max_tokens") or room), room)
        temperature = sampling.get("temperature")
        queue: asyncio.Queue[Any] = asyncio.Queue()
        loop = self.loop
        assert loop is not None
        cancel = threading.Event()
        key = context.id()
        self.cancelled[key] = cancel
        running = self.metrics.running.labels(self.args.model_name)
        running.inc()
        try:
            self.engine.submit(prompt, max_new_tokens=max_tokens,
                               temperature=1.0 if temperature is None else float(temperature),
                               top_k=int(sampling.get("top_k") or 0), top_p=float(sampling.get("top_p") or 1.0),
                               seed=sampling.get("seed"), sink=lambda item: loop.call_soon_threadsafe(queue.put_nowait,
                                                                                                       item),
                               is_cancelled=cancel.is_set)
            generated = 0
            while True:
                item = await queue.get()
                if isinstance(item, RequestCancelled):
                    return
                if isinstance(item, BaseException):
                    raise item
                generated += len(item.token_ids)
                chunk: dict[str, Any] = {"token_ids": list(item.token_ids), "index": 0}
                if item.finish_reason is not None:
                    stats = item.stats
                    chunk["finish_reason"] = item.finish_reason
                    chunk["completion_usage"] = completion_usage(len(prompt), generated,
                                                                 int(stats.num_accepted_tokens),
                                                                 int(stats.num_draft_tokens))
                    counted = self.engine.scheduler.stats
                    self.metrics.record(stats, prompt_tokens=len(prompt), generated=generated,
                                        finish_reason=item.finish_reason,
                                        cache=(counted.prefix_cache_queries, counted.prefix_cache_hits))
                    yield chunk
                    return
                yield chunk
        finally:
            cancel.set()  # a client gone (the generator closed early) or done: the engine lets it go
            running.dec()
            self.cancelled.pop(key, None)

    async def abort(self, context: Any) -> None:
        cancel = self.cancelled.get(context.id())
        if cancel is not None:
            cancel.set()

    async def cleanup(self) -> None:
        if self.engine is not None:
            engine, self.engine = self.engine, None
            await asyncio.to_thread(engine.close)


def main(argv: list[str] | None = None) -> None:
    run(TrtspecEngine, argv)


if __name__ == "__main__":
    main()
