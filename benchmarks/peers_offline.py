"""Offline analyses for benchmarks/peers.py that need no benchmark run.

- `verify_cost`: the time of one cached target pass by verify width, F.linear vs prepacked weights;
- `replay`: exact tokens per target pass of the n-gram drafter for any setting, replayed over the
  plain greedy outputs a benchmark run recorded (greedy acceptance depends only on the draft and
  the target's own continuation), priced with a cost model.
"""

from __future__ import annotations

import statistics
import time
from collections import defaultdict

from benchmarks.common import dev_rows, smollm2


def verify_cost(threads: int, context: int = 400, widths=(0, 1, 2, 3, 4, 6, 8, 10), rounds: int = 12) -> str:
    """Median time of one cached target pass over 1 + k tokens, relative to k = 0, for the model
    on nn.Linear (F.linear: MKL GEMV for 1 row, SGEMM for more) and on prepacked weights.
    Interleaved call by call, so machine load hits both alike."""
    import torch
    from transformers import DynamicCache

    from trtspec.runtime.checkpoints.parts import load_causal_lm
    from trtspec.runtime.forward.prepack import prepack_linears

    torch.set_num_threads(threads)
    path = smollm2()
    models = {"F.linear": load_causal_lm(path), "prepacked": load_causal_lm(path)}
    prepack_linears(models["prepacked"])
    times: dict = defaultdict(list)
    with torch.inference_mode():
        caches = {name: DynamicCache(config=m.config) for name, m in models.items()}
        for name, model in models.items():
            model(input_ids=torch.tensor([list(range(100, 100 + context))]), past_key_values=caches[name])
        for _ in range(rounds):
            for k in widths:
                for name, model in models.items():
                    started = time.perf_counter()
                    model(input_ids=torch.tensor([list(range(500, 501 + k))]), past_key_values=caches[name],
                          logits_to_keep=k + 1)
                    times[name, k].append(time.perf_counter() - started)
                    caches[name].crop(context)
    lines = [f"| linear | 1-token step (ms, {context} cached) | " + " | ".join(f"k={k}" for k in widths[1:]) + " |",
             "|---" * (len(widths) + 1) + "|"]
    for name in models:
        plain = statistics.median(times[name, 0])
        lines.append(f"| {name} | {plain * 1e3:.1f} | " + " | ".join(
            f"{statistics.median(times[name, k]) / plain:.2f}" for k in widths[1:]) + " |")
    return "\n".join(lines)


REPLAY_SETTINGS = ((4, 1, 3), (8, 1, 3), (10, 1, 2), (4, 2, 3), (8, 2, 3), (10, 2, 3), (12, 2, 3), (16, 2, 3),
                   (8, 2, 4), (8, 3, 5))


def replay(data: dict, settings=REPLAY_SETTINGS, cost_fixed: float = 0.0, cost_slope: float = 0.035) -> str:
    """Tokens per target pass the n-gram drafter reaches on the recorded plain greedy outputs.

    Greedy acceptance is a pure function of the draft and the target's own continuation, so
    replaying NgramSession over the recorded token ids gives the exact tokens per pass for any
    (max_draft_len, ngram_min, ngram_max). The speedup estimate prices a pass that verifies k
    draft tokens at cost(k) = 1 + cost_fixed + cost_slope * k plain steps (a pass without a draft
    costs 1). Measured on this machine (docs/BENCHMARKS-engine.md): prepacked weights fixed 0,
    slope ~0.035; plain F.linear (--no-prepack) about fixed 0.6, slope 0.04.
    A second table splits the drafts of a max_draft_len 10, n 1-3 replay by the n that matched:
    a draft is worth its pass when its mean accepted tokens exceed cost(k) - 1.
    """
    from transformers import AutoTokenizer

    from trtspec.runtime.drafters.ngram import NgramSession

    tokenizer = AutoTokenizer.from_pretrained(str(smollm2()))
    rows = dev_rows()
    first_repeat = [r for r in data["results"] if r.get("repeat", 0) == 0]
    cases = []
    for record, row in zip(first_repeat, _rows_in_run_order(rows, first_repeat, data), strict=True):
        ids = tokenizer.apply_chat_template([{"role": "user", "content": row["prompt"]}],
                                            add_generation_prompt=True, tokenize=True)
        cases.append((record["category"], list(ids["input_ids"] if hasattr(ids, "keys") else ids),
                      record["runs"]["engine-plain"]["token_ids"]))
    categories = sorted({c for c, _, _ in cases})

    def cost(k: int) -> float:
        return 1.0 + (cost_fixed + cost_slope * k if k else 0.0)

    def run(k, n_min, n_max, by_match=None):
        totals: dict[str, list[float]] = defaultdict(lambda: [0, 0, 0.0])  # tokens, passes, cost
        for category, ids, out in cases:
            session, tokens, done = NgramSession(n_min, n_max), ids + out[:1], 1
            while done < len(out):
                proposed = session.propose(tokens, k)
                draft = proposed.token_ids.tolist() if proposed is not None else []
                accepted = 0
                while accepted < len(draft) and done + accepted < len(out) and out[done + accepted] == draft[accepted]:
                    accepted += 1
                if by_match is not None and draft:
                    counts = by_match[(category, proposed.match)]
                    counts[0], counts[1], counts[2] = counts[0] + 1, counts[1] + accepted, counts[2] + len(draft)
                step = min(accepted + 1, len(out) - done)
                tokens += out[done:done + step]
                done += step
                total = totals[category]
                total[0], total[1], total[2] = total[0] + step, total[1] + 1, total[2] + cost(len(draft))
        totals["all"] = [sum(t[i] for t in list(totals.values())) for i in range(3)]
        return totals

    lines = [f"cost(k) = 1 + {cost_fixed:g} + {cost_slope:g} k plain steps", "",
             "| max_draft_len | ngram_min | ngram_max | " + " | ".join(
                 f"{c} tokens/pass | {c} est. speedup" for c in categories + ["all"]) + " |",
             "|---" * (3 + 2 * (len(categories) + 1)) + "|"]
    for k, n_min, n_max in settings:
        totals = run(k, n_min, n_max)
        lines.append(f"| {k} | {n_min} | {n_max} | " + " | ".join(
            f"{totals[c][0] / totals[c][1]:.2f} | {totals[c][0] / totals[c][2]:.2f}x" for c in categories + ["all"])
            + " |")
    by_match: dict = defaultdict(lambda: [0, 0, 0])  # drafts, accepted, draft tokens
    run(10, 1, 3, by_match)
    lines += ["", "| category | matched n | drafts | mean draft len | mean accepted | cost(k) - 1 at that length |",
              "|---" * 6 + "|"]
    for (category, n), (drafts, accepted, draft_tokens) in sorted(by_match.items()):
        lines.append(f"| {category} | {n} | {drafts} | {draft_tokens / drafts:.1f} | {accepted / drafts:.2f} | "
                     f"{cost(round(draft_tokens / drafts)) - 1:.2f} |")
    return "\n".join(lines)


def _rows_in_run_order(rows: list[dict], records: list[dict], data: dict) -> list[dict]:
    order = data["args"].get("categories", "summarize,chat,code,math").split(",")
    limit = int(data["args"].get("limit", "0") or 0)
    rows = sorted((r for r in rows if r["category"] in order), key=lambda r: order.index(r["category"]))
    if limit:
        seen: dict[str, int] = defaultdict(int)
        kept = []
        for row in rows:
            seen[row["category"]] += 1
            if seen[row["category"]] <= limit:
                kept.append(row)
        rows = kept
    return rows[: len(records)]
