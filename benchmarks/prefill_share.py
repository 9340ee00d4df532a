"""Where the cpu engine's time goes under load: steps that carry prompt rows vs decode-only steps.

In process, plain decoding, each request streamed by its own caller thread (concurrency c); every
target forward is timed and tagged by whether it carried prompt rows. Prints per concurrency:
tokens/s, the share of forward time in steps with prompt rows, the median decode-only forward and
the mean batch. Rounds alternate the concurrencies; with --compare-reuse every round also runs the
engine with `kv_cache_reuse` off beside it (the same weights) and prints on / off.

    .venv/bin/python -m benchmarks prefill-share --engine engines/smollm2-ngram-cpu \\
        --prompts heldback.jsonl --concurrency 1,8 --requests 15,48 --rounds 2 --compare-reuse
"""

from __future__ import annotations

import argparse
import json
import statistics
import threading
import time
from concurrent.futures import ThreadPoolExecutor


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--engine", required=True, help="a built cpu engine directory")
    parser.add_argument("--prompts", required=True, help="JSONL prompt file")
    parser.add_argument("--concurrency", default="1,8")
    parser.add_argument("--requests", default="15,48", help="requests per concurrency (prompts cycled)")
    parser.add_argument("--max-tokens", type=int, default=64)
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--compare-reuse", action="store_true", help="also kv_cache_reuse off, alternating")
    args = parser.parse_args()

    import trtspec.runtime.loop.step as step
    from trtspec.runtime import load_engine

    forwards: list[tuple[bool, int, float]] = []   # (carried prompt rows, sequences, seconds)
    untimed = step.forward

    def timed(target, feeds, *rest, **options):
        started = time.perf_counter()
        out = untimed(target, feeds, *rest, **options)
        # plain decoding: a decode feed is one token, so a feed of several is a prompt chunk
        forwards.append((any(len(f.token_ids) > 1 for f in feeds), len(feeds), time.perf_counter() - started))
        return out

    step.forward = timed
    base = load_engine(args.engine)
    engines = {"on": base.variant(kv_cache_reuse=True)}
    if args.compare_reuse:
        engines["off"] = base.variant(kv_cache_reuse=False)
    prompts = [json.loads(line)["prompt"] for line in open(args.prompts) if line.strip()]
    concurrencies = [int(c) for c in args.concurrency.split(",")]
    counts = [int(n) for n in args.requests.split(",")]
    for engine in engines.values():
        engine.generate(prompts[0], max_new_tokens=4, speculative=False)
    results: dict[tuple[str, int], list[dict]] = {}
    for number in range(args.rounds):
        for concurrency, requests in zip(concurrencies, counts, strict=True):
            order = list(engines) if number % 2 == 0 else list(reversed(engines))
            for name in order:
                results.setdefault((name, concurrency), []).append(
                    _measure(engines[name], prompts, concurrency, requests, args.max_tokens, forwards))
    for concurrency in concurrencies:
        for name in engines:
            rows = results[(name, concurrency)]
            print(f"reuse {name} conc {concurrency}: tok/s {[round(r['tok_s'], 1) for r in rows]}, forward time in "
                  f"steps with prompt rows {[round(100 * r['prompt_share']) for r in rows]} %, decode-only forward "
                  f"{[round(r['decode_ms'], 1) for r in rows]} ms, mean batch {rows[0]['batch']:.2f}")
        if args.compare_reuse:
            ratios = [a["tok_s"] / b["tok_s"] for a, b in zip(results[("on", concurrency)], results[("off", concurrency)],
                                                              strict=True)]
            print(f"conc {concurrency}: reuse on / off {statistics.median(ratios):.3f} (rounds {[round(r, 3) for r in ratios]})")
    stats = engines["on"].scheduler.snapshot()
    print(f"shared prompt start: {stats.prefix_cache_hits} of {stats.prefix_cache_queries} prompt tokens copied")
    return 0


def _measure(engine, prompts, concurrency, requests, max_tokens, forwards) -> dict:
    forwards.clear()
    tokens, lock = [0], threading.Lock()

    def one(index: int) -> None:
        result = engine.generate(prompts[index % len(prompts)], max_new_tokens=max_tokens, speculative=False)
        with lock:
            tokens[0] += len(result.token_ids)

    started = time.perf_counter()
    with ThreadPoolExecutor(concurrency) as pool:
        list(pool.map(one, range(requests)))
    wall = time.perf_counter() - started
    total = sum(seconds for *_, seconds in forwards)
    decode = [seconds for prompt, _, seconds in forwards if not prompt]
    return {"tok_s": tokens[0] / wall, "prompt_share": sum(s for p, _, s in forwards if p) / total,
            "decode_ms": 1e3 * statistics.median(decode), "batch": statistics.mean(n for _, n, _ in forwards)}


if __name__ == "__main__":
    raise SystemExit(main())
