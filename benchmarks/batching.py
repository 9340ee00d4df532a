"""In-process batching benchmark on SmolLM2: trtspec's engine (plain and speculative) against
transformers' own continuous batching (ContinuousBatchingManager), same prompts, greedy.

Closed-loop load: at concurrency c, c requests are in flight at once and a new one starts as soon
as one ends, until every prompt has run. Every contender runs the same chat-templated token ids
with the same max_new_tokens; contenders alternate in rotated order within each repeat, so
machine noise hits them alike. Reports per contender and concurrency the median over repeats of
aggregate output tokens/s, and TTFT p50/p99 and per-user TPOT over all repeats; ratios are
medians of per-repeat ratios, taken in the same run. Outputs are compared token for token
(trtspec plain vs speculative must agree exactly; transformers' may differ where float rounding
differs).

transformers runs on a model loaded as transformers loads it (plain nn.Linear, its paged SDPA
attention); trtspec on its own engine (prepacked weights, its paged attention), n-gram drafter.

    .venv/bin/python -m benchmarks batching --concurrency 1,8 --max-tokens 64 --repeats 3 \\
        --out reports/batching.json
"""

from __future__ import annotations

import argparse
import json
import queue
import statistics
import sys
import threading
import time
from collections import defaultdict
from pathlib import Path

from benchmarks.common import dev_rows, median_ratio, percentile, smollm2


def closed_loop(run_one, prompts: list[list[int]], concurrency: int) -> tuple[float, list[dict]]:
    """Run `run_one(ids) -> (tokens, ttft_s, e2e_s, token_ids)` over all prompts with `concurrency`
    in flight. Returns (wall seconds, per-request records)."""
    pending: queue.Queue = queue.Queue()
    for index, ids in enumerate(prompts):
        pending.put((index, ids))
    records, lock = [], threading.Lock()

    def worker():
        while True:
            try:
                index, ids = pending.get_nowait()
            except queue.Empty:
                return
            tokens, ttft, e2e, token_ids = run_one(ids)
            with lock:
                records.append({"prompt": index, "tokens": tokens, "ttft_s": ttft, "e2e_s": e2e,
                                "token_ids": token_ids})

    started = time.perf_counter()
    threads = [threading.Thread(target=worker) for _ in range(concurrency)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    return time.perf_counter() - started, records


def trtspec_contender(engine, max_tokens: int, speculative: bool):
    def run_one(ids):
        started = time.perf_counter()
        ttft, token_ids = None, []
        for chunk in engine.generate(ids, max_new_tokens=max_tokens, speculative=speculative, stream=True):
            if chunk.token_ids and ttft is None:
                ttft = time.perf_counter() - started
            token_ids.extend(chunk.token_ids)
        return len(token_ids), ttft, time.perf_counter() - started, token_ids
    return run_one


class HFRouter:
    """One thread reads the manager's shared output queue and hands each result to its request
    (its asyncio result handlers need an event loop; per-request iterators requeue each other's)."""

    def __init__(self, manager):
        self.manager = manager
        self.queues: dict[str, queue.Queue] = {}
        self.lock = threading.Lock()
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self._route, daemon=True)
        self.thread.start()

    def submit(self, ids, max_tokens: int) -> queue.Queue:
        results: queue.Queue = queue.Queue()
        with self.lock:  # registered before the manager can answer
            request_id = self.manager.add_request(ids, max_new_tokens=max_tokens, streaming=True)
            self.queues[request_id] = results
        return results

    def _route(self):
        while not self.stop.is_set():
            result = self.manager.get_result(timeout=0.05)
            if result is None:
                continue
            with self.lock:
                target = self.queues.get(result.request_id)
            if target is not None:
                target.put(result)


def hf_contender(router: HFRouter, max_tokens: int):
    def run_one(ids):
        started = time.perf_counter()
        results = router.submit(ids, max_tokens)
        ttft, tokens = None, []
        while True:
            result = results.get()
            if result.generated_tokens and ttft is None:
                ttft = time.perf_counter() - started
            tokens = list(result.generated_tokens)
            if result.is_finished():
                return len(tokens), ttft, time.perf_counter() - started, tokens
    return run_one


def hf_manager(path, max_tokens: int, max_concurrency: int, eos_token_id):
    import torch
    from transformers import AutoModelForCausalLM, GenerationConfig
    from transformers.generation.configuration_utils import ContinuousBatchingConfig

    model = AutoModelForCausalLM.from_pretrained(str(path), dtype=torch.float32).eval()
    generation = GenerationConfig(max_new_tokens=max_tokens, do_sample=False, eos_token_id=eos_token_id)
    batching = ContinuousBatchingConfig(block_size=32, num_blocks=max_concurrency * 64,
                                        max_requests_per_batch=max_concurrency, max_batch_tokens=2048)
    manager = model.init_continuous_batching(generation_config=generation, continuous_batching_config=batching)
    manager.start()
    return manager


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--concurrency", default="1,8")
    parser.add_argument("--max-tokens", type=int, default=64)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--num-prompts", type=int, default=0, help="only the first N dev prompts")
    parser.add_argument("--threads", type=int, default=0, help="torch threads (0: torch's default)")
    parser.add_argument("--max-batch-size", type=int, default=16)
    parser.add_argument("--out", type=Path, default=None)
    args = parser.parse_args()
    import os

    import torch

    from trtspec.runtime import Engine

    if args.threads:
        torch.set_num_threads(args.threads)
    concurrencies = [int(c) for c in args.concurrency.split(",")]
    path = smollm2()
    engine = Engine.from_checkpoints(path, mode="ngram", max_draft_len=4, ngram_min=2, ngram_max=3,
                                     max_batch_size=args.max_batch_size)
    rows = dev_rows()
    if args.num_prompts:
        rows = rows[: args.num_prompts]
    prompts = [engine.encode(row["prompt"]) for row in rows]
    manager = hf_manager(path, args.max_tokens, max(concurrencies), sorted(engine.eos_ids))
    router = HFRouter(manager)
    contenders = {"trtspec plain": trtspec_contender(engine, args.max_tokens, False),
                  "trtspec speculative": trtspec_contender(engine, args.max_tokens, True),
                  "transformers continuous batching": hf_contender(router, args.max_tokens)}
    for run_one in contenders.values():  # warm-up: lazy init, allocator growth
        closed_loop(run_one, prompts[:2], 2)
    results: dict[tuple[str, int], list[dict]] = defaultdict(list)
    loads = []
    try:
        for concurrency in concurrencies:
            for repeat in range(args.repeats):
                names = list(contenders)
                names = names[repeat % len(names):] + names[: repeat % len(names)]
                for name in names:
                    loads.append(os.getloadavg()[0])
                    seconds, records = closed_loop(contenders[name], prompts, concurrency)
                    results[(name, concurrency)].append({"seconds": seconds, "records": records})
                    tokens = sum(r["tokens"] for r in records)
                    print(f"c={concurrency} repeat {repeat} {name}: {tokens / seconds:.1f} tok/s", file=sys.stderr)
    finally:
        router.stop.set()
        manager.stop(block=True)
        engine.close()
    summary = summarize(results, concurrencies, args.repeats)
    summary["load_average_during"] = {"min": min(loads), "median": statistics.median(loads), "max": max(loads)}
    summary["settings"] = {"max_tokens": args.max_tokens, "repeats": args.repeats, "num_prompts": len(prompts),
                           "threads": torch.get_num_threads(), "cpu_count": os.cpu_count()}
    print(to_markdown(summary))
    if args.out:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(json.dumps(summary, indent=2))
    return 0


def summarize(results, concurrencies, repeats) -> dict:
    table = []
    for (name, concurrency), runs in results.items():
        rates = [sum(r["tokens"] for r in run["records"]) / run["seconds"] for run in runs]
        records = [r for run in runs for r in run["records"]]
        tpot = [(r["e2e_s"] - r["ttft_s"]) / (r["tokens"] - 1) for r in records if r["tokens"] > 1 and r["ttft_s"]]
        ttft = [r["ttft_s"] for r in records if r["ttft_s"] is not None]
        table.append({"contender": name, "concurrency": concurrency, "output_tok_s": statistics.median(rates),
                      "output_tok_s_by_repeat": rates, "ttft_p50_ms": 1000 * percentile(ttft, 50), "ttft_p99_ms": 1000 * percentile(ttft, 99),
                      "tpot_median_ms": 1000 * statistics.median(tpot) if tpot else float("nan")})
    ratios = []
    by = {(row["contender"], row["concurrency"]): row for row in table}
    def ratio(a, b, concurrency):
        return median_ratio(by[(a, concurrency)]["output_tok_s_by_repeat"], by[(b, concurrency)]["output_tok_s_by_repeat"])

    for concurrency in concurrencies:
        same = _agreement(results, "trtspec plain", "trtspec speculative", concurrency)
        peer = _agreement(results, "trtspec plain", "transformers continuous batching", concurrency)
        ratios.append({"concurrency": concurrency,
                       "speculative_over_plain": ratio("trtspec speculative", "trtspec plain", concurrency),
                       "trtspec_plain_over_transformers": ratio("trtspec plain", "transformers continuous batching",
                                                                concurrency),
                       "plain_vs_speculative_identical": same, "plain_vs_transformers_identical": peer})
    first = min(concurrencies)
    scaling = {c: statistics.median(by[("trtspec plain", c)]["output_tok_s_by_repeat"])
               / statistics.median(by[("trtspec plain", first)]["output_tok_s_by_repeat"]) for c in concurrencies}
    return {"results": table, "ratios": ratios, "plain_scaling_over_lowest_concurrency": scaling}


def _agreement(results, a: str, b: str, concurrency: int) -> str:
    outputs = {}
    for name in (a, b):
        outputs[name] = {r["prompt"]: r["token_ids"] for run in results[(name, concurrency)] for r in run["records"]}
    same = sum(outputs[a][p] == outputs[b][p] for p in outputs[a])
    return f"{same}/{len(outputs[a])}"


def to_markdown(summary: dict) -> str:
    lines = ["| contender | conc | out tok/s (median) | TTFT p50 ms | TTFT p99 ms | TPOT median ms |",
             "|---|---:|---:|---:|---:|---:|"]
    for row in sorted(summary["results"], key=lambda r: (r["concurrency"], r["contender"])):
        lines.append(f"| {row['contender']} | {row['concurrency']} | {row['output_tok_s']:.1f} | "
                     f"{row['ttft_p50_ms']:.0f} | {row['ttft_p99_ms']:.0f} | {row['tpot_median_ms']:.1f} |")
    lines += ["", "| conc | speculative / plain | trtspec plain / transformers | plain == speculative | "
              "plain == transformers |", "|---:|---:|---:|---:|---:|"]
    for row in summary["ratios"]:
        lines.append(f"| {row['concurrency']} | {row['speculative_over_plain']:.2f}x | "
                     f"{row['trtspec_plain_over_transformers']:.2f}x | {row['plain_vs_speculative_identical']} | "
                     f"{row['plain_vs_transformers_identical']} |")
    scaling = ", ".join(f"c{c}: {v:.2f}x" for c, v in summary["plain_scaling_over_lowest_concurrency"].items())
    lines += ["", f"trtspec plain aggregate tok/s over the lowest concurrency: {scaling}"]
    return "\n".join(lines)


if __name__ == "__main__":
    sys.exit(main())
