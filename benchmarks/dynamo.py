"""Dynamo with 1 and 2 trtspec workers beside one Triton server: tokens/s and TTFT through the OpenAI API.

    python -m benchmarks dynamo [--engine engines/smollm2-ngram-cpu] --concurrency 1 8 16 --max-tokens 48

Runs in a private network namespace (it re-runs itself under `unshare -rn`, loopback up: Dynamo's
ZeroMQ publishers bind every interface). One after the other, on the same engine (default: SmolLM2
n-gram cpu, built into a scratch workdir): `deploy --target local` with serve.openai_port (one
tritonserver, trtspec's OpenAI frontend), then `deploy --target dynamo` with 1 and with 2 workers
(kv router). Each gets the same chat prompts (the package's bench prompts, greedy, streaming) at each
concurrency: max(8, 2 x concurrency) requests; figures are output tokens / wall seconds and TTFT p50.
With 2 workers it then measures routing: --prefixes long prompts sent two at a time (so both workers
keep some), then each repeated --prefix-repeats times with a new question, one at a time: the share
of repeats whose worker had at least half of the prompt cached (vllm:prefix_cache_hits_total over
vllm:prefix_cache_queries_total of the worker that served it, prompt tokens).
Prints one JSON document and a Markdown table.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

from benchmarks.common import load_average, smollm2
from benchmarks.openai_overhead import _openai_one, _prompts, _round

ROOT = Path(__file__).resolve().parents[1]


def _spec(root: Path, engine_out: Path, workers: int, max_batch: int) -> Any:
    from tests.serve.conftest import free_ports
    from trtspec.spec.schema import validate_spec

    http, grpc, metrics, openai = free_ports(4)
    return validate_spec({
        "model": {"source": str(smollm2()), "name": "smollm2"}, "speculative": {"mode": "ngram"},
        "build": {"backend": "cpu", "max_batch_size": max_batch, "max_input_len": 1024, "max_seq_len": 1536,
                  "output_dir": str(engine_out)},
        "serve": {"http_port": http, "grpc_port": grpc, "metrics_port": metrics, "openai_port": openai,
                  "repository": str(root / "model_repository"), "startup_timeout_s": 900,
                  "max_queue_size": 128, "dynamo": {"workers": workers}},
        "workdir": str(root / "work")})


def _measure(base_url: str, concurrencies: list[int], max_tokens: int) -> dict[str, Any]:
    from openai import OpenAI

    api = OpenAI(base_url=base_url, api_key="unused", max_retries=0, timeout=1200)
    send = lambda prompt: _openai_one(api, "smollm2", prompt, max_tokens)  # noqa: E731
    _round(send, _prompts(2), 1)  # warm: connections, first-request costs
    return {str(c): _round(send, _prompts(max(8, 2 * c)), c) for c in concurrencies}


def _routing(base_url: str, ports: list[int], prefixes: int, repeats: int) -> dict[str, Any]:
    from openai import OpenAI

    from trtspec.serve.dynamo.launcher import _get_text
    from trtspec.serve.dynamo.metrics import parse_served

    api = OpenAI(base_url=base_url, api_key="unused", max_retries=0, timeout=1200)

    def served() -> list[dict[str, float]]:
        return [parse_served(_get_text(f"http://127.0.0.1:{p}/metrics") or "") for p in ports]

    def ask(text: str) -> None:
        api.chat.completions.create(model="smollm2", messages=[{"role": "user", "content": text}], temperature=0,
                                    max_completion_tokens=8)

    rows = _prompts(prefixes * 6)
    longs = [f"Context {i}: " + " ".join(rows[i * 6:i * 6 + 6]) for i in range(prefixes)]
    for pair in range(0, prefixes, 2):  # two at a time: the router spreads them by load
        with ThreadPoolExecutor(2) as pool:
            list(pool.map(lambda i: ask(longs[i] + "\nSummarize."), range(pair, min(pair + 2, prefixes))))
    time.sleep(1.0)  # the kept prompts' blocks reach the router
    from_cache, placements = 0, []
    for r in range(repeats):
        for i in range(prefixes):  # one at a time: where each repeat goes, and how much of it was cached
            before = served()
            ask(longs[i] + f"\nQuestion {r}: what is the first word?")
            after = served()
            worker = max(range(len(ports)), key=lambda w: after[w]["requests"] - before[w]["requests"])
            hits = after[worker]["prefix_cache_hits"] - before[worker]["prefix_cache_hits"]
            queries = after[worker]["prefix_cache_queries"] - before[worker]["prefix_cache_queries"]
            placements.append({"prefix": i, "repeat": r, "worker": worker, "cached_tokens": hits,
                               "prompt_tokens": queries})
            from_cache += queries > 0 and hits / queries >= 0.5
    return {"repeats": len(placements), "from_cache": from_cache, "share": from_cache / len(placements),
            "placements": placements}


def run(args: argparse.Namespace) -> dict[str, Any]:
    from trtspec.builders import build
    from trtspec.serve import deploy
    from trtspec.serve.dynamo import launcher

    scratch = Path(tempfile.mkdtemp(prefix="bench-dynamo-"))
    max_batch = max(args.concurrency)
    engine_out = Path(args.engine).parent if args.engine else scratch / "engines"
    report: dict[str, Any] = {"max_tokens": args.max_tokens, "load_before": load_average(), "results": {}}
    first = _spec(scratch / "triton", engine_out, 1, max_batch)
    engine = Path(args.engine) if args.engine else build(first).engine_dir
    report["engine"] = str(engine)
    configs = [("triton (1 server)", "local", 1)] + [(f"dynamo {n} worker{'s' * (n > 1)}", "dynamo", n)
                                                     for n in args.workers]
    for label, target, workers in configs:
        spec = _spec(scratch / label.split()[0] / str(workers), engine_out, workers, max_batch)
        started = time.monotonic()
        record = deploy.deploy(spec, engine, target, None)
        entry: dict[str, Any] = {"startup_s": round(time.monotonic() - started, 1)}
        base_url = f"http://127.0.0.1:{spec.serve.openai_port}/v1"
        try:
            entry["by_concurrency"] = _measure(base_url, args.concurrency, args.max_tokens)
            if target == "dynamo" and workers > 1 and args.prefixes:
                entry["routing"] = _routing(base_url, [w["system_port"] for w in record["workers"]],
                                            args.prefixes, args.prefix_repeats)
        finally:
            from trtspec.artifacts import Layout
            from trtspec.serve import server

            layout = Layout.from_spec(spec)
            launcher.stop(layout) if target == "dynamo" else server.stop_local(layout)
        report["results"][label] = entry
        print(f"{label}: {json.dumps(entry)[:400]}", file=sys.stderr, flush=True)
    report["load_after"] = load_average()
    report["cpu"] = _cpu()
    return report


def _cpu() -> str:
    for line in Path("/proc/cpuinfo").read_text().splitlines():
        if line.startswith("model name"):
            return f"{line.split(':', 1)[1].strip()}, {os.cpu_count()} cores"
    return f"{os.cpu_count()} cores"


def table(report: dict[str, Any]) -> str:
    concurrencies = list(next(iter(report["results"].values()))["by_concurrency"])
    head = "| server | " + " | ".join(f"c={c} tok/s | c={c} TTFT p50 ms" for c in concurrencies) + " |"
    lines = [head, "|---|" + "---:|" * (2 * len(concurrencies))]
    for label, entry in report["results"].items():
        cells = [f"{entry['by_concurrency'][c]['tokens_per_s']:.1f} | {entry['by_concurrency'][c]['ttft_p50_s'] * 1000:.0f}"
                 for c in concurrencies]
        lines.append(f"| {label} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--engine", default=None, help="a built cpu engine (default: SmolLM2 n-gram, built here)")
    parser.add_argument("--workers", type=int, nargs="+", default=[1, 2])
    parser.add_argument("--concurrency", type=int, nargs="+", default=[1, 8, 16])
    parser.add_argument("--max-tokens", type=int, default=48)
    parser.add_argument("--prefixes", type=int, default=6)
    parser.add_argument("--prefix-repeats", type=int, default=2)
    parser.add_argument("--out", type=Path, default=None)
    args = parser.parse_args()
    if os.environ.get("TRTSPEC_BENCH_NETNS") != "1":  # again, inside a private network namespace
        inner = " ".join(f"'{a}'" for a in [sys.executable, "-m", "benchmarks", "dynamo", *sys.argv[1:]])
        return subprocess.run(["unshare", "-rn", "--pid", "--fork", "--mount-proc", "--kill-child", "sh", "-c",
                               f"ip link set lo up && exec {inner}"], cwd=ROOT,
                              env={**os.environ, "TRTSPEC_BENCH_NETNS": "1"}).returncode
    report = run(args)
    text = json.dumps(report, indent=2)
    if args.out:
        args.out.write_text(text + "\n")
    print(text)
    print(table(report))
    return 0


if __name__ == "__main__":
    sys.exit(main())
