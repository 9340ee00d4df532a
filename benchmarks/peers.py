"""Benchmark the cpu engine on SmolLM2: speculative vs plain, against HF transformers, same run.

For every dev prompt (chat template applied once, the same token ids for every contender), in
interleaved order: the engine without speculation, the engine per drafter, HF greedy
`generate`, HF `generate(prompt_lookup_num_tokens=...)`, and with a draft model (--draft-layers,
--draft-model; peers_draft.py) HF `generate(assistant_model=...)`. Greedy, --max-tokens new tokens,
EOS ignored by none: each contender stops where the target stops. Reports tokens/s per
category, speedups, mean acceptance length, and the theoretical speedup (Leviathan et al. 2023)
from measured acceptance and measured draft/verify costs.

    /tmp/venv/bin/python -m benchmarks peers --threads 1 --repeats 3 --out reports/bench-engine.json
    /tmp/venv/bin/python -m benchmarks peers --eagle3 work/checkpoints/eagle3   # + EAGLE-3
    /tmp/venv/bin/python -m benchmarks peers --draft-layers 24 --draft-len 1   # + draft model, HF assisted
    /tmp/venv/bin/python -m benchmarks peers --draft-sweep 4,8,16,24 --threads 1  # pick the draft's depth
    /tmp/venv/bin/python -m benchmarks peers --render reports/bench-engine.json  # tables again
    /tmp/venv/bin/python -m benchmarks peers --replay reports/bench-engine.json  # n-gram settings, no model
    /tmp/venv/bin/python -m benchmarks peers --verify-cost --threads 1  # cost of a pass by width
    .venv/bin/python -m benchmarks peers --vllm --help   # beside vLLM's CPU engine instead (peers_vllm.py)
    .venv/bin/python -m benchmarks peers --vllm --api ... # the same through each server's OpenAI API (peers_api.py)

HF's contenders run on a model loaded as transformers loads it; the engine's on its own
(prepacked, see trtspec/runtime/forward/prepack.py) unless --no-prepack or --hf-on-engine-model.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time
from collections import defaultdict
from pathlib import Path

from benchmarks import peers_draft
from benchmarks.common import dev_rows, smollm2
from benchmarks.peers_offline import replay, verify_cost


def leviathan_speedup(alpha: float, gamma: float, cost_ratio: float) -> float:
    """Expected speedup (Leviathan et al. 2023, Thm 3.8): (1 - a^(g+1)) / ((1 - a)(g c + 1)).

    Here `cost_ratio` is measured directly as (draft + verify time per step) / (plain step time),
    which replaces the paper's (g c + 1) denominator, so verify width costs are included.
    """
    expected_tokens = gamma + 1 if alpha >= 1 else (1 - alpha ** (gamma + 1)) / (1 - alpha)
    return expected_tokens / cost_ratio


def main() -> int:
    if "--vllm" in sys.argv[1:]:
        from benchmarks import peers_vllm

        return peers_vllm.run()
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--max-tokens", type=int, default=128)
    parser.add_argument("--max-draft-len", type=int, default=8)
    parser.add_argument("--ngram-min", type=int, default=1)
    parser.add_argument("--ngram-max", type=int, default=3)
    parser.add_argument("--hf-lookup", type=int, default=10, help="HF prompt_lookup_num_tokens (HF's default 10)")
    parser.add_argument("--eagle3", type=Path, default=None, help="a trained EAGLE-3 checkpoint directory")
    parser.add_argument("--limit", type=int, default=0, help="only the first N prompts per category")
    parser.add_argument("--categories", default="summarize,chat,code,math",
                        help="categories to run, in this order (comma-separated)")
    parser.add_argument("--threads", type=int, default=0, help="torch threads (0: torch's default)")
    parser.add_argument("--repeats", type=int, default=1,
                        help="run every prompt N times (contender order rotated); tables give medians over repeats")
    parser.add_argument("--no-prepack", action="store_true",
                        help="engine on plain nn.Linear (F.linear) instead of oneDNN-prepacked weights")
    parser.add_argument("--hf-on-engine-model", action="store_true",
                        help="run HF generate on the engine's (prepacked) model instead of a vanilla HF model")
    parser.add_argument("--out", type=Path, default=None, help="write the raw results as JSON here")
    parser.add_argument("--render", type=Path, default=None, help="only print the Markdown tables of a results JSON")
    parser.add_argument("--replay", type=Path, default=None,
                        help="only replay the n-gram drafter on a results JSON's plain outputs (no model)")
    parser.add_argument("--cost-fixed", type=float, default=0.0,
                        help="replay: a drafting pass costs 1 + FIXED + SLOPE * k plain steps")
    parser.add_argument("--cost-slope", type=float, default=0.035, help="replay: see --cost-fixed")
    parser.add_argument("--verify-cost", action="store_true",
                        help="only time one target pass over 1 + k tokens (k = 0..10), F.linear vs prepacked")
    peers_draft.add_arguments(parser)
    args = parser.parse_args()
    if args.replay:
        print(replay(json.loads(args.replay.read_text()), cost_fixed=args.cost_fixed, cost_slope=args.cost_slope))
        return 0
    if args.render:
        data = json.loads(args.render.read_text())
        data["summary"] = summarize(data["results"], list(data["results"][0]["runs"]), args)
        print(to_markdown(data))
        return 0

    if args.draft_sweep:
        print(peers_draft.sweep(args))
        return 0
    if args.verify_cost:
        print(verify_cost(args.threads or 1))
        return 0
    import torch

    from trtspec.runtime import Engine
    from trtspec.runtime.checkpoints.parts import load_causal_lm

    if args.threads:
        torch.set_num_threads(args.threads)
    path = smollm2()
    prepack = not args.no_prepack
    engines = {"ngram": Engine.from_checkpoints(path, mode="ngram", max_draft_len=args.max_draft_len,
                                                ngram_min=args.ngram_min, ngram_max=args.ngram_max, prepack=prepack)}
    if args.eagle3:
        engines["eagle3"] = Engine.from_checkpoints(path, mode="eagle3", draft_dir=args.eagle3,
                                                    max_draft_len=args.max_draft_len, prepack=prepack)
    base = engines["ngram"]
    tokenizer = base.tokenizer
    # HF's contenders run what a transformers user gets: the checkpoint as from_pretrained loads it.
    model = base.target if args.hf_on_engine_model else load_causal_lm(path)
    rows = dev_rows()
    order = args.categories.split(",")
    rows = sorted((r for r in rows if r["category"] in order), key=lambda r: order.index(r["category"]))
    if args.limit:
        kept, seen = [], defaultdict(int)
        for row in rows:
            seen[row["category"]] += 1
            if seen[row["category"]] <= args.limit:
                kept.append(row)
        rows = kept

    def hf(ids, **extra):
        inputs = torch.tensor([ids])
        started = time.perf_counter()
        with torch.inference_mode():
            out = model.generate(inputs, attention_mask=torch.ones_like(inputs), max_new_tokens=args.max_tokens,
                                 do_sample=False, pad_token_id=tokenizer.pad_token_id, **extra)
        return time.perf_counter() - started, out[0, len(ids):].tolist(), None

    def engine_run(engine, ids, speculative):
        started = time.perf_counter()
        result = engine.generate(ids, max_new_tokens=args.max_tokens, speculative=speculative)
        return time.perf_counter() - started, result.token_ids, result.stats

    contenders = {"engine-plain": lambda ids: engine_run(base, ids, False)}
    for name, engine in engines.items():
        contenders[f"engine-{name}"] = (lambda e: lambda ids: engine_run(e, ids, True))(engine)
    contenders["hf-greedy"] = lambda ids: hf(ids)
    contenders["hf-prompt-lookup"] = lambda ids: hf(ids, prompt_lookup_num_tokens=args.hf_lookup)
    peers_draft.add_contenders(contenders, args, path, prepack=prepack, hf=hf, engine_run=engine_run)

    warm = base.encode(rows[0]["prompt"])
    for run in contenders.values():  # warm-up: first-call allocations, lazy imports
        run(warm[:16])
    results, names = [], list(contenders)
    for repeat in range(args.repeats):
        for index, row in enumerate(rows):
            ids = base.encode(row["prompt"])
            record = {"category": row["category"], "prompt_tokens": len(ids), "repeat": repeat,
                      "load_avg_1min": os.getloadavg()[0], "runs": {}}
            # Rotate who goes first, so no contender always runs right after the same neighbour.
            shift = (repeat + index) % len(names)
            for name in names[shift:] + names[:shift]:
                seconds, tokens, stats = contenders[name](ids)
                record["runs"][name] = {"seconds": seconds, "tokens": len(tokens), "token_ids": tokens,
                                        "stats": stats.to_dict() if stats else None}
            record["runs"] = {name: record["runs"][name] for name in names}
            plain = record["runs"]["engine-plain"]["token_ids"]
            record["identical"] = {name: r["token_ids"][: len(plain)] == plain[: len(r["token_ids"])]
                                   for name, r in record["runs"].items()}
            results.append(record)
            print(f"[{repeat + 1}/{args.repeats} {index + 1}/{len(rows)}] {row['category']:9s} " + "  ".join(
                f"{n}={r['tokens'] / r['seconds']:.1f}" for n, r in record["runs"].items())
                + f"  load={record['load_avg_1min']:.2f}", file=sys.stderr, flush=True)
            summary = summarize(results, names, args)
            if args.out:  # after every prompt, so an interrupted run still leaves its results
                args.out.parent.mkdir(parents=True, exist_ok=True)
                args.out.write_text(json.dumps({"args": {k: str(v) for k, v in vars(args).items()},
                                                "summary": summary, "results": results}, indent=1))
    print(json.dumps(summary, indent=2))
    if args.out:
        print(to_markdown(json.loads(args.out.read_text())))
    return 0


def to_markdown(data: dict) -> str:
    """Tables for docs/BENCHMARKS-engine.md from a results JSON."""
    summary, results = data["summary"], data["results"]
    names = list(next(iter(summary["tokens_per_s"].values())))
    counts = {c: sum(1 for r in results if c in ("all", r["category"])) for c in summary["tokens_per_s"]}
    extra = [label for label in DRAFT_RATIOS if label in _ratios(summary["tokens_per_s"]["all"])]
    lines = ["| category | prompt runs | " + " | ".join(f"{n} tok/s" for n in names)
             + " | engine ngram / engine plain | HF lookup / HF greedy | ngram speedup / HF's | engine plain / HF greedy |"
             + "".join(f" {label} |" for label in extra), "|---" * (len(names) + 6 + len(extra)) + "|"]
    for category, rate in summary["tokens_per_s"].items():
        ngram = summary["speedup_vs_engine_plain"][category].get("engine-ngram", float("nan"))
        hf = summary["hf_prompt_lookup_speedup"][category]
        ratio = _ratios(rate)
        lines.append(f"| {category} | {counts[category]} | " + " | ".join(f"{rate[n]:.2f}" for n in names)
                     + f" | {ngram:.2f}x | {hf:.2f}x | {ngram / hf:.2f} | "
                     f"{summary['hf_greedy_vs_engine_plain'][category]:.2f} |"
                     + "".join(f" {ratio[label]:.2f} |" for label in extra))
    lines += ["", "| category | drafter | mean acceptance length | acceptance rate | mean draft len | "
              "steps with a draft | draft cost per token / plain step (c) | (draft+verify)/plain step cost | "
              "theoretical (Leviathan, iid) | tokens per pass | theoretical (measured tokens/pass) | measured | "
              "measured / Leviathan | measured / tokens-per-pass bound |", "|---" * 14 + "|"]
    for category, per in summary["theoretical"].items():
        for name, t in per.items():
            lines.append(f"| {category} | {name} | {summary['mean_acceptance_length'][category][name]:.2f} | "
                         f"{t['alpha']:.2f} | {t['mean_draft_len']:.2f} | {t['draft_share']:.2f} | "
                         f"{t.get('draft_cost', float('nan')):.2f} | "
                         f"{t['cost_ratio']:.2f} | {t['theoretical_speedup']:.2f}x | {t['tokens_per_pass']:.2f} | "
                         f"{t['speedup_from_tokens_per_pass']:.2f}x | {t['measured_speedup']:.2f}x | "
                         f"{t['measured_over_theoretical']:.2f} | {t['measured_over_tokens_per_pass']:.2f} |")
    ident = summary["identical_to_engine_plain"]["all"]
    lines += ["", "Outputs identical to the engine's plain greedy output (prompt runs): "
              + ", ".join(f"{n} {ident[n]}/{ident['of']}" for n in names)]
    over = summary.get("over_repeats") or {}
    labels = [label for label in RATIOS if any(label in v for v in over.values())]
    if over and labels:
        runs = max(v["n"] for per in over.values() for v in per.values())
        lines += ["", f"Ratios per repeat (each from that repeat's pooled tokens/s): median [min, max] over {runs}",
                  "", "| category | " + " | ".join(labels) + " |", "|---" * (len(labels) + 1) + "|"]
        for category, per in over.items():
            lines.append(f"| {category} | " + " | ".join(
                f"{per[label]['median']:.2f} [{per[label]['min']:.2f}, {per[label]['max']:.2f}]"
                if label in per else "-" for label in labels) + " |")
    if summary.get("load_avg_1min"):
        load = summary["load_avg_1min"]
        lines += ["", f"1-minute load average before each prompt: median {load['median']:.2f} "
                  f"(min {load['min']:.2f}, max {load['max']:.2f}) on {os.cpu_count()} cores"]
    return "\n".join(lines)


RATIOS = {  # name -> (numerator, denominator) of two tokens/s, or of two such ratios
    "engine ngram / engine plain": ("engine-ngram", "engine-plain"),
    "HF lookup / HF greedy": ("hf-prompt-lookup", "hf-greedy"),
    "ngram speedup / HF's": ("engine ngram / engine plain", "HF lookup / HF greedy"),
    "engine plain / HF greedy": ("engine-plain", "hf-greedy"),
    "engine draft / engine plain": ("engine-draft", "engine-plain"),
    "HF assisted / HF greedy": ("hf-assisted", "hf-greedy"),
    "draft speedup / HF's": ("engine draft / engine plain", "HF assisted / HF greedy"),
    "engine draft / HF assisted": ("engine-draft", "hf-assisted"),
    "HF assisted (defaults) / HF greedy": ("hf-assisted-default", "hf-greedy"),
}
DRAFT_RATIOS = list(RATIOS)[4:]  # extra columns of the first table, where the run has those contenders


def summarize(results, names, args) -> dict:
    """Pooled tables over all results, plus each ratio's median (min, max) over the repeats."""
    out = _summarize_pooled(results, names)
    repeats = sorted({r.get("repeat", 0) for r in results})
    per_repeat = [_summarize_pooled([r for r in results if r.get("repeat", 0) == k], names)["tokens_per_s"]
                  for k in repeats]
    over: dict = {}
    for category in out["tokens_per_s"]:
        values: dict[str, list[float]] = {}
        for rates in per_repeat:
            if category not in rates:
                continue
            for label, value in _ratios(rates[category]).items():
                values.setdefault(label, []).append(value)
        over[category] = {label: {"median": statistics.median(v), "min": min(v), "max": max(v), "n": len(v)}
                          for label, v in values.items()}
    out["over_repeats"] = over
    loads = [r["load_avg_1min"] for r in results if "load_avg_1min" in r]
    if loads:
        out["load_avg_1min"] = {"median": statistics.median(loads), "min": min(loads), "max": max(loads)}
    return out


def _ratios(rate: dict) -> dict:
    """Every RATIOS entry computable from one category's tokens/s (contenders absent are skipped)."""
    ratio: dict = {}
    for label, (num, den) in RATIOS.items():
        top = ratio[num] if num in ratio else rate.get(num)
        bottom = ratio[den] if den in ratio else rate.get(den)
        if top is not None and bottom:
            ratio[label] = top / bottom
    return ratio


def _summarize_pooled(results, names) -> dict:
    categories = sorted({r["category"] for r in results}) + ["all"]
    out: dict = {"tokens_per_s": {}, "speedup_vs_engine_plain": {}, "hf_prompt_lookup_speedup": {},
                 "mean_acceptance_length": {}, "theoretical": {}, "identical_to_engine_plain": {}}
    for category in categories:
        chosen = [r for r in results if category in ("all", r["category"])]
        rate = {n: sum(r["runs"][n]["tokens"] for r in chosen) / sum(r["runs"][n]["seconds"] for r in chosen)
                for n in names}
        out["tokens_per_s"][category] = rate
        out["speedup_vs_engine_plain"][category] = {n: rate[n] / rate["engine-plain"] for n in names}
        out["hf_prompt_lookup_speedup"][category] = rate["hf-prompt-lookup"] / rate["hf-greedy"]
        for name in names:
            if not name.startswith("engine-") or name == "engine-plain":
                continue
            stats = [r["runs"][name]["stats"] for r in chosen]
            drafts = sum(s["num_drafts"] for s in stats)
            accepted = sum(s["num_accepted_tokens"] for s in stats)
            draft_tokens = sum(s["num_draft_tokens"] for s in stats)
            passes = sum(s["num_target_passes"] for s in stats)
            out["mean_acceptance_length"].setdefault(category, {})[name] = 1 + accepted / drafts if drafts else 1.0
            # Costs per target pass (decode steps, prefill excluded on both sides), same runs.
            plain_stats = [r["runs"]["engine-plain"]["stats"] for r in chosen]
            if all(plain_stats):
                plain_step = (sum(s["verify_time_s"] for s in plain_stats)
                              / max(1, sum(s["num_target_passes"] for s in plain_stats)))
            else:  # results from before plain stats were kept: whole request time per token
                plain_step = (sum(r["runs"]["engine-plain"]["seconds"] for r in chosen)
                              / sum(max(1, r["runs"]["engine-plain"]["tokens"]) for r in chosen))
            spec_step = sum(s["draft_time_s"] + s["verify_time_s"] for s in stats) / max(1, passes)
            # Leviathan's c: the draft's time per draft token relative to a plain target step.
            draft_cost = sum(s["draft_time_s"] for s in stats) / max(1, draft_tokens) / plain_step
            alpha = accepted / draft_tokens if draft_tokens else 0.0
            gamma = draft_tokens / drafts if drafts else 0.0
            # Steps without a draft (no n-gram match) commit one token at about plain cost.
            draft_share = drafts / max(1, passes)
            expected = draft_share * leviathan_speedup(alpha, gamma, 1.0) + (1 - draft_share)
            theoretical = expected * plain_step / spec_step
            measured = out["speedup_vs_engine_plain"][category][name]
            # Not iid: n-gram drafts are all-or-nothing copies. The tokens each pass really
            # committed, at the measured cost per pass, bound what the engine can reach.
            tokens_per_pass = sum(r["runs"][name]["tokens"] for r in chosen) / max(1, passes + len(chosen))
            from_passes = tokens_per_pass * plain_step / spec_step
            out["theoretical"].setdefault(category, {})[name] = {
                "alpha": alpha, "mean_draft_len": gamma, "draft_share": draft_share, "draft_cost": draft_cost,
                "cost_ratio": spec_step / plain_step, "theoretical_speedup": theoretical,
                "measured_speedup": measured, "measured_over_theoretical": measured / theoretical,
                "tokens_per_pass": tokens_per_pass, "speedup_from_tokens_per_pass": from_passes,
                "measured_over_tokens_per_pass": measured / from_passes}
        out["identical_to_engine_plain"][category] = {
            n: sum(r["identical"][n] for r in chosen) for n in names} | {"of": len(chosen)}
    out["hf_greedy_vs_engine_plain"] = {c: out["tokens_per_s"][c]["engine-plain"] / out["tokens_per_s"][c]["hf-greedy"]
                                        for c in categories}
    out["median_engine_plain_tokens_per_s"] = statistics.median(
        r["runs"]["engine-plain"]["tokens"] / r["runs"]["engine-plain"]["seconds"] for r in results)
    return out


if __name__ == "__main__":
    sys.exit(main())
