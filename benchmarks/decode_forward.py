"""One decode forward's cost at fixed contexts, batch 1 and 8: the engine or HF transformers, at
one thread count, in this process (run one process per figure: a torch process keeps its
OpenMP teams). Prints one RESULT line (medians of 9 forwards) and, with --profile, the per-op
table of 5 forwards at --profile-batch (1 or 8).

Why: tokens/s (benchmarks/threads.py) says which contender is slower; this says where a
step's time goes, with variants that swap one part:
  --onednn-linear         every linear layer on oneDNN's prepacked weights, as before the kernel
                          was chosen per layer at load (trtspec.runtime.forward.linear_choice)
  --mkl-linear            the engine's linear layers on F.linear (MKL), unpadded (NOT
                          batch-invariant: a measurement, not a setting)
  --small-linear-threads N  the engine's linear layers other than lm_head on N threads
  --measured-linear-threads each linear layer on the thread count (1, 2, 4, ... up to the
                          process's) that ran it fastest at 1 and 8 rows, timed in the step's thread
                          before the forwards (row invariance not re-probed at that count)
  --attention-one-thread  the engine's attention on one thread
Contexts: 8 sequences of 96-103 random prompt tokens; every forward appends one token per
sequence and is then rolled back, so each forward sees the same contexts.

    OMP_NUM_THREADS=16 .venv/bin/python -m benchmarks decode-forward engine 16 --profile
    .venv/bin/python -m benchmarks decode-forward hf 16
"""

from __future__ import annotations

import argparse
import statistics
import threading
import time
from collections import Counter

from benchmarks.common import smollm2

PROMPT_TOKENS = 96
BATCHES = (1, 8)


def engine_steps(threads: int, args) -> tuple:
    """(step(batch) -> seconds, setup run in the worker thread) for the engine's paged forward."""
    import torch

    from trtspec.runtime.cache.paged import BlockTable, KVPool, SeqKV
    from trtspec.runtime.cores import threads as omp
    from trtspec.runtime.engine import Engine
    from trtspec.runtime.forward import attention
    from trtspec.runtime.forward.batch import Feed, forward

    model = Engine.from_checkpoints(smollm2(), mode="none").target
    linears = [m for m in model.modules() if type(m).__name__ == "PackedLinear"]
    if args.onednn_linear:
        for layer in linears:
            layer.choose(("onednn",))
    print("linear kernels (layers, rows a call):",  # a checkout before the choice: oneDNN throughout
          dict(Counter((getattr(layer, "kernel", "onednn"), layer.min_rows) for layer in linears)), flush=True)
    if args.mkl_linear:
        for layer in linears:
            layer.forward = lambda x, layer=layer: torch.nn.functional.linear(x, layer.weight, layer.bias)
    if args.small_linear_threads:
        for layer in linears:
            if layer.out_features < 8192:  # not lm_head
                layer.forward = _on_threads(layer.forward, args.small_linear_threads, threads)
    if args.attention_one_thread:
        attention.Layout.attend = _on_threads(attention.Layout.attend, 1, threads)
    omp.release_idle_openmp_team()  # this thread loaded the model; the worker does the steps
    kvs: list = []

    def setup():
        if args.measured_linear_threads:
            print("linear threads chosen:", choose_linear_threads(linears, threads), flush=True)
        pool = KVPool.for_model(model.config, max(BATCHES) * 256)
        generator = torch.Generator().manual_seed(0)
        for i in range(max(BATCHES)):
            table = BlockTable(list(range(i * 16, i * 16 + 16)), 16)
            kv = SeqKV(pool, table)
            pool.zero_blocks(table)
            prompt = torch.randint(0, model.config.vocab_size, (PROMPT_TOKENS + i,), generator=generator).tolist()
            with torch.inference_mode():
                forward(model, [Feed(kv, prompt, num_logits=1)])
            kvs.append(kv)

    def step(batch: int) -> float:
        feeds = [Feed(kvs[i], [(1000 + i) % model.config.vocab_size], num_logits=1) for i in range(batch)]
        with torch.inference_mode():
            start = time.perf_counter()
            forward(model, feeds)
            seconds = time.perf_counter() - start
        for feed in feeds:
            feed.kv.length -= 1
        return seconds

    return step, setup


def choose_linear_threads(linears: list, threads: int) -> dict[str, int]:
    """Put each linear layer on its fastest thread count (sum of 1-row and 8-row call times,
    medians of 5 batches of calls); returns {in x out: count} for the distinct shapes."""
    import torch

    counts = [c for c in (1, 2, 4, 8, 16, 32, 64) if c < threads] + [threads]
    chosen: dict[tuple[int, int], int] = {}
    for layer in linears:
        shape = (layer.in_features, layer.out_features)
        if shape not in chosen:
            rows = torch.randn(8, layer.in_features)
            calls = 3 if layer.out_features >= 8192 else 30
            cost = {}
            for count in counts:
                torch.set_num_threads(count)
                _call_time(layer, rows, 3)  # warm-up at this count
                cost[count] = statistics.median(_call_time(layer, rows, calls) for _ in range(5))
            torch.set_num_threads(threads)
            chosen[shape] = min(cost, key=cost.get)
        if chosen[shape] != threads:
            layer.forward = _on_threads(layer.forward, chosen[shape], threads)
    return {f"{i}x{o}": c for (i, o), c in chosen.items()}


def _call_time(layer, rows, calls: int) -> float:
    """Seconds for `calls` pairs of a 1-row and an 8-row call of `layer`."""
    import torch

    with torch.inference_mode():
        start = time.perf_counter()
        for _ in range(calls):
            layer(rows[:1])
            layer(rows)
        return time.perf_counter() - start


def _on_threads(function, count: int, usual: int):
    import torch

    def wrapped(*a, **k):
        torch.set_num_threads(count)
        try:
            return function(*a, **k)
        finally:
            torch.set_num_threads(usual)
    return wrapped


def hf_steps(threads: int, args) -> tuple:
    """(step(batch) -> seconds, setup) for HF transformers' forward on a DynamicCache."""
    import torch
    from transformers import AutoModelForCausalLM, DynamicCache

    path = smollm2()
    model = AutoModelForCausalLM.from_pretrained(str(path), dtype=torch.float32).eval()
    caches: dict = {}

    def setup():
        generator = torch.Generator().manual_seed(0)
        for batch in BATCHES:
            cache = DynamicCache(config=model.config)
            with torch.inference_mode():
                model(input_ids=torch.randint(0, model.config.vocab_size, (batch, PROMPT_TOKENS), generator=generator),
                      past_key_values=cache, use_cache=True)
            caches[batch] = cache

    def step(batch: int) -> float:
        token = torch.full((batch, 1), 1000 % model.config.vocab_size)
        with torch.inference_mode():
            start = time.perf_counter()
            model(input_ids=token, past_key_values=caches[batch], use_cache=True)
            seconds = time.perf_counter() - start
        caches[batch].crop(PROMPT_TOKENS)
        return seconds

    return step, setup


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("contender", choices=("engine", "hf"))
    parser.add_argument("threads", type=int)
    parser.add_argument("--profile", action="store_true")
    parser.add_argument("--profile-batch", type=int, choices=BATCHES, default=1,
                        help="the batch whose forwards --profile tables (default 1)")
    parser.add_argument("--mkl-linear", action="store_true")
    parser.add_argument("--onednn-linear", action="store_true")
    parser.add_argument("--small-linear-threads", type=int, default=0)
    parser.add_argument("--attention-one-thread", action="store_true")
    parser.add_argument("--measured-linear-threads", action="store_true")
    args = parser.parse_args()

    import torch

    torch.set_num_threads(args.threads)
    step, setup = (engine_steps if args.contender == "engine" else hf_steps)(args.threads, args)
    medians: dict[int, float] = {}

    def work():  # the engine steps in a thread of its own, as its loop does; HF in the caller's
        torch.set_num_threads(args.threads)
        setup()
        for batch in BATCHES:
            for _ in range(3):
                step(batch)
            medians[batch] = statistics.median(step(batch) for _ in range(9)) * 1000
        if args.profile:
            from torch.profiler import profile
            with profile() as profiler:
                for _ in range(5):
                    step(args.profile_batch)
            print(profiler.key_averages().table(sort_by="self_cpu_time_total", row_limit=22))

    if args.contender == "engine":
        worker = threading.Thread(target=work)
        worker.start()
        worker.join()
    else:
        work()
    variant = " ".join(f"--{k.replace('_', '-')}" + ("" if v is True else f" {v}")
                       for k, v in vars(args).items() if k not in ("contender", "threads", "profile", "profile_batch") and v)
    print(f"RESULT {args.contender} threads={args.threads} {variant or '-'} "
          + " ".join(f"b{b}={medians[b]:.2f}ms" for b in BATCHES) + f" b8/b1={medians[8] / medians[1]:.2f}", flush=True)


if __name__ == "__main__":
    main()
