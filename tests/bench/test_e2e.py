"""`trtspec bench --baseline` against a real tritonserver serving the tiny cpu engine."""

from __future__ import annotations

import json
import socket

import pytest
import yaml
from click.testing import CliRunner

from trtspec.cli import main

pytestmark = pytest.mark.e2e

PNG_MAGIC = b"\x89PNG\r\n\x1a\n"


def _free_ports(count: int) -> list[int]:
    sockets = [socket.socket() for _ in range(count)]
    for sock in sockets:
        sock.bind(("127.0.0.1", 0))
    ports = [sock.getsockname()[1] for sock in sockets]
    for sock in sockets:
        sock.close()
    return ports


@pytest.fixture(scope="module")
def served_spec(tmp_path_factory, tiny_llama):
    """A spec file whose server (tiny target, n-gram, cpu backend) is up on free loopback ports, with
    trtspec's OpenAI endpoint beside it."""
    from trtspec import repository
    from trtspec.artifacts import Layout
    from trtspec.builders import build
    from trtspec.serve import server
    from trtspec.spec.loading import load_spec

    root = tmp_path_factory.mktemp("bench-served")
    http, grpc, metrics, openai = _free_ports(4)
    path = root / "trtspec.yaml"
    path.write_text(yaml.safe_dump({
        "model": {"source": str(tiny_llama), "name": "tiny"}, "speculative": {"mode": "ngram"},
        "build": {"backend": "cpu", "max_input_len": 256, "max_seq_len": 512, "output_dir": str(root / "engines")},
        "serve": {"http_port": http, "grpc_port": grpc, "metrics_port": metrics, "openai_port": openai,
                  "repository": str(root / "model_repository")},
        "workdir": str(root / "work")}))
    spec = load_spec(path)
    layout = Layout.from_spec(spec)
    repository.render(build(spec).engine_dir, spec, layout.repository)
    # the server inherits the environment: one OpenMP thread, as the tests' own engines use
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("OMP_NUM_THREADS", "1")
        server.start_local(spec, layout.repository, layout)
    try:
        yield path
    finally:
        server.stop_local(layout)


def test_bench_baseline_against_a_real_server(served_spec, tmp_path):
    out = tmp_path / "report"
    result = CliRunner().invoke(main, ["bench", "-c", str(served_spec), "--baseline", "--concurrency", "1,2",
                                       "--num-prompts", "3", "--max-tokens", "12", "--out", str(out)])
    assert result.exit_code == 0, result.output
    assert "via triton 127.0.0.1:" in result.output and "speculative / baseline" in result.output
    report = json.loads((out / "bench.json").read_text())
    assert [(r["variant"], r["max_concurrency"], r["completed"], r["failed"]) for r in report["results"]] == [
        ("speculative", 1, 3, 0), ("baseline", 1, 3, 0), ("speculative", 2, 4, 0), ("baseline", 2, 4, 0)]
    spec_result = report["results"][0]
    assert spec_result["spec_decode_num_drafts"] > 0
    # responses carry totals only; positions come from the server's counters for this cell
    assert spec_result["spec_decode_source"] == "server counters"
    assert len(spec_result["spec_decode_per_position_acceptance_rates"]) >= 1
    # the load policy's steps belong to the cell that ran them: a block's last steps are reported
    # after its last response, so its counters are read once the server says it is idle (and the
    # server reports idle -> busy at once, issue 71). Every speculative cell records what the policy
    # chose for each of its steps, "off" included when a loaded machine makes drafting a loss; a
    # baseline cell has none. The one way out: a read that found the server still busy after
    # bench's wait, which the cell records (server_counters_unsettled_reads) and bench prints.
    for r in report["results"]:
        steps, unsettled = r.get("engine_steps_by_draft"), r.get("server_counters_unsettled_reads")
        if r["variant"] == "speculative":
            assert (steps and sum(steps.values()) > 0) or unsettled, (r["max_concurrency"], steps)
        else:
            assert steps is None or unsettled, (r["max_concurrency"], steps)
    assert [r["variant"] for r in report["results"]] == ["speculative", "baseline"] * 2
    # counters are diffed over the measured run: the 2 warm-up requests before it are not counted
    inferences = sum(v for k, v in report["server_counters"].items() if k.startswith("nv_inference_count"))
    assert inferences == 14                       # 3 + 3 at concurrency 1, 4 + 4 at 2 (both slots kept busy)
    # greedy through Triton is lossless: same token count per prompt with and without speculation
    records = [json.loads(line) for line in (out / "requests.jsonl").read_text().splitlines()]
    tokens = {(r["variant"], r["concurrency"], r["prompt_index"]): r["output_tokens"] for r in records}
    assert all(tokens[("speculative", c, i)] == tokens[("baseline", c, i)] for c in (1, 2) for i in range(3))
    assert all(r["ttft_s"] > 0 and r["ttft_s"] <= r["e2e_s"] for r in records)
    for png in ("throughput.png", "acceptance.png"):
        assert (out / png).read_bytes()[:8] == PNG_MAGIC


def test_bench_says_when_it_cannot_read_the_servers_counters(served_spec, tmp_path):
    """A server whose metrics are not where bench looks (another --url's port, a firewall) still
    benches, and the output says what is missing and how to point bench at the metrics."""
    from trtspec.spec.loading import load_spec

    spec = load_spec(served_spec)
    (nowhere,) = _free_ports(1)
    runs = {}
    for name, metrics in (("unread", f"http://127.0.0.1:{nowhere}/metrics"),
                          ("read", f"http://127.0.0.1:{spec.serve.metrics_port}/metrics")):
        out = tmp_path / name
        result = CliRunner().invoke(main, ["bench", "-c", str(served_spec), "--url", f"127.0.0.1:{spec.serve.grpc_port}",
                                           "--metrics-url", metrics, "--concurrency", "1", "--num-prompts", "2",
                                           "--max-tokens", "6", "--out", str(out)])
        assert result.exit_code == 0, result.output
        runs[name] = (result.output, json.loads((out / "bench.json").read_text()))
    output, report = runs["unread"]
    assert f"no server counters at http://127.0.0.1:{nowhere}/metrics" in output and "--metrics-url" in output
    assert f"server counters: none read from http://127.0.0.1:{nowhere}/metrics" in " ".join(output.split())
    assert report["server_counters"] is None and report["metadata"]["metrics_url"].endswith(f":{nowhere}/metrics")
    assert report["results"][0]["completed"] == 2
    output, report = runs["read"]
    assert "no server counters" not in output and "none read from" not in output
    assert report["server_counters"] and "engine_steps_by_draft" in report["results"][0]


def test_serving_overhead_triton_over_in_process(served_spec, tmp_path):
    from trtspec.spec.loading import load_spec

    spec = load_spec(served_spec)
    engine = f"{spec.build.output_dir}/tiny-ngram-cpu"
    out = tmp_path / "overhead"
    result = CliRunner().invoke(main, ["bench", "-c", str(served_spec), "--url", f"127.0.0.1:{spec.serve.grpc_port}",
                                       "--engine", engine, "--concurrency", "1", "--num-prompts", "2",
                                       "--max-tokens", "8", "--out", str(out)])
    assert result.exit_code == 0, result.output
    assert "triton / in-process" in result.output
    report = json.loads((out / "bench.json").read_text())
    assert [r["variant"] for r in report["results"]] == ["triton", "in-process"]
    (row,) = report["speedup"]
    triton, local = report["results"]
    assert row["output_throughput_speedup"] == pytest.approx(triton["output_throughput"] / local["output_throughput"])


def test_bench_from_inside_an_event_loop_takes_the_thread_pool(served_spec):
    """A caller already running asyncio (a notebook, an async service) cannot start another loop:
    its blocks go through the thread pool, with the same answers as the event-loop client's."""
    import asyncio

    from trtspec.bench.load import run_bench
    from trtspec.bench.targets import TritonTarget
    from trtspec.prompts import Prompt
    from trtspec.spec.loading import load_spec

    spec = load_spec(served_spec)
    target = TritonTarget(f"127.0.0.1:{spec.serve.grpc_port}",
                          metrics_url=f"http://127.0.0.1:{spec.serve.metrics_port}/metrics")
    prompts = [Prompt(0, "What is the capital of France?"), Prompt(1, "1 2 3 4 5 6")]

    def answers(run) -> list:
        return sorted((r.prompt_index, r.output_tokens, r.error) for r in run.records)

    async def from_a_running_loop():
        return run_bench(target, prompts, [2], max_tokens=8, baseline=False, warmup=False)

    on_the_event_loop = run_bench(target, prompts, [2], max_tokens=8, baseline=False, warmup=False)
    in_threads = asyncio.run(from_a_running_loop())
    assert answers(in_threads) == answers(on_the_event_loop)
    assert len(in_threads.records) == 4 and all(r.error is None and r.output_tokens > 0 for r in in_threads.records)


def test_acceptance_by_category_and_length_through_the_openai_endpoint_equals_triton(served_spec, tmp_path):
    """An OpenAI-API answer counts no drafts, so bench through one runs each (category, bucket) alone
    and diffs the server's counters around it (trtspec.bench.phases); through Triton the answers
    count their drafts. Greedy at concurrency 1 every request drafts alike on both ways in, so each
    category's and each bucket's acceptance must be the same."""
    from trtspec.spec.loading import load_spec

    spec = load_spec(served_spec)
    sentence = "the quick brown fox jumps over the lazy dog. "
    prompts = tmp_path / "prompts.jsonl"
    prompts.write_text("".join(json.dumps({"prompt": p, "category": c}) + "\n" for p, c in (
        (sentence * 3, "copy"), ("What is the capital of France? The capital", "qa"), (sentence * 20, "copy"))))
    common = ["--raw", "--concurrency", "1", "--max-tokens", "12", "--prompts", str(prompts), "--json"]
    metrics = f"http://127.0.0.1:{spec.serve.metrics_port}/metrics"
    reports = {}
    for name, where in (("triton", ["--url", f"127.0.0.1:{spec.serve.grpc_port}"]),
                        ("openai", ["--openai-url", f"http://127.0.0.1:{spec.serve.openai_port}/v1",
                                    "--metrics-url", metrics])):
        result = CliRunner().invoke(main, ["bench", "-c", str(served_spec), *where, *common, "--out", str(tmp_path / name)])
        assert result.exit_code == 0, result.output
        reports[name] = json.loads(result.stdout)["report"]
    triton, openai = reports["triton"], reports["openai"]
    assert "phases" not in triton and len(openai["phases"]) == 3   # copy <=128, qa <=128, copy 129-256
    # the prompts' lengths were counted here with the engine's tokenizer (no probe) and equal the server's
    lengths = openai["prompt_lengths"]
    assert lengths["probe"] is False and "tokenizer" in lengths["source"], lengths
    assert lengths["checked_against_server"] == 3 and lengths["num_differ_from_server"] == 0, lengths
    # the phases' deltas add up to the run's (unless a read found the server still busy)
    unsettled = any(c.get("counters", {}).get("trtspec_bench:unsettled_reads") for p in openai["phases"]
                    for c in p["cells"])
    assert openai["phases_add_up"] or unsettled
    for key, name in (("by_category", "category"), ("by_context_length", "bucket")):
        mine, theirs = (report[key] if key == "by_category" else report[key]["rows"] for report in (openai, triton))
        assert [r[name] for r in mine] == [r[name] for r in theirs] and len(mine) == 2, (mine, theirs)
        for row, same in zip(mine, theirs, strict=True):
            assert row["spec_decode_source"] == "phase counters" and same["spec_decode_source"] == "responses"
            assert row["spec_decode_acceptance_length"] >= 1.0 and row["spec_decode_per_position_acceptance_rates"]
            if not row.get("server_counters_unsettled_reads"):
                assert row["spec_decode_acceptance_length"] == pytest.approx(same["spec_decode_acceptance_length"])
                assert row["spec_decode_acceptance_rate"] == pytest.approx(same["spec_decode_acceptance_rate"])
    # each answer's usage.completion_tokens_details, summed, against the server's counters over the run
    check = openai["acceptance_cross_check"]
    assert check["answers_draft_tokens"] is not None and check["answers_draft_tokens"] > 0, check
    if not unsettled:
        assert check["disagreement"] is None, check
        assert check["answers_draft_tokens"] == check["counters_draft_tokens"]
        assert check["answers_accepted_tokens"] == check["counters_accepted_tokens"]
    # the cell's drafts and positions are the server's counters' (as Triton's cell takes its positions)
    (cell,), (same,) = openai["results"], triton["results"]
    assert cell["spec_decode_source"] == same["spec_decode_source"] == "server counters"
    if not unsettled:
        assert cell["spec_decode_acceptance_length"] == pytest.approx(same["spec_decode_acceptance_length"])


@pytest.mark.parametrize("raw", [False, True], ids=["chat", "raw"])
def test_phase_prompt_lengths_counted_here_equal_the_servers(served_spec, raw):
    """A phased run (trtspec.bench.phases) counts each prompt's tokens with the engine's tokenizer,
    the chat template applied as the server applies it, instead of prefilling it with a one-token
    probe: the counts equal the prompt_tokens trtspec's OpenAI endpoint answers (the probe's)."""
    from trtspec.bench.openai_target import OpenAITarget
    from trtspec.bench.phases import PROBED, prompt_lengths
    from trtspec.client.prompting import token_counter
    from trtspec.prompts import Prompt
    from trtspec.spec.loading import load_spec

    spec = load_spec(served_spec)
    prompts = [Prompt(0, "What is the capital of France?", "qa"),
               Prompt(1, "the quick brown fox jumps over the lazy dog. " * 12, "copy")]
    target = OpenAITarget(f"http://127.0.0.1:{spec.serve.openai_port}/v1", spec.model_name,
                          [f"http://127.0.0.1:{spec.serve.metrics_port}/metrics"], raw=raw)
    try:
        probed = prompt_lengths(target, True, prompts, 0.0)    # no counter: a one-token request per prompt
        counter = token_counter(spec, raw)
        assert counter is not None  # the built engine's tokenizer
        target.count_prompt_tokens, target.prompt_tokens_source = counter, counter.describe()
        counted = prompt_lengths(target, True, prompts, 0.0)
    finally:
        target.close()
    assert probed.probed and probed.source == PROBED and not counted.probed
    assert ("chat template" in counted.source) is not raw
    assert all(n and n > 0 for n in probed.tokens.values()) and counted.tokens == probed.tokens

