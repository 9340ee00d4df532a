"""What an EAGLE-3 draft step costs beside the target's verify and plain steps, on the head's two forward routes.

Plain greedy decoding, then EAGLE-3 chains of --draft-len (drafting forced on at every batch size)
with the head on transformers' modules (`modules`: Eagle3Drafter.forward_modules), on the
direct route (`direct`: trtspec.runtime.drafters.eagle3_forward) and, where the bfloat16 row kernel
runs, with its linear layers on it (`bf16`: head_dtype bfloat16, direct route), in process on SmolLM2 with the
held-back dev prompts, at each concurrency; the cells of a repeat run in turn, in alternating
order, on one engine. Per cell: tokens/s, ms per step of the draft (propose_batch) and of the
target's forward, ms per head forward, and the break-even acceptance length L* = (draft + verify)
/ plain step: the acceptance length at which a chain pays for itself at that concurrency.

A head's acceptance does not change what a draft step costs, so `--head random` (the default)
writes a seeded random head of the shape `trtspec convert` gives SmolLM2 (one layer, hidden 576,
draft vocabulary 4,096 with d2t, aux layers [1, 14, 26]) into a temporary directory; pass a
trained head's directory for real acceptance.

    .venv/bin/python -m benchmarks eagle3-draft --concurrency 1,8 --repeats 3
    .venv/bin/python -m benchmarks eagle3-draft --micro 400 --concurrency 1,8

--micro N times head forwards alone instead, N per route and shape in alternating order (a chain
step: one row per session; a catch-up: fc and 3 rows per session, after 200 cached positions):
modules, direct, and build (the direct route with its attention layout from Layout.build, as before
trtspec.runtime.drafters.head_layout), and prints where the build and direct routes' time goes
(torch.profiler, self CPU time by operation); where the bfloat16 row kernel runs, the head on it
(head_dtype bfloat16, direct route) is one more route.
"""

from __future__ import annotations

import argparse
import json
import statistics
import tempfile
import time
from pathlib import Path

from benchmarks.batching import closed_loop, trtspec_contender
from benchmarks.common import chat_ids, dev_rows, load_average, smollm2

VARIANTS = ("plain", "modules", "direct")


def random_head(out: Path, target_config: dict, *, seed: int = 0, draft_vocab: int = 4096) -> Path:
    """A seeded random EAGLE-3 head for `target_config` (ModelOpt's export layout: config.json and
    model.safetensors with fc, layers.0.*, norm, lm_head, d2t)."""
    import torch
    from safetensors.torch import save_file

    from trtspec.convert.eagle3.train import aux_layer_ids

    generator = torch.Generator().manual_seed(seed)
    hidden, inter = target_config["hidden_size"], target_config["intermediate_size"]
    heads, kv_heads = target_config["num_attention_heads"], target_config["num_key_value_heads"]
    head_dim, vocab = target_config.get("head_dim") or hidden // heads, target_config["vocab_size"]

    def weight(*shape: int):
        return torch.randn(*shape, generator=generator) * 0.02

    ones = torch.ones(hidden)
    state = {"fc.weight": weight(hidden, 3 * hidden), "layers.0.hidden_norm.weight": ones.clone(),
             "layers.0.input_layernorm.weight": ones.clone(), "layers.0.post_attention_layernorm.weight": ones.clone(),
             "layers.0.self_attn.q_proj.weight": weight(heads * head_dim, 2 * hidden),
             "layers.0.self_attn.k_proj.weight": weight(kv_heads * head_dim, 2 * hidden),
             "layers.0.self_attn.v_proj.weight": weight(kv_heads * head_dim, 2 * hidden),
             "layers.0.self_attn.o_proj.weight": weight(hidden, heads * head_dim),
             "layers.0.mlp.gate_proj.weight": weight(inter, hidden), "layers.0.mlp.up_proj.weight": weight(inter, hidden),
             "layers.0.mlp.down_proj.weight": weight(hidden, inter), "norm.weight": ones.clone(),
             "lm_head.weight": weight(draft_vocab, hidden),
             "d2t": torch.randperm(vocab, generator=generator)[:draft_vocab].sort().values - torch.arange(draft_vocab)}
    out.mkdir(parents=True, exist_ok=True)
    save_file(state, str(out / "model.safetensors"))
    theta = (target_config.get("rope_parameters") or {}).get("rope_theta", target_config.get("rope_theta", 10000.0))
    config = {key: target_config[key] for key in ("hidden_size", "intermediate_size", "num_attention_heads",
                                                  "num_key_value_heads", "vocab_size", "rms_norm_eps")}
    config.update({"architectures": ["LlamaForCausalLMEagle3"], "model_type": "llama", "hidden_act": "silu",
                   "head_dim": head_dim, "num_hidden_layers": 1, "draft_vocab_size": draft_vocab,
                   "max_position_embeddings": target_config.get("max_position_embeddings", 8192),
                   "tie_word_embeddings": False, "attention_bias": False, "mlp_bias": False,
                   "rope_scaling": {"rope_type": "default", "rope_theta": theta}, "rope_theta": theta,
                   "eagle_config": {"use_aux_hidden_state": True,
                                    "eagle_aux_hidden_state_layer_ids": aux_layer_ids(
                                        target_config["num_hidden_layers"])}})
    (out / "config.json").write_text(json.dumps(config, indent=1))
    return out


class Timers:
    """CPU seconds of the engine's loop thread (time.thread_time: its own work, whatever else runs on
    the cores; the loop runs on one torch thread here) in the drafter's proposals, its head forwards
    and the target's forwards."""

    def __init__(self, drafters: list) -> None:
        from trtspec.runtime.loop import step

        self.draft = self.head = self.verify = 0.0
        self.head_calls = self.steps = 0
        for drafter in drafters:
            self._wrap(drafter)
        target_forward = step.forward

        def timed_target(*args):
            started = time.thread_time()
            try:
                return target_forward(*args)
            finally:
                self.verify += time.thread_time() - started
                self.steps += 1

        step.forward = timed_target

    def _wrap(self, drafter) -> None:
        forward, propose = drafter.forward, drafter.propose_batch

        def timed_propose(*args):
            started = time.thread_time()
            try:
                return propose(*args)
            finally:
                self.draft += time.thread_time() - started

        def timed_head(feeds):
            started = time.thread_time()
            try:
                return forward(feeds)
            finally:
                self.head += time.thread_time() - started
                self.head_calls += 1

        drafter.propose_batch, drafter.forward = timed_propose, timed_head

    def reset(self) -> None:
        self.draft = self.head = self.verify = 0.0
        self.head_calls = self.steps = 0


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--head", default="random", help="an EAGLE-3 head directory, or random (the default)")
    parser.add_argument("--concurrency", default="1,8")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--requests-per-slot", type=int, default=2)
    parser.add_argument("--max-tokens", type=int, default=48)
    parser.add_argument("--draft-len", type=int, default=4)
    parser.add_argument("--json", action="store_true", help="print the cells as JSON too")
    parser.add_argument("--threads", type=int, default=1,
                        help="torch threads (1: CPU time is the engine's own work on a loaded machine)")
    parser.add_argument("--micro", type=int, default=0, help="time N head forwards alone per route and shape")
    args = parser.parse_args()

    import torch

    from trtspec.runtime import Engine
    from trtspec.runtime.cores.threads import release_idle_openmp_team

    concurrencies = [int(c) for c in args.concurrency.split(",")]
    torch.set_num_threads(args.threads)
    with tempfile.TemporaryDirectory() as scratch:
        head = Path(args.head) if args.head != "random" else random_head(
            Path(scratch) / "head", json.loads((smollm2() / "config.json").read_text()))
        engine = Engine.from_checkpoints(smollm2(), mode="eagle3", draft_dir=head, max_draft_len=args.draft_len,
                                         max_batch_size=max(8, *concurrencies),
                                         draft_len_schedule=((1, args.draft_len),), kv_cache_reuse_mib=0,
                                         adapt_threads=False)
        bf16 = bfloat16_head(head, engine.target)
    if args.micro:
        micro(engine, concurrencies, args.micro, bf16)
        engine.close()
        return
    prompts = [chat_ids(engine.tokenizer, row["prompt"]) for row in dev_rows(held_back=True)]
    drafter = engine.drafter
    variants = VARIANTS + (("bf16",) if bf16 is not None else ())
    timers = Timers([drafter] + ([bf16] if bf16 is not None else []))
    release_idle_openmp_team()
    contenders = {"plain": trtspec_contender(engine, args.max_tokens, speculative=False),
                  "spec": trtspec_contender(engine, args.max_tokens, speculative=True)}
    for variant in variants[1:]:  # warm-up, every head route
        use(engine, drafter, bf16, variant)
        closed_loop(contenders["spec"], prompts[:2], 2)
    cells: dict[tuple[str, int], list[dict]] = {}
    for repeat in range(args.repeats):
        for variant in variants if repeat % 2 == 0 else variants[::-1]:
            if variant != "plain":
                use(engine, drafter, bf16, variant)
            for concurrency in concurrencies:
                work = [prompts[i % len(prompts)] for i in range(concurrency * args.requests_per_slot)]
                before = engine.cumulative_stats()
                timers.reset()
                cpu = time.process_time()
                wall, records = closed_loop(contenders["plain" if variant == "plain" else "spec"], work, concurrency)
                after = engine.cumulative_stats()
                drafts = after.num_drafts - before.num_drafts
                cpu = time.process_time() - cpu
                steps, tokens = max(1, timers.steps), sum(r["tokens"] for r in records)
                cells.setdefault((variant, concurrency), []).append({
                    "tokens_per_s": tokens / wall, "cpu_ms_per_token": 1e3 * cpu / tokens, "steps": timers.steps,
                    "draft_ms": 1e3 * timers.draft / steps, "verify_ms": 1e3 * timers.verify / steps,
                    "head_ms": 1e3 * timers.head / max(1, timers.head_calls),
                    "head_calls_per_step": timers.head_calls / steps,
                    "acceptance_length": 1 + (after.num_accepted_tokens - before.num_accepted_tokens) / drafts
                    if drafts else None, "load": load_average(),
                    "token_ids": [r["token_ids"] for r in sorted(records, key=lambda r: r["prompt"])]})
    engine.drafter = drafter
    engine.close()
    _report(cells, concurrencies, args, variants)
    if args.json:
        print(json.dumps({f"{k[0]} c{k[1]}": [{n: v for n, v in run.items() if n != "token_ids"} for run in runs]
                          for k, runs in cells.items()}))


def use(engine, drafter, bf16, variant: str) -> None:
    """The head route of `variant` for the next requests (none is in flight): the float32 head on
    the module or the direct route, or the bfloat16 head (direct), swapped in as the engine's drafter."""
    engine.drafter = bf16 if variant == "bf16" else drafter
    engine.drafter._direct = variant != "modules"


def bfloat16_head(head_dir: Path, target):
    """The head again, its linear layers on the bfloat16 row kernel (head_dtype bfloat16), or None
    where that kernel cannot run here."""
    from trtspec.runtime.drafters.eagle3 import Eagle3Drafter
    from trtspec.runtime.forward.linear_choice import ROWDOT_BF16
    from trtspec.runtime.forward.prepack import prepack_linears
    from trtspec.runtime.kernels import rowdot

    if rowdot.bfloat16_unavailable() is not None:
        return None
    drafter = Eagle3Drafter.from_dir(head_dir, target)
    prepack_linears(drafter.head, (ROWDOT_BF16,))
    return drafter


def micro(engine, concurrencies: list[int], repeats: int, bf16=None, context: int = 200) -> None:
    """Head forwards alone (module docstring, --micro): ms per forward by route, shape and sessions;
    `bf16`: the same head on the bfloat16 row kernel (route bf16: direct), or None."""
    import torch

    from trtspec.runtime.cache.paged import BlockTable, KVPool, SeqKV
    from trtspec.runtime.cores.threads import release_idle_openmp_team
    from trtspec.runtime.drafters.head_feed import HeadFeed
    from trtspec.runtime.forward.attention import window_end

    drafter, generator = engine.drafter, torch.Generator().manual_seed(0)
    block = engine.config.tokens_per_block
    per_seq = -(-window_end(context + 8) // block)  # the kernel route reads whole key windows
    pool = KVPool.for_model(drafter.kv_config, 2 * max(concurrencies) * per_seq * block)  # slack: strided lanes
    for tensor in (*pool.keys, *pool.values):
        tensor.copy_(torch.randn(tensor.shape, generator=generator))
    hidden_size = drafter.kv_config.hidden_size
    aux_size = drafter.head.fc.in_features
    timings: dict[tuple[str, str, int], list[float]] = {}
    release_idle_openmp_team()
    print(f"torch threads {torch.get_num_threads()}, load {load_average():.1f}, {context} cached positions")

    def shapes(sessions: int):
        kvs = [SeqKV(pool, BlockTable(list(range(s * per_seq, (s + 1) * per_seq)), block), context)
               for s in range(sessions)]
        chain = [HeadFeed(kv, [100 + i], torch.randn(1, hidden_size, generator=generator)) for i, kv in enumerate(kvs)]
        aux = torch.randn(3 * sessions, aux_size, generator=generator)
        return kvs, chain, aux

    routes = ["modules", "build", "direct"] + (["bf16"] if bf16 is not None else [])

    def run(route: str, shape: str, sessions: int, kvs, chain, aux) -> float:
        which = bf16 if route == "bf16" else drafter
        which._direct = route != "modules"
        which.lean_layout = route != "build"  # build: the direct route on Layout.build (before head_layout)
        started = time.thread_time()
        if shape == "chain":
            which.forward(chain)
        else:  # a catch-up: fc over the aux rows, then 3 rows per session
            projected = which.head.fc(aux).split(3)
            which.forward([HeadFeed(kv, [7, 8, 9], h) for kv, h in zip(kvs, projected, strict=True)])
        seconds = time.thread_time() - started
        for kv in kvs:
            kv.length = context
        return seconds

    with torch.inference_mode():
        for sessions in concurrencies:
            parts = shapes(sessions)
            for shape in ("chain", "catch-up"):
                for _ in range(5):
                    for route in routes:
                        run(route, shape, sessions, *parts)
                for repeat in range(repeats):
                    for route in routes if repeat % 2 == 0 else routes[::-1]:
                        timings.setdefault((route, shape, sessions), []).append(run(route, shape, sessions, *parts))
        print("CPU ms of this thread (one torch thread) per head forward")
        print("| sessions | shape | modules ms/forward (median) | build ms/forward | direct ms/forward "
              "| direct / modules (median of paired ratios) | direct / build | bf16 (direct) ms/forward | bf16 / direct |")
        print("|---:|---|---:|---:|---:|---:|---:|---:|---:|")

        def paired(a, b) -> float:
            return statistics.median(x / y for x, y in zip(a, b, strict=True))

        for sessions in concurrencies:
            for shape in ("chain", "catch-up"):
                modules, direct = timings[("modules", shape, sessions)], timings[("direct", shape, sessions)]
                build = timings[("build", shape, sessions)]
                low = timings.get(("bf16", shape, sessions))
                extra = (f"{1e3 * statistics.median(low):.3f} | {paired(low, direct):.3f}" if low else "- | -")
                print(f"| {sessions} | {shape} | {1e3 * statistics.median(modules):.3f} "
                      f"| {1e3 * statistics.median(build):.3f} "
                      f"| {1e3 * statistics.median(direct):.3f} | {paired(direct, modules):.3f} "
                      f"| {paired(direct, build):.3f} | {extra} |")
        print(f"load after: {load_average():.1f}")
        from torch.profiler import ProfilerActivity, profile

        for route in ("build", "direct"):
            parts = shapes(1)
            with profile(activities=[ProfilerActivity.CPU]) as prof:
                for _ in range(50):
                    run(route, "chain", 1, *parts)
            print(f"## {route}, chain step, 1 session, 50 forwards: self CPU time by operation")
            print(prof.key_averages().table(sort_by="self_cpu_time_total", row_limit=14))


def _report(cells, concurrencies, args, variants) -> None:
    def med(runs, key):
        return statistics.median(r[key] for r in runs)

    print(f"head {args.head}, chains of {args.draft_len}, {args.repeats} repeats, "
          f"{args.requests_per_slot} requests per slot, {args.max_tokens} tokens")
    print("CPU ms: the engine loop thread's CPU time (one torch thread); tokens/s: wall clock")
    print("| route | conc | tokens/s (median; repeats) | process CPU ms/token | draft CPU ms/step | head CPU ms/forward "
          "| forwards/step | verify CPU ms/step | L* = (draft + verify) / plain | acceptance length | load |")
    print("|---|---:|---|---:|---:|---:|---:|---:|---:|---:|---:|")
    for concurrency in concurrencies:
        plain = med(cells[("plain", concurrency)], "verify_ms")
        for variant in variants:
            runs = cells[(variant, concurrency)]
            speeds = ", ".join(f"{r['tokens_per_s']:.1f}" for r in runs)
            lengths = [r["acceptance_length"] for r in runs if r["acceptance_length"] is not None]
            spec = variant != "plain"
            print(f"| {variant} | {concurrency} | {med(runs, 'tokens_per_s'):.1f} ({speeds}) "
                  f"| {med(runs, 'cpu_ms_per_token'):.2f} | {med(runs, 'draft_ms'):.2f} | {med(runs, 'head_ms') if spec else 0:.2f} "
                  f"| {med(runs, 'head_calls_per_step'):.2f} | {med(runs, 'verify_ms'):.2f} "
                  f"| {(med(runs, 'draft_ms') + med(runs, 'verify_ms')) / plain if spec else 1:.3f} "
                  f"| {f'{statistics.median(lengths):.3f}' if lengths and spec else '-'} "
                  f"| {min(r['load'] for r in runs):.1f}-{max(r['load'] for r in runs):.1f} |")
        direct, modules = cells[("direct", concurrency)], cells[("modules", concurrency)]
        ratios = [d["draft_ms"] / m["draft_ms"] for d, m in zip(direct, modules, strict=True) if m["draft_ms"]]
        plain_ids = cells[("plain", concurrency)][0]["token_ids"]
        same = all(run["token_ids"] == plain_ids for variant in variants for run in cells[(variant, concurrency)])
        print(f"conc {concurrency}: direct / modules draft CPU ms per step, per repeat: "
              f"{', '.join(f'{r:.3f}' for r in ratios)} (median {statistics.median(ratios):.3f}); "
              f"every route's tokens the plain ones: {same}")
        if ("bf16", concurrency) in cells:
            low = cells[("bf16", concurrency)]
            ratios = [b["draft_ms"] / d["draft_ms"] for b, d in zip(low, direct, strict=True) if d["draft_ms"]]
            print(f"conc {concurrency}: bf16 / direct draft CPU ms per step, per repeat: "
                  f"{', '.join(f'{r:.3f}' for r in ratios)} (median {statistics.median(ratios):.3f})")


if __name__ == "__main__":
    main()
