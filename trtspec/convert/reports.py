"""Quality reports: FP8 against the original, and EAGLE-3 acceptance on held-out prompts.

Acceptance vocabulary (as in the runtime): at each speculative step the head drafts
`max_draft_len` tokens after the committed text; the target accepts the longest prefix that
matches its own greedy tokens and adds one bonus token. Acceptance length = accepted + 1 (bonus
included); its mean over steps is the tokens each target pass yields.

`eagle3_acceptance` measures this with ModelOpt's `pseudo_speculative_generate` (the head drafts
from the target's hidden states over the whole prefix) against the target's greedy continuation.
The report says which method produced its numbers.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

from trtspec.chat import prompt_ids


def greedy_continuations(model, tokenizer, prompts: list[str], new_tokens: int) -> list[tuple[list[int], list[int]]]:
    """(prompt ids, greedy continuation ids) per prompt, with the target alone."""
    import torch

    pairs = []
    for prompt in prompts:
        ids = prompt_ids(tokenizer, prompt)
        with torch.no_grad():
            out = model.generate(input_ids=torch.tensor([ids], device=model.device), max_new_tokens=new_tokens,
                                 do_sample=False,
                                 temperature=None, top_p=None, top_k=None, pad_token_id=tokenizer.pad_token_id)
        pairs.append((ids, out[0, len(ids):].tolist()))
    return pairs


def eagle3_acceptance(eagle_model, references: list[tuple[list[int], list[int]]], *, max_draft_len: int = 4,
                      on_prompt: Callable[[int], None] | None = None) -> dict[str, Any]:
    """Mean acceptance length (bonus included) and acceptance per draft position.

    `references` are (prompt ids, the target's greedy continuation). At position i the head drafts
    `max_draft_len` tokens after the target's token i; drafts are accepted while they equal the
    continuation; the step then advances by accepted + 1, as a speculative engine would.
    """
    import torch

    steps, accepted_total = 0, 0
    per_position = [0] * max_draft_len
    lengths = []
    for prompt_tokens, continuation in references:
        position = 0
        while position < len(continuation) - 1:
            prefix = torch.tensor([prompt_tokens + continuation[:position]], device=eagle_model.device)
            _, drafts = eagle_model.pseudo_speculative_generate(prefix, steps=max_draft_len)
            accepted = 0
            for offset, token in enumerate(drafts[0].tolist()):
                truth = position + 1 + offset
                if truth >= len(continuation) or token != continuation[truth]:
                    break
                per_position[offset] += 1
                accepted += 1
            steps += 1
            accepted_total += accepted
            lengths.append(accepted + 1)
            position += accepted + 1
        if on_prompt:
            on_prompt(1)
    mean_length = sum(lengths) / max(1, len(lengths))
    return {"method": "modelopt.pseudo_speculative_generate vs target greedy continuation",
            "max_draft_len": max_draft_len, "prompts": len(references), "steps": steps,
            "mean_acceptance_length": round(mean_length, 3),
            "acceptance_rate": round(accepted_total / max(1, steps * max_draft_len), 3),
            "accepted_per_position": per_position,
            "acceptance_per_position": [round(count / max(1, steps), 3) for count in per_position]}


def fp8_quality(original, quantized, tokenizer, prompts: list[str], *, new_tokens: int = 32) -> dict[str, Any]:
    """Greedy token agreement and perplexity, FP8 model against the original.

    Agreement: the FP8 model is teacher-forced on the original's greedy continuation and we count
    the positions where its own argmax equals the original's token. Perplexity: both models score
    the original's continuation (lower is better; close values mean FP8 kept the distribution).
    """
    import torch

    agree = total = 0
    nll = {"original": 0.0, "fp8": 0.0}
    for prompt_tokens, continuation in greedy_continuations(original, tokenizer, prompts, new_tokens):
        if not continuation:
            continue
        ids = torch.tensor([prompt_tokens + continuation])
        start = len(prompt_tokens)
        with torch.no_grad():
            for name, model in (("original", original), ("fp8", quantized)):
                logits = model(ids).logits[0, start - 1:-1].float()
                target = ids[0, start:]
                nll[name] += float(torch.nn.functional.cross_entropy(logits, target, reduction="sum"))
                if name == "fp8":
                    agree += int((logits.argmax(-1) == target).sum())
        total += len(continuation)
    return {"prompts": len(prompts), "tokens": total, "greedy_token_agreement": round(agree / max(1, total), 4),
            "perplexity_original": round(math.exp(nll["original"] / max(1, total)), 3),
            "perplexity_fp8": round(math.exp(nll["fp8"] / max(1, total)), 3)}


def runtime_acceptance(target_dir, head_dir, prompts: list[str], *, max_draft_len: int = 4, new_tokens: int = 48,
                       on_prompt: Callable[[int], None] | None = None, timed: bool = True) -> dict[str, Any]:
    """The same figures measured by trtspec's cpu engine (`trtspec.runtime`) with the exported head,
    and (`timed`) whether the head pays on this machine: each prompt is also decoded without
    speculation (alternating which goes first), and `speed` gives both tokens/s and their ratio.

    Greedy decoding, so the engine's output is the target's own; this also proves the exported
    directory loads and drafts in the engine that serves it. Prompts are not kept between requests
    (`kv_cache_reuse_mib` 0: the second decoding of a prompt would skip its prefill). Raises
    ImportError when the runtime is not installed (the caller then falls back to `eagle3_acceptance`).
    """
    import time

    from trtspec.runtime import Engine

    # adapt_threads off: the thread count stays whatever other processes do, so two measurements of
    # one head agree (the head's own forward rounds by thread count, and a near-tied draft follows;
    # test_warm_start saw 2.614 against 2.464 for one head at load 10)
    engine = Engine.from_checkpoints(target_dir, mode="eagle3", draft_dir=head_dir, max_draft_len=max_draft_len,
                                     kv_cache_reuse_mib=0, adapt_threads=False)
    seconds, tokens = {True: 0.0, False: 0.0}, {True: 0, False: 0}
    with engine:
        for index, prompt in enumerate(prompts):
            alternating = (True, False) if index % 2 == 0 else (False, True)
            for speculative in alternating if timed else (True,):
                start = time.perf_counter()
                result = engine.generate(prompt, max_new_tokens=new_tokens, temperature=0.0, speculative=speculative)
                seconds[speculative] += time.perf_counter() - start
                tokens[speculative] += len(result.token_ids)
            if on_prompt:
                on_prompt(1)
        stats = engine.cumulative_stats()
    per_position = list(stats.accepted_per_position) + [0] * (max_draft_len - len(stats.accepted_per_position))
    measured = {"method": "trtspec.runtime cpu engine (greedy, exported head)", "max_draft_len": max_draft_len,
                "prompts": len(prompts), "steps": stats.num_drafts,
                "mean_acceptance_length": round(stats.mean_acceptance_length, 3),
                "acceptance_rate": round(stats.acceptance_rate, 3), "accepted_per_position": per_position,
                "acceptance_per_position": [round(count / max(1, stats.num_drafts), 3) for count in per_position]}
    if timed:
        rates = {speculative: tokens[speculative] / seconds[speculative] if seconds[speculative] else 0.0
                 for speculative in (True, False)}
        measured["speed"] = {"concurrency": 1, "draft": f"chain of {max_draft_len}",
                             "speculative_tokens_per_s": round(rates[True], 2),
                             "plain_tokens_per_s": round(rates[False], 2),
                             "speedup": round(rates[True] / rates[False], 3) if rates[False] else None}
    return measured


# Below this mean acceptance length (bonus included) a head does not pay on the cpu engine: the
# demo's head at 1.32 ran 0.99x the baseline through Triton at concurrency 1, a 5-minute head at
# 1.39 ran 1.11x, and the issue-26 default head at 1.18 was slower than no speculation
# (docs/BENCHMARKS-log.md). Used where the speed was not measured (ModelOpt's own report).
LOW_ACCEPTANCE_LENGTH = 1.3
# A measured speed-up below this says the head slows decoding here. Whether a head pays depends on
# the machine as much as on the head: the default 15-minute head (AL 1.44) drafting chains of 4 ran
# 0.85-0.90x plain decoding on a 2-core AVX2 CPU, where a verify pass of 5 rows costs 1.26x a plain
# step and the head's drafts a quarter of one (docs/BENCHMARKS-log.md, "On an AVX2 CPU").
SLOWER_THAN_PLAIN = 0.98


def low_acceptance_warning(acceptance: dict[str, Any]) -> str | None:
    """One line when the head does not speed decoding up: measured on this machine where the
    report has the speed, else judged from the held-out acceptance length."""
    length = acceptance.get("mean_acceptance_length")
    speedup = (acceptance.get("speed") or {}).get("speedup")
    advice = ("train longer (speculative.eagle3.max_minutes) or on more data (num_samples), "
              "or use mode ngram")
    if speedup is not None:
        if speedup >= SLOWER_THAN_PLAIN:
            return None
        speed = acceptance["speed"]
        return (f"decoding with this head ran {speedup:.2f}x the speed of decoding without it on this machine "
                f"({speed['speculative_tokens_per_s']} vs {speed['plain_tokens_per_s']} tokens/s, "
                f"{speed['draft']}, mean acceptance length {length}): {advice}")
    if length is None or length >= LOW_ACCEPTANCE_LENGTH:
        return None
    return (f"mean acceptance length {length} is below {LOW_ACCEPTANCE_LENGTH}: decoding with this head is "
            f"likely no faster than without it; {advice}")


def machine_summary() -> dict[str, Any]:
    """Where a training figure was measured: CPU model, vector ISA torch uses, threads, cores."""
    import os
    import platform

    import torch

    model = platform.processor() or ""
    try:
        with open("/proc/cpuinfo") as cpuinfo:
            model = next((line.split(":", 1)[1].strip() for line in cpuinfo if line.startswith("model name")), model)
    except OSError:
        pass
    return {"cpu": model or "unknown", "isa": torch.backends.cpu.get_cpu_capability(),
            "threads": torch.get_num_threads(), "cores": len(os.sched_getaffinity(0))}
