"""What bench and tune send requests to when the server speaks OpenAI's API: a Dynamo stack's frontend
(`deploy --target dynamo`), or any OpenAI-compatible server (`bench --openai-url`).

Adapts trtspec.serve.dynamo.ask (the one OpenAI client of trtspec: the official `openai` package,
streaming, usage at the end) to trtspec.bench.load's Target contract. Each streamed text piece counts
as one token until the usage's completion_tokens gives the exact count (as a Triton stream's final
response does); the usage's completion_tokens_details (accepted and rejected prediction tokens)
are the request's draft counts. Drafts per step and acceptance by position are not in an answer:
`counters()` reads them from the workers' /metrics, summed over workers, under vLLM's names
(`vllm:spec_decode_num_drafts_total`, ...) and handed to the report under the cpu model's
(`trtspec:spec_decode_num_drafts`, ...), so the report's parser reads one set of names; a server
whose metrics already use the cpu model's names (trtspec's own OpenAI endpoint, its counters on
Triton's metrics port) is read as it is. Because the counters add up every request, acceptance per
prompt category and per context length needs each of those run alone: `acceptance_by_phase` asks
bench for that (trtspec.bench.phases).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator, Sequence
from typing import Any

from trtspec.bench.load import Chunk
from trtspec.bench.metrics import COUNTER_PREFIX, SpecCounts
from trtspec.bench.targets import SETTLE_S

VLLM = "vllm:"
TRTSPEC = "trtspec:"
# a worker's vLLM-named counter -> the name trtspec's report reads (labels kept)
RENAMES = {"spec_decode_num_drafts_total": COUNTER_PREFIX + "num_drafts",
           "spec_decode_num_draft_tokens_total": COUNTER_PREFIX + "num_draft_tokens",
           "spec_decode_num_accepted_tokens_total": COUNTER_PREFIX + "num_accepted_tokens",
           "spec_decode_num_accepted_tokens_per_pos_total": COUNTER_PREFIX + "num_accepted_tokens_per_pos",
           "prefix_cache_queries_total": "trtspec:prefix_cache_queries",
           "prefix_cache_hits_total": "trtspec:prefix_cache_hits",
           "num_requests_running": "trtspec:num_requests_running"}
RUNNING = "trtspec:num_requests_running"


def renamed(samples: dict[str, float]) -> dict[str, float]:
    """A worker's `vllm:` samples under trtspec's names; samples already under them (`trtspec:`,
    the cpu model's Triton metrics) as they are; others dropped."""
    out: dict[str, float] = {}
    for key, value in samples.items():
        if key.startswith(TRTSPEC):
            out[key] = value
            continue
        if not key.startswith(VLLM):
            continue
        name, brace, labels = key[len(VLLM):].partition("{")
        if name in RENAMES:
            out[RENAMES[name] + brace + labels] = value
    return out


def summed(per_worker: Sequence[dict[str, float]]) -> dict[str, float]:
    """Counters of every worker added by name (a model's workers carry the same labels)."""
    total: dict[str, float] = {}
    for samples in per_worker:
        for key, value in samples.items():
            total[key] = total.get(key, 0.0) + value
    return total


def spec_from_usage(usage: dict[str, Any] | None) -> SpecCounts | None:
    """SpecCounts from an answer's usage: drafted = accepted + rejected prediction tokens; drafts and
    positions are not reported per answer (the report takes them from the workers' counters)."""
    accepted = (usage or {}).get("accepted_prediction_tokens")
    if accepted is None:
        return None
    rejected = int((usage or {}).get("rejected_prediction_tokens") or 0)
    return SpecCounts(num_draft_tokens=int(accepted) + rejected, num_accepted_tokens=int(accepted))


class OpenAITarget:
    """An OpenAI-API server: chat turns (the server applies the chat template) or, `raw`, completions."""

    def __init__(self, url: str, model: str, metrics_urls: Sequence[str] = (), raw: bool = False, name: str = ""):
        from trtspec.serve.dynamo import ask

        self.url, self.model, self.raw = url, model, raw
        self.metrics_urls = list(metrics_urls)
        self.api = ask.client(url)  # one client, one connection pool, for every request of the run
        self.name = name or f"openai {url}"
        self.settled = True  # whether the last counters() found every worker idle (else read at SETTLE_S)
        self.warmup_requests = max(1, len(self.metrics_urls))  # one per worker (trtspec.bench.load's warm-up)
        # answers count no drafts: per category and per context length, from the counters of each run alone
        self.acceptance_by_phase = bool(self.metrics_urls)
        self.acceptance_source = ("each answer's usage.completion_tokens_details (accepted and rejected prediction "
                                  "tokens); drafts and positions from the workers' vllm:spec_decode_* counters, per "
                                  "category and context length from each run alone (bench.phases)")
        self.prompts_sent = ("completion prompt as given" if raw
                             else "one user turn; the server applies the target's chat template")
        # prompt text -> its tokens as the server counts them, without a request (trtspec.bench.phases);
        # None: a probe asks the server (set by trtspec.bench.runner where the model's tokenizer is here)
        self.count_prompt_tokens: Callable[[str], int] | None = None
        self.prompt_tokens_source = ""

    def stream(self, prompt: str, *, max_tokens: int, speculative: bool, temperature: float,
               seed: int | None) -> Iterator[Chunk]:
        """The request as the server is deployed: OpenAI's API has no switch for speculation, so
        `speculative` only says whether the answer's draft counts are kept (a baseline is a
        speculative.mode none deployment, as tune --served runs it; bench refuses --baseline here)."""
        from trtspec.serve.dynamo import ask

        for text, stats in ask.stream(self.url, self.model, prompt, raw=self.raw, max_tokens=max_tokens,
                                      temperature=temperature, top_p=None, seed=seed, api=self.api):
            if stats is None:
                yield Chunk(1 if text else 0)
                continue
            total = stats.get("num_output_tokens")
            yield Chunk(0, final=True, spec=spec_from_usage(stats) if speculative else None,
                        output_tokens=int(total) if total is not None
                        else None, prompt_tokens=stats.get("num_input_tokens"))

    def metrics_problem(self) -> str | None:
        """Why the workers' counters cannot be read (None when they can)."""
        if not self.metrics_urls:
            return "no worker metrics given (drafts per step and acceptance by position come from them)"
        for url in self.metrics_urls:
            try:
                self._read(url)
            except Exception as error:  # noqa: BLE001 - any failure means the same: no counters
                return f"no worker counters at {url} ({type(error).__name__})"
        return None

    def counters(self) -> dict[str, float] | None:
        """Every worker's counters, summed, once they all report no running request (as
        TritonTarget.counters waits for the cpu model's idle gauges, up to SETTLE_S; a worker counts
        an answer before its last chunk leaves, but lets the request go only after, so a read right
        at a block's end can find it still running). Busy at SETTLE_S: read anyway, `settled` False."""
        if not self.metrics_urls:
            return None
        deadline = time.monotonic() + SETTLE_S
        while True:
            try:
                values = summed([self._read(url) for url in self.metrics_urls])
            except Exception:  # noqa: BLE001 - a worker restarting or gone: no counters this read
                return None
            running = sum(v for k, v in values.items() if k == RUNNING or k.startswith(RUNNING + "{"))
            self.settled = running <= 0
            if self.settled or time.monotonic() >= deadline:
                return values
            time.sleep(0.02)

    @staticmethod
    def _read(url: str) -> dict[str, float]:
        import urllib.request

        from trtspec.client.metrics import parse_prometheus

        with urllib.request.urlopen(url, timeout=5) as response:  # noqa: S310 - the workers' own metrics
            return renamed(parse_prometheus(response.read().decode()))

    def close(self) -> None:
        self.api.close()


def dynamo_target(spec: Any, layout: Any, raw: bool = False) -> tuple[OpenAITarget, dict[str, Any]]:
    """The Dynamo stack this workdir runs (its record: the frontend's address, each worker's metrics
    port), and what bench.json says of it."""
    from trtspec.errors import ServerError
    from trtspec.serve.dynamo import ask, launcher
    from trtspec.serve.supervisor import read_record

    record = read_record(launcher.record_path(layout))
    status = launcher.status(layout)
    if record is None or not status.get("ready"):
        raise ServerError(f"the Dynamo stack of {layout.workdir} is not serving ({status.get('state')}: "
                          f"{status.get('registered_workers', 0)} workers registered)",
                          fix="`trtspec deploy --target dynamo`, or `trtspec deploy status` to see why")
    url = ask.base_url(layout)
    host = "127.0.0.1" if record.get("host") in (None, "", "0.0.0.0") else record["host"]
    metrics = [f"http://{host}:{worker['system_port']}/metrics" for worker in record["workers"]]
    target = OpenAITarget(url, spec.model_name, metrics, raw, name=f"dynamo {url} ({len(metrics)} workers)")
    return target, {"target": target.name, "metrics_url": ", ".join(metrics), "prompts_sent": target.prompts_sent,
                    "workers": len(metrics), "router": record["spec"]["serve"]["dynamo"]["router"]}

