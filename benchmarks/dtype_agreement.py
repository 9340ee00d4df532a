"""How often the cpu engine's greedy answers in bfloat16 (model.dtype bfloat16: linear layers on the
bfloat16 row kernel) equal its float32 answers, which are transformers' float32 answers bit for bit.

Per prompt: plain greedy decoding of --max-tokens tokens in each dtype (one process, one engine
after the other); reported: answers identical in full, the tokens that match before the first
difference (mean over prompts, as a share of the tokens), and where the first difference falls.
Prompts: the dev set's held-back lines (16-30, never used for tuning), every category.

    .venv/bin/python -m benchmarks dtype-agreement --max-tokens 64 --json
"""

from __future__ import annotations

import argparse
import json
import statistics
import time

from benchmarks.common import dev_rows, smollm2


def first_difference(a: list[int], b: list[int]) -> int | None:
    """Index of the first token where the answers differ (the shorter length when one is a prefix
    of the other); None when they are the same."""
    if a == b:
        return None
    return next((i for i, (x, y) in enumerate(zip(a, b, strict=False)) if x != y), min(len(a), len(b)))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--max-tokens", type=int, default=64)
    parser.add_argument("--json", action="store_true", help="one JSON object on the last line")
    args = parser.parse_args()
    from trtspec.runtime import Engine

    rows = dev_rows(held_back=True)
    path = smollm2()
    answers: dict[str, list[list[int]]] = {}
    seconds: dict[str, float] = {}
    for dtype in ("float32", "bfloat16"):
        with Engine.from_checkpoints(path, mode="none", dtype=dtype) as engine:
            ids = [engine.encode(row["prompt"], None) for row in rows]
            start = time.perf_counter()
            answers[dtype] = [engine.generate(i, max_new_tokens=args.max_tokens, speculative=False).token_ids
                              for i in ids]
            seconds[dtype] = time.perf_counter() - start
    pairs = list(zip(answers["float32"], answers["bfloat16"], strict=True))
    firsts = [first_difference(a, b) for a, b in pairs]
    result = {
        "prompts": len(rows), "max_tokens": args.max_tokens,
        "identical_answers": sum(a == b for a, b in pairs),
        "matched_prefix_share": statistics.mean(1.0 if f is None else f / max(len(a), 1)
                                                for f, (a, _) in zip(firsts, pairs, strict=True)),
        "first_difference": firsts,  # per prompt, None where the answers are the same
        "identical_by_category": {c: [sum(a == b for (a, b), r in zip(pairs, rows, strict=True) if r["category"] == c),
                                      sum(r["category"] == c for r in rows)] for c in sorted({r["category"] for r in rows})},
        "tokens_per_s": {d: sum(map(len, answers[d])) / seconds[d] for d in answers},
    }
    print(f"{result['identical_answers']} of {len(rows)} answers identical over {args.max_tokens} tokens; "
          f"{100 * result['matched_prefix_share']:.0f}% of tokens before the first difference; "
          f"where they differ, the first different token is at (0-based) {sorted(f for f in firsts if f is not None)}")
    if args.json:
        print(json.dumps(result))


if __name__ == "__main__":
    main()
