"""Kept prompts (build.kv_cache_reuse_mib) against the shared chat start alone and no reuse, in
process, plain greedy decoding, on two workloads where requests share more than the template:

  system  every request: one custom system prompt (SYSTEM below, or --system) and a user turn
          "Request N: <prompt>", N unique, so requests share the system prompt and nothing after it;
  unique  every request: "Request N: <prompt>" with the template's default system message, N
          unique: nothing beyond the shared start to copy, so kept prompts only cost (keeping each);
  turns   every request: a second turn, [user: prompt, assistant: the target's own first answer,
          user: FOLLOW_UP], after a first request with the first turn alone (both timed).

Variants (one engine each over the same weights, every round runs them in turn, alternating order):
kept (kv_cache_reuse on, kv_cache_reuse_mib as built), start (on, kv_cache_reuse_mib 0: the chat
template's shared start only), off (kv_cache_reuse false). Prints per workload, concurrency and
variant: tokens/s per round, the median per-round ratio to `start`, and the prompt tokens copied.

    .venv/bin/python -m benchmarks prompt-reuse --engine engines/smollm2-ngram-cpu \\
        --concurrency 1,8 --requests 8,32 --rounds 3 --max-tokens 32
"""

from __future__ import annotations

import argparse
import statistics
import threading
import time
from concurrent.futures import ThreadPoolExecutor

from benchmarks.common import dev_rows

SYSTEM = ("You are the support assistant of a small bookshop. Answer the customer's question in plain "
          "language, in at most three sentences. Be friendly but brief. If the question is about an order, "
          "ask for the order number. Never invent prices, titles or delivery dates; say you will check "
          "instead. Do not use lists or headings. If the question is not about books or the shop, answer "
          "it briefly anyway and offer to help with books.")
FOLLOW_UP = "Thanks. Can you say that again in one sentence?"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--engine", required=True, help="a built cpu engine directory")
    parser.add_argument("--concurrency", default="1,8")
    parser.add_argument("--requests", default="8,32", help="requests per concurrency")
    parser.add_argument("--max-tokens", type=int, default=32)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--system", default=SYSTEM, help="the shared system prompt of the 'system' workload")
    parser.add_argument("--workloads", default="system,unique,turns")
    args = parser.parse_args()

    from trtspec.chat import conversation_ids
    from trtspec.runtime import load_engine

    base = load_engine(args.engine)
    engines = {"kept": base, "start": base.variant(kv_cache_reuse_mib=0),
               "off": base.variant(kv_cache_reuse=False)}
    texts = [row["prompt"] for row in dev_rows()]
    tokenizer = base.tokenizer
    counter = iter(range(10**9))  # request numbers: never the same user turn twice in the system workload
    first_answers: dict[str, list[int]] = {}

    def system_request(index: int) -> list[list[int]]:
        user = f"Request {next(counter)}: {texts[index % len(texts)]}"
        return [conversation_ids(tokenizer, [{"role": "system", "content": args.system},
                                             {"role": "user", "content": user}], add_generation_prompt=True)]

    def turns_request(index: int) -> list[list[int]]:
        text = texts[index % len(texts)]
        first = [{"role": "user", "content": text}]
        if text not in first_answers:  # the target's own answer, greedy, made where nothing is kept
            first_answers[text] = engines["off"].generate(conversation_ids(tokenizer, first, add_generation_prompt=True),
                                                max_new_tokens=args.max_tokens, speculative=False).token_ids
        answer = tokenizer.decode(first_answers[text], skip_special_tokens=True)
        second = first + [{"role": "assistant", "content": answer}, {"role": "user", "content": FOLLOW_UP}]
        return [conversation_ids(tokenizer, first, add_generation_prompt=True),
                conversation_ids(tokenizer, second, add_generation_prompt=True)]

    def unique_request(index: int) -> list[list[int]]:
        user = f"Request {next(counter)}: {texts[index % len(texts)]}"
        return [conversation_ids(tokenizer, [{"role": "user", "content": user}], add_generation_prompt=True)]

    workloads = {"system": system_request, "unique": unique_request, "turns": turns_request}
    concurrencies = [int(c) for c in args.concurrency.split(",")]
    counts = [int(n) for n in args.requests.split(",")]
    for engine in engines.values():
        engine.generate(texts[0], max_new_tokens=4, speculative=False)
    results: dict[tuple, list[dict]] = {}
    for number in range(args.rounds):
        for workload in args.workloads.split(","):
            for concurrency, requests in zip(concurrencies, counts, strict=True):
                batches = [workloads[workload](number * requests + i) for i in range(requests)]
                order = list(engines) if number % 2 == 0 else list(reversed(engines))
                for name in order:
                    results.setdefault((workload, concurrency, name), []).append(
                        _measure(engines[name], batches, concurrency, args.max_tokens))
    for workload in args.workloads.split(","):
        for concurrency in concurrencies:
            for name in engines:
                rows = results[(workload, concurrency, name)]
                ratios = [r["tok_s"] / s["tok_s"] for r, s in zip(rows, results[(workload, concurrency, "start")],
                                                                   strict=True)]
                print(f"{workload} conc {concurrency} {name}: tok/s {[round(r['tok_s'], 1) for r in rows]}, "
                      f"vs start {statistics.median(ratios):.3f} {[round(x, 3) for x in ratios]}, prompt tokens "
                      f"copied {sum(r['copied'] for r in rows)} of {sum(r['prompt'] for r in rows)}")
    return 0


def _measure(engine, batches: list[list[list[int]]], concurrency: int, max_tokens: int) -> dict:
    """Each request runs its prompts in turn (a conversation's turns); `concurrency` requests at a time."""
    tokens, lock = [0], threading.Lock()
    before = engine.scheduler.snapshot()

    def one(prompts: list[list[int]]) -> None:
        for ids in prompts:
            result = engine.generate(ids, max_new_tokens=max_tokens, speculative=False)
            with lock:
                tokens[0] += len(result.token_ids)

    started = time.perf_counter()
    with ThreadPoolExecutor(concurrency) as pool:
        list(pool.map(one, batches))
    wall = time.perf_counter() - started
    after = engine.scheduler.snapshot()
    return {"tok_s": tokens[0] / wall, "copied": after.prefix_cache_hits - before.prefix_cache_hits,
            "prompt": sum(len(ids) for prompts in batches for ids in prompts)}


if __name__ == "__main__":
    raise SystemExit(main())
