"""In-process draft-shape benchmark on SmolLM2 with an EAGLE-3 head: plain decoding, chains,
a static tree (eagle_choices), dynamic (EAGLE-2) trees and the load policy's own choice, at each
concurrency, greedy.

Variants (one engine each over the same weights; every group of prompts runs under each variant in
turn, so machine noise hits them alike):
  plain               no speculation
  chain:K             a chain of K drafts at every batch size (draft_len_schedule [[1, K]])
  choices             the static tree CHOICES (eagle_choices) at every batch size
  tree:TOPK,DEPTH,N   that dynamic tree at every batch size (a schedule row [1, TOPK, DEPTH, N])
  auto:TOPK,DEPTH,N   speculative.tree with no schedule: the cost model picks off, a chain or the
                      tree (at N, N/2, ... nodes) per step
  auto:K              max_draft_len K with no schedule: the cost model picks 0..K per step
At concurrency c the prompts run c at a time (a barrier starts each group together). Reported per
concurrency and variant, medians over repeats: output tokens/s, its ratio to plain (the median of
the per-repeat ratios), mean acceptance length (1 + accepted / drafts), tokens per target pass,
nodes verified per draft, drafting and target-forward milliseconds per target pass, the share of
full-batch steps that drafted, and the steps per draft the
load policy chose (SchedulerStats.draft_shapes: off, chain:K, tree:T,D,N, probe:...). Every speculative variant's
tokens are checked equal to plain's.

`--hit-rates D` instead measures the head alone: along the target's own greedy continuation, the
rank of the target's token among the head's logits at draft depths 1..D (top-1 / top-4 / top-8 hit
rates: how much a tree can add over a chain).

    .venv/bin/python -m benchmarks trees --head work/checkpoints/eagle3 --concurrency 1 \\
        --num-prompts 8 --max-tokens 48 --repeats 3 plain chain:4 choices tree:4,4,16
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import threading
import time
from concurrent.futures import ThreadPoolExecutor

from benchmarks.common import median_ratio, smollm2
from trtspec.prompts import packaged_prompt_file

CHOICES = ((0,), (1,), (2,), (3,), (0, 0), (0, 1), (1, 0), (0, 0, 0), (0, 0, 1), (0, 0, 0, 0))


def pick_prompts(path, count: int) -> list[str]:
    """The first prompts of every category in turn, `count` in all."""
    by_category: dict[str, list[str]] = {}
    for line in open(path):
        if line.strip():
            row = json.loads(line)
            by_category.setdefault(row["category"], []).append(row["prompt"])
    per = -(-count // len(by_category))
    return [p for prompts in by_category.values() for p in prompts[:per]][:count]


def make_engine(base, variant: str):
    if variant == "plain":
        return base
    if variant.startswith("chain:"):
        k = int(variant[6:])
        return base.variant(max_draft_len=k, draft_len_schedule=((1, k),))
    if variant == "choices":
        depth = max(len(p) for p in CHOICES)
        return base.variant(eagle_choices=CHOICES, max_draft_len=depth, draft_len_schedule=((1, depth),))
    kind, _, shape = variant.partition(":")
    if kind == "auto" and "," not in shape:
        return base.variant(max_draft_len=int(shape))
    shape, _, floor = shape.partition("@")  # tree:T,D,N@P: verify only nodes of path probability >= P
    topk, depth, nodes = (int(x) for x in shape.split(","))
    floor_option = {"tree_min_path_prob": float(floor or 0)}
    if kind == "tree":
        return base.variant(max_draft_len=depth, draft_len_schedule=((1, topk, depth, nodes),), **floor_option)
    if kind == "auto":
        return base.variant(tree=(topk, depth, nodes), max_draft_len=depth, **floor_option)
    raise SystemExit(f"unknown variant {variant!r}: plain, chain:K, choices, tree:T,D,N[@P], auto:K or "
                     "auto:T,D,N[@P]")


def run_group(engine, ids: list[list[int]], speculative: bool, concurrency: int, max_tokens: int) -> list:
    """These prompts at once (a barrier starts them together)."""
    if concurrency == 1:
        return [engine.generate(p, max_new_tokens=max_tokens, speculative=speculative) for p in ids]
    barrier = threading.Barrier(len(ids))

    def one(p):
        barrier.wait()
        return engine.generate(p, max_new_tokens=max_tokens, speculative=speculative)

    with ThreadPoolExecutor(len(ids)) as pool:
        return list(pool.map(one, ids))


def measure(engines: dict, ids: list[list[int]], args) -> dict:
    """Per repeat and concurrency, every group of `concurrency` prompts runs under each variant in
    turn (fine interleaving); a variant's figures sum its groups."""
    results: dict = {(c, v): [] for c in args.concurrency for v in engines}
    steps_by_shape: dict = {}  # (concurrency, variant) -> steps per draft the load policy chose, all repeats
    plain: dict[int, list[int]] = {}
    for variant, engine in engines.items():  # warm-up
        engine.generate(ids[0], max_new_tokens=4, speculative=variant != "plain")
    for repeat in range(args.repeats):
        for c in args.concurrency:
            sums = {v: {"seconds": 0.0, "tokens": 0, "num_drafts": 0, "num_accepted_tokens": 0,
                        "num_verified_tokens": 0, "num_target_passes": 0, "full": 0, "drafting": 0,
                        "draft_time_s": 0.0, "verify_time_s": 0.0} for v in engines}
            shapes: dict[str, dict[str, int]] = {v: {} for v in engines}  # steps by the draft chosen
            for start in range(0, len(ids), c):
                for variant, engine in engines.items():
                    total, steps = sums[variant], []
                    engine.scheduler.on_step = lambda stats, steps=steps: steps.append(
                        (stats.last_num_decoding, stats.last_draft_len))
                    before = engine.scheduler.snapshot().draft_shapes
                    started = time.perf_counter()
                    out = run_group(engine, ids[start:start + c], variant != "plain", c, args.max_tokens)
                    total["seconds"] += time.perf_counter() - started
                    engine.scheduler.on_step = None
                    for key, count in engine.scheduler.snapshot().draft_shapes.items():
                        shapes[variant][key] = shapes[variant].get(key, 0) + count - before.get(key, 0)
                    for i, r in enumerate(out, start):
                        if variant == "plain":
                            plain[i] = r.token_ids
                        elif i in plain and r.token_ids != plain[i]:
                            raise SystemExit(f"{variant} at concurrency {c} differs from plain on prompt {i}")
                        total["tokens"] += len(r.token_ids)
                        for key in ("num_drafts", "num_accepted_tokens", "num_verified_tokens", "num_target_passes",
                                    "draft_time_s", "verify_time_s"):
                            total[key] += getattr(r.stats, key)
                    full = [k for n, k in steps if n == c]
                    total["full"] += len(full)
                    total["drafting"] += sum(k > 0 for k in full)
            for variant, t in sums.items():
                drafts = t["num_drafts"]
                results[(c, variant)].append({
                    "tok_s": t["tokens"] / t["seconds"],
                    "acceptance_length": 1 + t["num_accepted_tokens"] / drafts if drafts else 1.0,
                    "tokens_per_pass": t["tokens"] / max(1, t["num_target_passes"]),
                    "nodes_per_draft": t["num_verified_tokens"] / drafts if drafts else 0.0,
                    "drafting_full_steps": t["drafting"] / t["full"] if t["full"] else 0.0,
                    # a request's share of its steps' drafting and target forward, per target pass
                    "draft_ms_per_pass": 1e3 * t["draft_time_s"] / max(1, t["num_target_passes"]),
                    "verify_ms_per_pass": 1e3 * t["verify_time_s"] / max(1, t["num_target_passes"])})
                print(repeat, c, variant, json.dumps({k: round(x, 3) for k, x in results[(c, variant)][-1].items()}),
                      json.dumps(dict(sorted(shapes[variant].items()))), flush=True)
                steps_by_shape.setdefault((c, variant), {})
                for key, count in shapes[variant].items():
                    steps_by_shape[(c, variant)][key] = steps_by_shape[(c, variant)].get(key, 0) + count
    summary = {}
    for c in args.concurrency:
        base = [r["tok_s"] for r in results[(c, "plain")]] if "plain" in engines else None
        for variant in engines:
            runs = results[(c, variant)]
            row = {k: round(statistics.median(r[k] for r in runs), 3) for k in runs[0]}
            if base:  # the median of the per-repeat ratios (both taken in the same repeat)
                row["vs_plain"] = round(median_ratio([r["tok_s"] for r in runs], base), 3)
            row["steps_by_shape"] = dict(sorted(steps_by_shape.get((c, variant), {}).items()))
            summary[f"concurrency {c} {variant}"] = row
    return summary


def hit_rates(base, ids: list[list[int]], depth: int, max_tokens: int) -> dict:
    """Rank of the target's greedy token among the head's logits at each draft depth, the head
    forced along the target's own continuation (each depth sees a correct prefix)."""
    import torch

    engine = base.variant(max_draft_len=depth)
    drafter = engine.drafter
    vocab = drafter.head.lm_head.out_features
    to_target = torch.arange(vocab) + (drafter.head.d2t if drafter.head.d2t is not None else 0)
    ranks: list[list[int]] = [[] for _ in range(depth)]
    truth: list[int] = []
    original = drafter.propose_batch

    def propose(sessions, tokens, max_lens):
        for session, seq in zip(sessions, tokens, strict=True):
            at, start = [len(seq)], len(seq)

            def choose(logits, at=at, start=start):
                if at[0] >= len(truth):
                    return int(to_target[int(logits.argmax())]), None, True
                want, hit = truth[at[0]], (to_target == truth[at[0]]).nonzero()
                if at[0] - start < depth:
                    ranks[at[0] - start].append(int((logits > logits[int(hit[0, 0])]).sum()) if hit.numel()
                                                else 10**9)
                at[0] += 1
                return want, None, True

            session.choose = choose
        return original(sessions, tokens, max_lens)

    drafter.propose_batch = propose
    try:
        for p in ids:
            out = engine.generate(p, max_new_tokens=max_tokens, speculative=False).token_ids
            truth[:] = p + out
            assert engine.generate(p, max_new_tokens=max_tokens).token_ids == out
    finally:
        del drafter.propose_batch
        engine.close()
    return {f"depth {d + 1}": {f"top{k}": round(sum(r < k for r in ranks[d]) / len(ranks[d]), 3) for k in (1, 4, 8)}
            | {"positions": len(ranks[d])} for d in range(depth) if ranks[d]}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("variants", nargs="*", default=["plain", "chain:4", "choices", "tree:4,4,16"])
    parser.add_argument("--head", required=True, help="the exported EAGLE-3 head's directory")
    parser.add_argument("--concurrency", default="1", type=lambda s: [int(c) for c in s.split(",")])
    parser.add_argument("--num-prompts", type=int, default=8)
    parser.add_argument("--max-tokens", type=int, default=48)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--prompts", default=str(packaged_prompt_file("bench")))
    parser.add_argument("--hit-rates", type=int, default=0, metavar="DEPTH")
    parser.add_argument("--out")
    args = parser.parse_args()

    import torch

    from trtspec.runtime import Engine

    base = Engine.from_checkpoints(smollm2(), mode="eagle3", draft_dir=args.head)
    ids = [base.encode(p) for p in pick_prompts(args.prompts, args.num_prompts)]
    if args.hit_rates:
        result = {"hit_rates": hit_rates(base, ids, args.hit_rates, args.max_tokens)}
    else:
        result = {"summary": measure({v: make_engine(base, v) for v in args.variants}, ids, args)}
    result |= {"load_average": os.getloadavg(), "threads": torch.get_num_threads(), "cores": os.cpu_count(),
               "prompts": len(ids), "max_tokens": args.max_tokens, "repeats": args.repeats}
    print(json.dumps(result, indent=1))
    if args.out:
        with open(args.out, "w") as f:
            json.dump(result, f, indent=1)


if __name__ == "__main__":
    main()
