"""What the OpenAI-compatible API adds over tritonclient: TTFT p50 and tokens/s, same server, same requests.

    python -m benchmarks openai-overhead --grpc 127.0.0.1:8001 --openai http://127.0.0.1:9000/v1 \
        --model smollm2 --concurrency 1 8 --repeats 3 --requests 16 --max-tokens 64

One running `trtspec deploy` with serve.openai_port. Each round sends the same chat prompts (the
package's bench prompts, one user turn, greedy, streaming) at each concurrency through both
paths, one path after the other in alternating order, `--repeats` rounds; a path's figures are
the medians over rounds of each round's TTFT p50 and of its output tokens / wall seconds. Both
paths give the same tokens (greedy, same chat template), so the ratio is the frontend's cost.
Prints one JSON document.
"""

from __future__ import annotations

import argparse
import json
import statistics
import time
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from benchmarks.common import dev_rows, percentile


def _prompts(count: int) -> list[str]:
    prompts = [row["prompt"] for row in dev_rows()]
    return [prompts[i % len(prompts)] for i in range(count)]


def _triton_one(client: Any, prompt: str, max_tokens: int) -> tuple[float, int]:
    # one gRPC stream per request; one user turn through the chat template, as the OpenAI chat sends it
    result = client.generate(prompt, max_tokens=max_tokens, temperature=0.0, extra={"chat_template": True})
    return result["ttft_s"], int(result["num_output_tokens"])


def _openai_one(api: Any, model: str, prompt: str, max_tokens: int) -> tuple[float, int]:
    start, ttft, tokens = time.perf_counter(), None, 0
    stream = api.chat.completions.create(model=model, messages=[{"role": "user", "content": prompt}], temperature=0,
                                         max_completion_tokens=max_tokens, stream=True,
                                         stream_options={"include_usage": True})
    for chunk in stream:
        if ttft is None and chunk.choices and chunk.choices[0].delta.content:
            ttft = time.perf_counter() - start
        if chunk.usage is not None:
            tokens = chunk.usage.completion_tokens
    return (ttft if ttft is not None else time.perf_counter() - start), tokens


def _round(send: Any, prompts: list[str], concurrency: int) -> dict[str, float]:
    start = time.perf_counter()
    with ThreadPoolExecutor(concurrency) as pool:
        results = list(pool.map(send, prompts))
    wall = time.perf_counter() - start
    return {"ttft_p50_s": percentile([r[0] for r in results], 50), "tokens_per_s": sum(r[1] for r in results) / wall,
            "tokens": sum(r[1] for r in results)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--grpc", required=True)
    parser.add_argument("--openai", required=True, help="base URL, e.g. http://127.0.0.1:9000/v1")
    parser.add_argument("--model", required=True, help="the served model name")
    parser.add_argument("--concurrency", type=int, nargs="+", default=[1, 8])
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--requests", type=int, default=16)
    parser.add_argument("--max-tokens", type=int, default=64)
    args = parser.parse_args()
    from openai import OpenAI

    from trtspec.client.triton import TritonLLMClient

    api = OpenAI(base_url=args.openai, api_key="unused", max_retries=0, timeout=600)
    triton = TritonLLMClient(args.grpc)
    triton.config  # noqa: B018 - read the model config once, before the clock runs
    paths = {"tritonclient": lambda p: _triton_one(triton, p, args.max_tokens),
             "openai": lambda p: _openai_one(api, args.model, p, args.max_tokens)}
    _round(paths["openai"], _prompts(2), 1)  # warm both paths (connections, first-request costs)
    _round(paths["tritonclient"], _prompts(2), 1)
    report: dict[str, Any] = {"requests": args.requests, "max_tokens": args.max_tokens, "repeats": args.repeats}
    for concurrency in args.concurrency:
        rounds: dict[str, list[dict[str, float]]] = {name: [] for name in paths}
        for repeat in range(args.repeats):
            order = list(paths) if repeat % 2 == 0 else list(reversed(paths))
            for name in order:
                rounds[name].append(_round(paths[name], _prompts(args.requests), concurrency))
        summary = {name: {key: statistics.median(r[key] for r in runs) for key in ("ttft_p50_s", "tokens_per_s")}
                   | {"tokens_per_round": [r["tokens"] for r in runs]} for name, runs in rounds.items()}
        summary["openai_over_tritonclient"] = {
            "ttft_p50": summary["openai"]["ttft_p50_s"] / summary["tritonclient"]["ttft_p50_s"],
            "tokens_per_s": summary["openai"]["tokens_per_s"] / summary["tritonclient"]["tokens_per_s"]}
        report[f"concurrency_{concurrency}"] = summary
    print(json.dumps(report, indent=2))


if __name__ == "__main__":
    main()
