"""Acceptance length and tokens/s against plain decoding for the modes without a second model.

    OMP_NUM_THREADS=1 TRTSPEC_CPU_LINEAR=rowdot python -m benchmarks self-drafting \
        '["lookahead", {"lookahead": [4, 3, 4]}]' '["layerskip", {"exit_layer": 8}]'

Each argument is one variant, [mode, engine options] (Engine.from_checkpoints keywords; drafting
is forced at every step with draft_len_schedule [[1, 4]] unless the options set it, null: the
cost model decides). On SmolLM2 (the cache `trtspec models fetch smollm2` fills), per variant,
PER_CAT (default 1) prompts of each category of the packaged dev prompts, TOK (default 48) greedy
tokens each, plain and speculative interleaved prompt by prompt on the same engine so that noise
hits both; one JSON line per variant: the tokens/s of both, their ratio, accepted tokens per
draft and acceptance length (1 + that), and how many answers were equal token for token.
"""

from __future__ import annotations

import json
import os
import sys
import time

from benchmarks.common import dev_rows, smollm2


def main() -> None:
    if not sys.argv[1:] or sys.argv[1] in ("-h", "--help"):
        print(__doc__)
        return
    measure([tuple(json.loads(arg)) for arg in sys.argv[1:]])


def measure(variants: list[tuple[str, dict]]) -> None:
    from trtspec.runtime import Engine

    model = smollm2()
    by_category: dict[str, list[str]] = {}
    for row in dev_rows():
        by_category.setdefault(row["category"], []).append(row["prompt"])
    prompts = [p for ps in by_category.values() for p in ps[:int(os.environ.get("PER_CAT", "1"))]]
    tokens = int(os.environ.get("TOK", "48"))
    for mode, options in variants:
        engine = Engine.from_checkpoints(model, mode=mode, max_draft_len=4,
                                         **{"draft_len_schedule": [[1, 4]], **options})
        engine.generate("Hello", max_new_tokens=4)  # warm-up: kernels, caches
        seconds, counts, accepted, drafts, equal = [0.0, 0.0], [0, 0], 0, 0, 0
        for prompt in prompts:
            results = []
            for index, speculative in enumerate((False, True)):
                started = time.perf_counter()
                results.append(engine.generate(prompt, max_new_tokens=tokens, speculative=speculative))
                seconds[index] += time.perf_counter() - started
                counts[index] += len(results[-1].token_ids)
            equal += results[0].token_ids == results[1].token_ids
            accepted += results[1].stats.num_accepted_tokens
            drafts += results[1].stats.num_drafts
        plain, spec = counts[0] / seconds[0], counts[1] / seconds[1]
        print(json.dumps({"mode": mode, **options, "prompts": len(prompts), "greedy_equal": f"{equal}/{len(prompts)}",
                          "plain_tok_s": round(plain, 1), "spec_tok_s": round(spec, 1), "ratio": round(spec / plain, 2),
                          "accepted_per_draft": round(accepted / max(drafts, 1), 2),
                          "acceptance_length": round(1 + accepted / max(drafts, 1), 2)}), flush=True)
        engine.close()


if __name__ == "__main__":
    main()
