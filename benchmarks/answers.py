"""How fast `trtspec convert --mode eagle3` can make its training answers on this machine.

Greedy answers to the first N packaged training prompts, two ways over the same float32 target:
transformers' `generate` in batches (convert's path for a GPU or bfloat16 target) and trtspec's
cpu engine with K answers in flight (convert's path on the CPU, convert/eagle3/engine_answers.py).
Each variant runs in its own process, one after another; prints answer tokens per second.

    .venv/bin/python -m benchmarks answers --model ~/.cache/trtspec/models/smollm2 \\
        --num-prompts 64 --answer-tokens 128 generate:64 engine:16 engine:32 engine:64
"""

from __future__ import annotations

import argparse
import json
import subprocess
import time

from benchmarks.common import ROOT, harness_command, train_texts


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--model", required=True, help="a Hugging Face checkpoint directory (the target)")
    parser.add_argument("--num-prompts", type=int, default=64)
    parser.add_argument("--answer-tokens", type=int, default=128)
    parser.add_argument("--one", help=argparse.SUPPRESS)  # run one variant in this process
    parser.add_argument("variants", nargs="*", default=["generate:64", "engine:64"],
                        help="generate:BATCH or engine:IN_FLIGHT")
    args = parser.parse_args()
    if args.one:
        print(json.dumps(run_one(args.one, args.model, args.num_prompts, args.answer_tokens)))
        return 0
    for variant in args.variants:
        out = subprocess.run(harness_command("answers", "--model", args.model, "--num-prompts", str(args.num_prompts),
                                             "--answer-tokens", str(args.answer_tokens), "--one", variant),
                             check=True, capture_output=True, text=True, cwd=ROOT).stdout
        print(out.strip().splitlines()[-1])
    return 0


def run_one(variant: str, model_dir: str, num_prompts: int, answer_tokens: int) -> dict:
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from trtspec.convert.eagle3.data import Sample, generate_rows
    from trtspec.convert.eagle3.engine_answers import generate_rows_engine
    from trtspec.convert.eagle3.sources import Conversation

    kind, size = variant.split(":")
    tokenizer = AutoTokenizer.from_pretrained(model_dir)
    tokenizer.pad_token = tokenizer.pad_token or tokenizer.eos_token
    model = AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch.float32).eval()
    prompts = train_texts(num_prompts)
    samples = [Sample(i, Conversation(i, ({"role": "user", "content": p},)), sampled=False)
               for i, p in enumerate(prompts)]
    clock = time.perf_counter()
    if kind == "generate":
        rows = list(generate_rows(model, tokenizer, samples, answer_tokens=answer_tokens, max_context=1 << 20,
                                  batch_size=int(size)))
    else:
        rows = list(generate_rows_engine(model, tokenizer, samples, answer_tokens=answer_tokens,
                                         max_context=1024, in_flight=int(size)))
    seconds = time.perf_counter() - clock
    tokens = sum(len(row.ids) - row.answer_start for _, row in rows)
    return {"variant": variant, "answers": len(rows), "answer_tokens": tokens, "seconds": round(seconds, 1),
            "tokens_per_s": round(tokens / seconds, 1), "threads": torch.get_num_threads()}


if __name__ == "__main__":
    raise SystemExit(main())
