"""Plain greedy decoding tokens/s at 1 and 2 threads (--threads: any counts) x batch 1 and 8: this
engine, HF transformers' `generate`, (with --previous) an older checkout's engine and (with
--bfloat16) this engine with model.dtype bfloat16; each figure its own process.

Why its own process: a torch process keeps its OpenMP teams and thread count, so figures measured
one after the other in one process read each other's state (docs/BENCHMARKS-log.md, "Threads").
Rounds: every contender runs once per round in a fixed order, rounds repeat; the table gives each
figure's median over rounds. Batch 8 is 8 caller threads calling `Engine.generate` at once (the
engine batches them in flight); HF runs batch 1 only (its `generate` does not batch callers).
Prompts: the first held-out summarize prompts of the dev set (lines 16-30 are held back from tuning).

    .venv/bin/python -m benchmarks threads --rounds 3 --max-tokens 48 --previous /tmp/trtspec-90883af
    .venv/bin/python -m benchmarks threads --rounds 3 --bfloat16
    .venv/bin/python -m benchmarks threads --threads 1,2,4,8,16 --hf-threads 1,16   # a 16-core machine
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

from benchmarks.common import dev_rows

CHILD = r"""
import json, sys, threading, time
from concurrent.futures import ThreadPoolExecutor
kind, batch, max_tokens, prompts = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), json.loads(sys.argv[4])
from trtspec.models import resolve_model
path = resolve_model("smollm2", quiet=True).path
if kind == "hf":
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer
    tok = AutoTokenizer.from_pretrained(str(path))
    model = AutoModelForCausalLM.from_pretrained(str(path), torch_dtype=torch.float32).eval()
    ids = [tok.apply_chat_template([{"role": "user", "content": p}], add_generation_prompt=True, return_tensors="pt")
           for p in prompts]
    ids = [i if isinstance(i, torch.Tensor) else i["input_ids"] for i in ids]
    def one(i):
        with torch.inference_mode():
            out = model.generate(i, max_new_tokens=max_tokens, min_new_tokens=max_tokens, do_sample=False)
        return out.shape[1] - i.shape[1]
    one(ids[0][:, :8])  # warm-up
    start = time.perf_counter(); tokens = sum(one(i) for i in ids)
else:
    from trtspec.runtime import Engine
    engine = Engine.from_checkpoints(path, mode="none", dtype="bfloat16" if kind == "engine-bf16" else "float32")
    ids = [engine.encode(p, None) for p in prompts]
    engine.generate(ids[0], max_new_tokens=4)  # warm-up
    def one(i):
        return len(engine.generate(i, max_new_tokens=max_tokens, speculative=False).token_ids)
    start = time.perf_counter()
    if batch == 1:
        tokens = sum(one(i) for i in ids)
    else:
        work = [ids[n % len(ids)] for n in range(batch)]
        barrier = threading.Barrier(batch)
        def together(i):
            barrier.wait(); return one(i)
        with ThreadPoolExecutor(batch) as pool:
            tokens = sum(pool.map(together, work))
import trtspec
print(json.dumps({"tokens": tokens, "seconds": time.perf_counter() - start, "trtspec": trtspec.__file__}))
"""


def held_out_summaries(count: int) -> list[str]:
    rows = dev_rows(held_back=True)
    return [r["prompt"] for r in rows if r["category"] == "summarize"][:count]


def run_one(kind: str, threads: int, batch: int, max_tokens: int, prompts: list[str], previous: Path | None) -> float:
    env = {**os.environ, "OMP_NUM_THREADS": str(threads)}
    if kind == "previous":
        # that checkout's trtspec package first, the rest of the path as it was (the device's wheels)
        env["PYTHONPATH"] = os.pathsep.join(p for p in (str(previous), os.environ.get("PYTHONPATH")) if p)
    out = subprocess.run([sys.executable, "-c", CHILD, "engine" if kind == "previous" else kind, str(batch), str(max_tokens),
                          json.dumps(prompts)], env=env, capture_output=True, text=True, check=True,
                         cwd=str(previous) if kind == "previous" else None)
    result = json.loads(out.stdout.strip().splitlines()[-1])
    if kind == "previous" and not result["trtspec"].startswith(str(previous)):
        raise SystemExit(f"the previous run imported {result['trtspec']}, not the checkout {previous}")
    return result["tokens"] / result["seconds"]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--max-tokens", type=int, default=48)
    parser.add_argument("--num-prompts", type=int, default=3)
    parser.add_argument("--previous", type=Path, default=None, help="a checkout of an older trtspec to compare")
    parser.add_argument("--threads", default="1,2", help="OMP_NUM_THREADS values for the engines")
    parser.add_argument("--bfloat16", action="store_true", help="also this engine with model.dtype bfloat16")
    parser.add_argument("--hf-threads", default=None, help="OMP_NUM_THREADS values for HF (default: --threads)")
    args = parser.parse_args()
    prompts = held_out_summaries(args.num_prompts)
    threads = [int(t) for t in args.threads.split(",")]
    hf_threads = [int(t) for t in (args.hf_threads or args.threads).split(",")]
    contenders = [("engine", t, b) for t in threads for b in (1, 8)] + [("hf", t, 1) for t in hf_threads]
    if args.previous is not None:
        contenders += [("previous", t, b) for t in threads for b in (1, 8)]
    if args.bfloat16:
        contenders += [("engine-bf16", t, b) for t in threads for b in (1, 8)]
    figures: dict[tuple, list[float]] = {c: [] for c in contenders}
    for round_number in range(args.rounds):
        for contender in contenders:
            figures[contender].append(run_one(*contender, args.max_tokens, prompts, args.previous))
            print(round_number, *contender, round(figures[contender][-1], 2), flush=True)
    print("\n| contender | threads | batch | tokens/s (median) | rounds |\n|---|---:|---:|---:|---|")
    for (kind, threads, batch), values in figures.items():
        print(f"| {kind} | {threads} | {batch} | {statistics.median(values):.1f} | "
              f"{', '.join(f'{v:.1f}' for v in values)} |")
    load = os.getloadavg()
    print(f"\n{time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}, load average {load[0]:.1f}, "
          f"{os.cpu_count()} cores, {len(prompts)} held-out summarize prompts x {args.max_tokens} tokens")


if __name__ == "__main__":
    main()
