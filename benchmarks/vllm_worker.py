"""vLLM's CPU engine as a peer, in process: run by the vLLM venv's python, driven over stdin/stdout.

    .venv-vllm/bin/python -m benchmarks.vllm_worker --model DIR [--speculative JSON] [--dtype float32]

Not a comparison of its own (benchmarks/peers_vllm.py and tests/peers drive it): it imports nothing
from trtspec (the vLLM venv has none of it). It builds one `vllm.LLM` (enforce_eager, max_model_len,
max_num_seqs 8, statistics on) and answers one JSON command a line:

  {"op": "run", "prompts": [[ids], ...], "max_tokens": N, "concurrency": C}
      closed loop through the LLMEngine's own step(): C requests in flight, the next added as one
      ends; greedy, detokenize off. Answers per request token ids, TTFT (add_request to the first
      step that returns a token) and end-to-end seconds, the wall time, and the spec-decode
      counters this command added (drafts, draft tokens, accepted, accepted per position). The EOS
      that ends an answer is dropped from its ids, as trtspec's outputs leave it out.
  {"op": "quit"}

Each answer is one stdout line starting with RESULT_MARK (vLLM logs on the same streams). Settings
from the measured recipe (shared/reference/dynamo-vllm-and-1.3.md): VLLM_CPU_KVCACHE_SPACE,
LD_PRELOAD of the venv's libiomp5.so, a __main__ guard (vLLM spawns), vLLM's own thread binding
(one core kept for its front end).
"""

from __future__ import annotations

import argparse
import json
import sys
import time

RESULT_MARK = "@@vllm-worker "
COUNTERS = {"vllm:spec_decode_num_drafts": "num_drafts", "vllm:spec_decode_num_draft_tokens": "num_draft_tokens",
            "vllm:spec_decode_num_accepted_tokens": "num_accepted_tokens"}
PER_POSITION = "vllm:spec_decode_num_accepted_tokens_per_pos"


def spec_counters(llm) -> dict:
    """vLLM's cumulative spec-decode counters (zeros without speculation)."""
    out: dict = {name: 0 for name in COUNTERS.values()} | {"accepted_per_position": []}
    for metric in llm.get_metrics():
        if metric.name in COUNTERS:
            out[COUNTERS[metric.name]] += int(metric.value)
        elif metric.name == PER_POSITION:
            values = [int(v) for v in metric.values]
            have = out["accepted_per_position"]
            have.extend([0] * (len(values) - len(have)))
            values = values + [0] * (len(have) - len(values))
            out["accepted_per_position"] = [a + b for a, b in zip(have, values, strict=True)]
    return out


def closed_loop(llm, prompts: list[list[int]], max_tokens: int, concurrency: int, counter: list[int]) -> dict:
    from vllm import SamplingParams

    engine = llm.llm_engine
    params = SamplingParams(temperature=0.0, max_tokens=max_tokens, detokenize=False)
    before = spec_counters(llm)
    pending = list(enumerate(prompts))
    inflight: dict[str, dict] = {}
    records = []
    started = time.perf_counter()
    while pending or inflight:
        while pending and len(inflight) < concurrency:
            index, ids = pending.pop(0)
            counter[0] += 1
            request_id = f"r{counter[0]}"
            engine.add_request(request_id, {"prompt_token_ids": list(ids)}, params)
            inflight[request_id] = {"prompt": index, "start": time.perf_counter(), "ttft_s": None}
        for output in engine.step():
            now = time.perf_counter()
            record = inflight.get(output.request_id)
            if record is None:
                continue
            tokens = list(output.outputs[0].token_ids) if output.outputs else []
            if record["ttft_s"] is None and tokens:
                record["ttft_s"] = now - record["start"]
            if output.finished:
                del inflight[output.request_id]
                completion = output.outputs[0]
                # vLLM keeps the EOS that ended an answer in its token ids; trtspec (and the count of
                # output tokens both report) does not: drop it so both count and compare alike
                # (stop_reason: None for the tokenizer's EOS, the id for generation_config's eos ids)
                if completion.finish_reason == "stop" and not isinstance(completion.stop_reason, str) and tokens:
                    tokens = tokens[:-1]
                records.append({"prompt": record["prompt"], "token_ids": tokens, "tokens": len(tokens),
                                "ttft_s": record["ttft_s"], "e2e_s": now - record["start"],
                                "finish_reason": completion.finish_reason})
    wall = time.perf_counter() - started
    after = spec_counters(llm)
    spec = {key: after[key] - before[key] for key in COUNTERS.values()}
    old = before["accepted_per_position"] + [0] * len(after["accepted_per_position"])
    spec["accepted_per_position"] = [a - old[i] for i, a in enumerate(after["accepted_per_position"])]
    return {"wall_s": wall, "records": sorted(records, key=lambda r: r["prompt"]), "spec": spec}


def serve() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--model", required=True)
    parser.add_argument("--speculative", default=None, help="vLLM speculative_config as JSON")
    parser.add_argument("--dtype", default="float32")
    parser.add_argument("--max-model-len", type=int, default=1024)
    parser.add_argument("--max-num-seqs", type=int, default=8)
    args = parser.parse_args()
    from vllm import LLM

    llm = LLM(model=args.model, dtype=args.dtype, enforce_eager=True, max_model_len=args.max_model_len,
              max_num_seqs=args.max_num_seqs, disable_log_stats=False, seed=0,
              speculative_config=json.loads(args.speculative) if args.speculative else None)
    print(RESULT_MARK + json.dumps({"ready": True}), flush=True)
    counter = [0]
    for line in sys.stdin:
        command = json.loads(line)
        if command["op"] == "quit":
            break
        answer = closed_loop(llm, command["prompts"], int(command["max_tokens"]), int(command["concurrency"]), counter)
        print(RESULT_MARK + json.dumps(answer), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(serve())
