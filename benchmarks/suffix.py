"""Suffix decoding against prompt lookup: acceptance replayed exactly, and tokens/s interleaved.

    OMP_NUM_THREADS=1 python -m benchmarks suffix --max-tokens 64 --repeats 3 \\
        --variants ngram@8 suffix@8 suffix --before HEAD~1

Prompts: the packaged `traffic` set's `edit` prompts (copy-heavy: each carries the text or code it
edits) and the 30 dev prompts, on SmolLM2 (`trtspec models fetch smollm2`), greedy, concurrency 1.
A variant is MODE@K: `ngram` (prompt lookup, ngram_min 2, ngram_max 3, the spec's defaults) or
`suffix` (request trie only, max_cached_requests 0: a global trie would hold the same prompt's answer
from the previous repeat), drafting at most K tokens at every step (plain `suffix`: its own cap,
speculative.suffix.max_draft_len's default, 24); `suffix-before@K` is the
suffix drafter of git revision --before, for a before/after comparison inside one run; suffix
settings follow a comma (`suffix@16,factor=2,depth=64`).

Speed (under load: read the ratios): per repeat every prompt runs once per variant and once plainly,
the order rotated from prompt to prompt so that load swings hit all alike; per variant and category,
output tokens over summed request time, its ratio to plain decoding within the repeat, and the
median over repeats; the load average before and after every repeat. Every variant's tokens must
equal plain decoding's.

Acceptance (independent of load): greedy speculative output is plain decoding's, so a drafter's
steps at concurrency 1 replay exactly from the plain answers: after the prompt's pass (its token,
no draft), at each step it proposes from the committed tokens, the longest prefix equal to what
plain decoding wrote next is accepted, and the target adds one token. Per variant: decode tokens per
target step (plain decoding: 1), draft tokens verified per step, the acceptance length, and tokens
per cost, where a step verifying k draft tokens costs 1 + r k plain steps (r = the price of a
verify row, 0.05 / 0.1 / 0.2). The replay's drafts are the engine's own, call for call; the engine's
acceptance length can read higher, as it counts tokens accepted past max_tokens and then dropped.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from benchmarks.common import ROOT, load_average, smollm2

ROW_COSTS = (0.05, 0.1, 0.2)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--variants", nargs="+", default=["ngram@4", "ngram@8", "suffix"])
    parser.add_argument("--before", default=None, help="git revision whose suffix.py suffix-before@K runs")
    parser.add_argument("--max-tokens", type=int, default=64)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--limit", type=int, default=None, help="at most this many prompts of each set")
    parser.add_argument("--categories", default=None, help="only these prompt categories, comma-separated (edit,summarize)")
    parser.add_argument("--out", type=Path, default=None, help="write every figure as JSON here")
    args = parser.parse_args()
    prompts = prompt_rows(args.limit)
    if args.categories:
        prompts = [row for row in prompts if row["category"] in args.categories.split(",")]
    report = measure(prompts, args.variants, before=args.before, max_tokens=args.max_tokens, repeats=args.repeats)
    print_report(report)
    if args.out:
        args.out.write_text(json.dumps(report, indent=1))


def prompt_rows(limit: int | None) -> list[dict[str, str]]:
    from trtspec.prompts import load_prompts

    edit = [{"prompt": p.text, "category": p.category} for p in load_prompts(None, "traffic") if p.category == "edit"]
    dev = [{"prompt": p.text, "category": p.category} for p in load_prompts(None, "bench")]
    return edit[:limit] + dev[:limit] if limit else edit + dev


def parse_variant(text: str) -> tuple[str, int, dict[str, Any]]:
    head, *settings = text.split(",")
    mode, _, k = head.partition("@")
    options = {key: json.loads(value) for key, value in (s.split("=", 1) for s in settings)}
    if mode == "suffix" and not k:   # the mode's own cap (the drafter's, as the spec's default)
        from trtspec.runtime.drafters.suffix import MAX_DRAFT_LEN

        k = str(options.get("max_draft_len", MAX_DRAFT_LEN))
    if mode not in ("ngram", "suffix", "suffix-before") or not k.isdigit():
        raise SystemExit(f"error: variant {text!r}: want ngram@K, suffix[@K] or suffix-before@K[,name=value...]")
    return mode, int(k), options


def make_drafter(mode: str, options: dict[str, Any], before: Any) -> Any:
    if mode == "ngram":
        from trtspec.runtime.drafters.ngram import NgramDrafter

        return NgramDrafter(options.get("ngram_min", 2), options.get("ngram_max", 3))
    from trtspec.runtime.drafters import suffix

    module = before if mode == "suffix-before" else suffix
    if module is None:
        raise SystemExit("error: suffix-before needs --before REV (a git revision with the suffix drafter)")
    return module.SuffixDrafter(**{"max_cached_requests": 0, **options})


def module_at(rev: str | None) -> Any:
    """trtspec/runtime/drafters/suffix.py as it was at git revision `rev`, imported apart."""
    if rev is None:
        return None
    text = subprocess.run(["git", "show", f"{rev}:trtspec/runtime/drafters/suffix.py"], cwd=ROOT, check=True,
                          capture_output=True, text=True).stdout
    path = Path(tempfile.mkdtemp()) / "suffix_before.py"
    path.write_text(text)
    spec = importlib.util.spec_from_file_location("suffix_before", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def measure(prompts: list[dict[str, str]], variants: list[str], *, before: str | None, max_tokens: int,
            repeats: int) -> dict[str, Any]:
    from trtspec.bench.targets import mode_variant
    from trtspec.runtime import Engine

    engine = Engine.from_checkpoints(smollm2(), mode="ngram", max_draft_len=4, draft_len_schedule=[[1, 4]])
    old = module_at(before)
    parsed = {name: parse_variant(name) for name in variants}
    drafters = {name: make_drafter(mode, options, old) for name, (mode, _, options) in parsed.items()}
    engines = {"plain": engine} | {name: mode_variant(engine, "ngram" if mode == "ngram" else "suffix", drafters[name], k,
                                                      name=name) for name, (mode, k, _) in parsed.items()}
    for variant in engines.values():
        variant.generate("Hello", max_new_tokens=4, speculative=variant is not engine)  # warm-up
    order = list(engines)
    runs: list[dict[str, Any]] = []   # one per request
    answers: dict[int, dict[str, Any]] = {}
    loads = []
    try:
        for repeat in range(repeats):
            loads.append({"repeat": repeat, "before": load_average()})
            for index, row in enumerate(prompts):
                shift = (index + repeat) % len(order)
                for name in order[shift:] + order[:shift]:
                    started = time.perf_counter()
                    result = engines[name].generate(row["prompt"], max_new_tokens=max_tokens,
                                                    speculative=name != "plain")
                    seconds = time.perf_counter() - started
                    if name == "plain" and repeat == 0:
                        answers[index] = {"prompt_ids": list(result.prompt_token_ids), "output_ids": list(result.token_ids),
                                          "category": row["category"]}
                    stats = result.stats
                    runs.append({"variant": name, "repeat": repeat, "prompt": index, "category": row["category"],
                                 "seconds": seconds, "tokens": list(result.token_ids),
                                 "drafts": stats.num_drafts, "accepted": stats.num_accepted_tokens,
                                 "verified": stats.num_verified_tokens})
            loads[-1]["after"] = load_average()
            print(f"repeat {repeat + 1}/{repeats} done, load {loads[-1]['before']} -> {loads[-1]['after']}",
                  file=sys.stderr, flush=True)
    finally:
        for name, variant in engines.items():
            if name != "plain":
                variant.close()
        engine.close()
    replayed = {name: replay(drafters[name], list(answers.values()), parsed[name][1]) for name in variants}
    return {"variants": variants, "before": before, "max_tokens": max_tokens, "repeats": repeats,
            "num_prompts": len(prompts), "loads": loads, "speed": speed(runs), "equal": equal(runs),
            "replay": replayed}


def speed(runs: list[dict[str, Any]]) -> dict[str, Any]:
    """{category: {variant: tok/s per repeat, ratio to plain per repeat, medians, engine AL}}, with an 'all' category."""
    table: dict[str, Any] = {}
    for category in ["all", *sorted({r["category"] for r in runs})]:
        chosen = [r for r in runs if category in ("all", r["category"])]
        by_repeat: dict[str, dict[int, float]] = {}
        for name in dict.fromkeys(r["variant"] for r in chosen):
            for repeat in sorted({r["repeat"] for r in chosen}):
                cell = [r for r in chosen if r["variant"] == name and r["repeat"] == repeat]
                by_repeat.setdefault(name, {})[repeat] = sum(len(r["tokens"]) for r in cell) / sum(r["seconds"] for r in cell)
        rows = {}
        for name, per_repeat in by_repeat.items():
            ratios = [per_repeat[k] / by_repeat["plain"][k] for k in per_repeat]   # median: common.median_ratio's
            cell = [r for r in chosen if r["variant"] == name]
            drafts = sum(r["drafts"] for r in cell)
            rows[name] = {"tok_s": round(statistics.median(per_repeat.values()), 2),
                          "tok_s_by_repeat": [round(v, 2) for v in per_repeat.values()],
                          "ratio": round(statistics.median(ratios), 3), "ratio_by_repeat": [round(v, 3) for v in ratios],
                          "acceptance_length": round(1 + sum(r["accepted"] for r in cell) / drafts, 2) if drafts else None}
        table[category] = rows
    return table


def equal(runs: list[dict[str, Any]]) -> dict[str, str]:
    """Per variant: requests whose tokens equal plain decoding's in the same repeat, of all."""
    plain = {(r["repeat"], r["prompt"]): r["tokens"] for r in runs if r["variant"] == "plain"}
    out: dict[str, list[int]] = {}
    for r in runs:
        if r["variant"] != "plain":
            count = out.setdefault(r["variant"], [0, 0])
            count[0] += r["tokens"] == plain[(r["repeat"], r["prompt"])]
            count[1] += 1
    return {name: f"{a}/{b}" for name, (a, b) in out.items()}


def replay(drafter: Any, answers: list[dict[str, Any]], max_len: int) -> dict[str, Any]:
    """Per category (and 'all'): the drafter's exact steps over the plain answers (module docstring)."""
    sums: dict[str, list[float]] = {}
    for answer in answers:
        prompt, output = answer["prompt_ids"], answer["output_ids"]
        session = drafter.session(prompt, None, None)
        done = 1   # the first token comes from the prompt's pass, which drafts nothing (as in the engine)
        counts = [0.0] * (5 + len(ROW_COSTS))   # decode tokens, steps, drafts, verified, accepted, costs...
        while done < len(output):
            draft = session.propose(prompt + output[:done], max_len)
            accepted = verified = 0
            if draft is not None and draft.size:
                accepted, verified = accepted_length(draft, output[done:]), draft.size
                counts[2] += 1
            counts[1] += 1
            counts[3] += verified
            counts[4] += accepted
            for j, cost in enumerate(ROW_COSTS):
                counts[5 + j] += 1 + cost * verified
            done += accepted + 1
        counts[0] += len(output) - 1
        for category in ("all", answer["category"]):
            sums[category] = [a + b for a, b in zip(sums.get(category, [0.0] * len(counts)), counts, strict=True)]
    return {category: {"steps": int(c[1]), "drafts": int(c[2]), "verified": int(c[3]), "accepted": int(c[4]),
                       "tokens_per_step": round(c[0] / c[1], 3), "verified_per_step": round(c[3] / c[1], 2),
                       "acceptance_length": round(1 + c[4] / c[2], 2) if c[2] else None,
                       "tokens_per_cost": {str(cost): round(c[0] / c[5 + j], 3) for j, cost in enumerate(ROW_COSTS)}}
            for category, c in sums.items()}


def accepted_length(draft: Any, truth: list[int]) -> int:
    """Draft tokens greedy verification keeps: a chain's longest prefix equal to `truth`, a tree's
    deepest node whose path is."""
    ids = draft.token_ids.tolist()
    paths = [()] * len(ids) if draft.tree is None else [tuple(p) for p in draft.tree.paths]
    if draft.tree is None:
        kept = 0
        while kept < len(ids) and kept < len(truth) and ids[kept] == truth[kept]:
            kept += 1
        return kept
    token = dict(zip(paths, ids, strict=True))
    return max((len(p) for p in paths if len(p) <= len(truth)
                and all(token[p[:d + 1]] == truth[d] for d in range(len(p)))), default=0)


def print_report(report: dict[str, Any]) -> None:
    print(f"{report['num_prompts']} prompts x {report['max_tokens']} tokens, {report['repeats']} repeats; "
          f"load {[(x['before'], x.get('after')) for x in report['loads']]}; greedy equal: {report['equal']}")
    for category, rows in report["speed"].items():
        print(f"\n{category}: variant, tok/s (median), ratio to plain (per repeat), AL | replay: tokens/step, "
              f"verified/step, AL, tokens per cost at r={'/'.join(map(str, ROW_COSTS))}")
        for name, row in rows.items():
            line = f"  {name:28s} {row['tok_s']:7.2f}  {row['ratio']:.3f} {row['ratio_by_repeat']}  AL {row['acceptance_length']}"
            rep = report["replay"].get(name, {}).get(category)
            if rep:
                line += (f" | {rep['tokens_per_step']:.2f} {rep['verified_per_step']:.1f} AL {rep['acceptance_length']} "
                         + "/".join(f"{v:.2f}" for v in rep["tokens_per_cost"].values()))
            print(line)


if __name__ == "__main__":
    main()
