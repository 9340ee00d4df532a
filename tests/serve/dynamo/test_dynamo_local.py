"""`trtspec deploy --target dynamo` for real: NVIDIA Dynamo's frontend and KV router over two trtspec
workers (the tiny n-gram engine), plus one EAGLE-3 worker (a tiny seeded head) as a second model.

Dynamo's ZeroMQ publishers bind every interface, so the stack runs in a private network namespace:
`test_in_a_private_network_namespace` runs this file again under `unshare -rn` (loopback up; a pid
namespace too, so nothing outlives the run, even one killed by a timeout) with
TRTSPEC_DYNAMO_NETNS=1, and the tests below run only there, against one stack for the module. Each
engine step waits 10 ms (TRTSPEC_INJECT_STEP_DELAY_S) so that a 400-token answer is still streaming
when its worker is killed.
"""

from __future__ import annotations

import importlib.util
import json
import os
import shutil
import subprocess
import sys
import time
import urllib.error
import urllib.request
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

INSIDE = os.environ.get("TRTSPEC_DYNAMO_NETNS") == "1"
ROOT = Path(__file__).resolve().parents[3]
PROMPTS = ["the quick brown fox jumps over the lazy dog. the quick brown",
           "What is the capital of France? The capital",
           "def add(a, b):\n    return"]
UNSHARE = ["unshare", "-rn", "--pid", "--fork", "--mount-proc", "--kill-child"]
inside = pytest.mark.skipif(not INSIDE, reason="runs inside test_in_a_private_network_namespace's namespace")
pytestmark = pytest.mark.e2e


@pytest.mark.slow
@pytest.mark.timeout(2700)  # the whole file's run: ~3 min quiet, 9.5 at load 11, over 15 beside a CI run
@pytest.mark.skipif(INSIDE, reason="this is the namespace's own run")
def test_in_a_private_network_namespace():
    if importlib.util.find_spec("dynamo") is None or importlib.util.find_spec("dynamo.frontend") is None:
        pytest.skip("NVIDIA Dynamo is not installed (make dynamo)")
    if not (shutil.which("unshare") and shutil.which("ip")) or subprocess.run(
            [*UNSHARE, "true"], capture_output=True).returncode != 0:
        pytest.skip("no private network and pid namespace here (unshare -rn --pid failed)")
    inner = f'ip link set lo up && exec "{sys.executable}" -m pytest -q -x -p no:cacheprovider "{__file__}" -k "not private_network"'
    # its own pid namespace too: whatever the run leaves (a stack a killed run never stopped) dies with it
    result = subprocess.run([*UNSHARE, "sh", "-c", inner],
                            cwd=ROOT, capture_output=True, text=True,
                            timeout=2600, env={**os.environ, "TRTSPEC_DYNAMO_NETNS": "1"})
    assert result.returncode == 0, (result.stdout[-8000:] + result.stderr[-2000:])
    assert " passed" in result.stdout and " skipped" not in result.stdout, result.stdout[-3000:]


def _get(url: str) -> str:
    with urllib.request.urlopen(url, timeout=10) as response:
        return response.read().decode()


def _served(port: int) -> float:
    from trtspec.serve.dynamo.metrics import parse_served

    return parse_served(_get(f"http://127.0.0.1:{port}/metrics"))["requests"]


@pytest.fixture(scope="module")
def stack(tmp_path_factory, tiny_llama):
    import openai

    from tests.builders.conftest import make_eagle3_head
    from tests.serve.conftest import free_ports, make_spec
    from trtspec import subproc
    from trtspec.artifacts import Layout
    from trtspec.builders import build
    from trtspec.serve import deploy
    from trtspec.serve.dynamo import launcher

    root = tmp_path_factory.mktemp("dynamo")
    (port,) = free_ports(1)
    spec = make_spec(root / "ngram", tiny_llama, serve={"openai_port": port, "startup_timeout_s": 400})
    engine = build(spec).engine_dir
    make_eagle3_head(root / "eagle3" / "work" / "checkpoints" / "eagle3", tiny_llama)
    eagle_spec = make_spec(root / "eagle3", tiny_llama, mode="eagle3", name="tiny-eagle3")
    eagle_engine = build(eagle_spec).engine_dir
    layout = Layout.from_spec(spec)
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("TRTSPEC_INJECT_STEP_DELAY_S", "0.01")
        record = deploy.deploy(spec, engine, "dynamo", None)
        eagle_port = launcher.system_ports(eagle_spec)[0]
        eagle_pid = subproc.start(launcher.worker_command(eagle_spec, eagle_engine) + ["--component", "eagle"],
                                  log_path=root / "eagle-worker.log",
                                  env={**record["env"], "DYN_SYSTEM_PORT": str(eagle_port)})
    client = openai.OpenAI(base_url=f"http://127.0.0.1:{port}/v1", api_key="unused", timeout=120, max_retries=0)
    try:
        deadline = time.monotonic() + 400
        while "tiny-eagle3" not in {m.id for m in client.models.list().data}:
            assert subproc.is_running(eagle_pid) and time.monotonic() < deadline, (root / "eagle-worker.log").read_text()[-3000:]
            time.sleep(0.5)
        yield {"spec": spec, "engine": engine, "eagle_engine": eagle_engine, "layout": layout, "client": client,
               "ports": [w["system_port"] for w in record["workers"]], "eagle_port": eagle_port}
    finally:
        subproc.stop(eagle_pid, timeout=10)
        launcher.stop(layout)


_ENGINES: dict[Path, object] = {}


def _alone(engine_dir: Path, prompt: str, max_tokens: int):
    """The engine alone, in this process (loaded once per directory): (prompt ids, greedy result)."""
    from trtspec.runtime import load_engine

    engine = _ENGINES.get(engine_dir) or _ENGINES.setdefault(engine_dir, load_engine(engine_dir))
    ids = engine.encode(prompt, chat=False)
    return ids, engine.generate(ids, max_new_tokens=max_tokens)


@inside
@pytest.mark.parametrize("model", ["tiny", "tiny-eagle3"])
def test_greedy_answers_equal_the_engine_alone(stack, model):
    engine_dir = stack["engine"] if model == "tiny" else stack["eagle_engine"]
    for prompt in PROMPTS:
        ids, alone = _alone(engine_dir, prompt, 24)
        answer = stack["client"].completions.create(model=model, prompt=prompt, max_tokens=24, temperature=0)
        assert answer.usage.prompt_tokens == len(ids)
        assert answer.choices[0].text == alone.text
        assert answer.usage.completion_tokens == len(alone.token_ids)
        details = answer.usage.completion_tokens_details
        assert details.accepted_prediction_tokens == alone.stats.num_accepted_tokens
        assert details.rejected_prediction_tokens == alone.stats.num_draft_tokens - alone.stats.num_accepted_tokens
    if model == "tiny-eagle3":  # the head drafted (a random head: most drafts are refused)
        metrics = _get(f"http://127.0.0.1:{stack['eagle_port']}/metrics")
        assert "vllm:spec_decode_num_drafts_total" in metrics


@inside
def test_bad_requests_get_an_error_not_a_hang(stack):
    import openai

    with pytest.raises(openai.BadRequestError):
        stack["client"].completions.create(model="tiny", prompt="hi", max_tokens=-3)
    with pytest.raises(openai.NotFoundError):
        stack["client"].completions.create(model="no-such-model", prompt="hi", max_tokens=3)


@inside
def test_a_repeated_long_prefix_goes_to_the_worker_holding_it(stack):
    client, ports = stack["client"], stack["ports"]
    words = "the quick brown fox jumps over the lazy dog speculative decoding drafts tokens".split()
    for attempt in range(4):  # two long prompts at once: the router spreads them by load
        prefixes = [" ".join(words[(i * 7 + attempt * 3 + j) % len(words)] for j in range(120)) for i in range(2)]
        before = [_served(p) for p in ports]
        with ThreadPoolExecutor(2) as pool:
            list(pool.map(lambda p: client.completions.create(model="tiny", prompt=p, max_tokens=48, temperature=0),
                          prefixes))
        after = [_served(p) for p in ports]
        if after[0] - before[0] == 1 and after[1] - before[1] == 1:
            break
    else:
        pytest.fail("four pairs of concurrent requests never went one to each worker")
    time.sleep(1.0)  # the stored blocks reach the router
    for repeat in range(2):
        for prefix in prefixes:
            before = [_served(p) for p in ports]
            client.completions.create(model="tiny", prompt=prefix + f" one {repeat}", max_tokens=4, temperature=0)
            gained = [_served(p) - b for p, b in zip(ports, before, strict=True)]
            assert gained == ([1, 0] if prefix == prefixes[0] else [0, 1]) or gained == (
                [0, 1] if prefix == prefixes[0] else [1, 0]), gained
    # each prefix went back where it was first served: both workers served, each its own prefix
    frontend = _get(f"http://127.0.0.1:{stack['spec'].serve.openai_port}/metrics")
    assert "dynamo_frontend" in frontend


@inside
def test_workers_publish_vllm_named_speculative_counters(stack):
    names = ["vllm:spec_decode_num_drafts_total", "vllm:spec_decode_num_draft_tokens_total",
             "vllm:spec_decode_num_accepted_tokens_total", "vllm:spec_decode_num_accepted_tokens_per_pos_total"]
    texts = [_get(f"http://127.0.0.1:{p}/metrics") for p in stack["ports"]]
    for text in texts:
        assert all(name in text for name in names), text[-2000:]
    from trtspec.serve.dynamo.metrics import parse_served

    assert sum(parse_served(t)["accepted_tokens"] for t in texts) > 0  # n-gram drafts were accepted


@inside
def test_infer_and_deploy_status_reach_the_stack(stack, tmp_path):
    import yaml
    from click.testing import CliRunner

    from trtspec.cli import main

    config = tmp_path / "trtspec.yaml"
    config.write_text(yaml.safe_dump(stack["spec"].model_dump(mode="json")))
    result = CliRunner().invoke(main, ["infer", "-c", str(config), "--raw", "--json", "--max-tokens", "16",
                                       PROMPTS[1]])
    assert result.exit_code == 0, result.output
    answer = json.loads(result.output)
    alone = _alone(stack["engine"], PROMPTS[1], 16)[1]
    assert answer["text"] == alone.text and answer["num_output_tokens"] == len(alone.token_ids)
    status = CliRunner().invoke(main, ["deploy", "status", "-c", str(config), "--json"])
    assert status.exit_code == 0, status.output
    workers = json.loads(status.output)["workers"]
    assert len(workers) == 2 and all(w["served"]["requests"] >= 1 for w in workers)  # both served


@inside
def test_a_worker_killed_mid_stream_leaves_nothing_hanging(stack):
    import openai

    from trtspec import subproc
    from trtspec.serve.dynamo import launcher

    client, layout = stack["client"], stack["layout"]
    stream = client.completions.create(model="tiny", prompt=PROMPTS[0], max_tokens=400, temperature=0, stream=True)
    pieces = [next(iter(stream)).choices[0].text]
    status = launcher.status(layout)
    busy = [w for w in status["workers"] if (w["served"] or {}).get("running")]
    assert len(busy) == 1, status["workers"]
    victim = busy[0]
    subproc.kill(victim["pid"])
    started = time.monotonic()
    outcome = "completed"
    try:
        for chunk in stream:
            pieces.append(chunk.choices[0].text)
    except openai.APIError as error:  # migration gave up: an error, at once
        outcome = f"error: {error}"
    assert time.monotonic() - started < 120
    print(f"killed worker {victim['index']} mid-stream: {outcome} after {time.monotonic() - started:.1f} s")
    if outcome == "completed":  # migrated: the other worker replayed prompt + tokens, greedy goes on the same
        assert "".join(pieces) == _alone(stack["engine"], PROMPTS[0], 400)[1].text
    with ThreadPoolExecutor(8) as pool:
        answers = list(pool.map(lambda i: client.completions.create(model="tiny", prompt=PROMPTS[i % 3],
                                                                    max_tokens=16, temperature=0), range(8)))
    assert all(a.choices[0].finish_reason in ("length", "stop") for a in answers)
    deadline = time.monotonic() + 400  # the supervisor starts it again; it loads and registers
    while time.monotonic() < deadline:
        status = launcher.status(layout)
        worker = status["workers"][victim["index"]]
        if status["ready"] and worker["restarts"] >= 1 and worker["pid"] != victim["pid"] and worker["served"]:
            break
        time.sleep(1.0)
    else:
        pytest.fail(f"worker {victim['index']} did not return: {json.dumps(status)[:2000]}")
    assert status["registered_workers"] >= 2



def _config(tmp_path: Path, spec) -> Path:
    """The spec as a file, and beside it prompts.jsonl: the module's prompts (n-gram drafts find matches)."""
    import yaml

    config = tmp_path / "trtspec.yaml"
    config.write_text(yaml.safe_dump(spec.model_dump(mode="json")))
    (tmp_path / "prompts.jsonl").write_text("".join(json.dumps({"prompt": p}) + "\n" for p in PROMPTS))
    return config


@inside
def test_errors_come_back_as_one_line_whatever_the_shape(stack):
    """Dynamo 1.6.1 answers a bad request flat ({"message", "type", "code"}), not OpenAI's {"error": {...}}
    (docs/DEPLOY.md); trtspec's client (infer, bench) turns either into one line."""
    from trtspec.errors import ServerError
    from trtspec.serve.dynamo import ask

    url = f"http://127.0.0.1:{stack['spec'].serve.openai_port}/v1"
    request = urllib.request.Request(f"{url}/completions", method="POST", headers={"Content-Type": "application/json"},
                                     data=json.dumps({"model": "tiny", "prompt": "hi", "max_tokens": -3}).encode())
    with pytest.raises(urllib.error.HTTPError) as answer:
        urllib.request.urlopen(request, timeout=30)
    body = json.loads(answer.value.read())
    assert answer.value.code == 400 and set(body) == {"message", "type", "code"}, body  # the flat shape
    for model, max_tokens, status in (("tiny", -3, 400), ("no-such-model", 3, 404)):
        with pytest.raises(ServerError) as error:
            list(ask.stream(url, model, "hi", raw=True, max_tokens=max_tokens, temperature=0, top_p=None, seed=None))
        line = str(error.value)
        assert f"answered {status}: " in line and "\n" not in line and "{" not in line, line


@inside
def test_bench_measures_the_stack_through_its_openai_frontend(stack, tmp_path):
    from click.testing import CliRunner

    from trtspec.cli import main

    config = _config(tmp_path, stack["spec"])
    refused = CliRunner().invoke(main, ["bench", "-c", str(config), "--baseline"])
    assert refused.exit_code != 0 and "no --baseline" in refused.output, refused.output
    # two categories, one of them in two context-length buckets (~15 and ~150 tokens); every prompt's
    # end repeats its start, so n-gram lookup drafts in every phase
    sentence = "the quick brown fox jumps over the lazy dog. "
    (tmp_path / "categories.jsonl").write_text("".join(json.dumps({"prompt": p, "category": c}) + "\n" for p, c in (
        (PROMPTS[0], "copy"), ("one two three four. one two three four. one two three", "count"),
        (sentence * 20, "copy"))))
    result = CliRunner().invoke(main, ["bench", "-c", str(config), "--raw", "--concurrency", "1,2", "--max-tokens",
                                       "16", "--prompts", str(tmp_path / "categories.jsonl"),
                                       "--json", "--out", str(tmp_path / "bench")])
    assert result.exit_code == 0, result.output
    report = json.loads(result.stdout)["report"]
    assert report["metadata"]["target"].startswith("dynamo http://127.0.0.1") and report["metadata"]["workers"] == 2
    assert "completion_tokens_details" in report["metadata"]["acceptance_source"]
    # each prompt's length counted with the engine's tokenizer (no probe), equal to the frontend's prompt_tokens
    lengths = report["prompt_lengths"]
    assert lengths["probe"] is False and lengths["checked_against_server"] == 3, lengths
    assert lengths["num_differ_from_server"] == 0, lengths
    # and a chat turn: the frontend applies the target's chat template as trtspec counts it
    from trtspec.client.prompting import token_counter

    counter = token_counter(stack["spec"], raw=False)
    chat = stack["client"].chat.completions.create(model="tiny", messages=[{"role": "user", "content": PROMPTS[1]}],
                                                   max_tokens=1, temperature=0)
    assert counter is not None and chat.usage.prompt_tokens == counter(PROMPTS[1])
    cells = report["results"]
    assert [c["max_concurrency"] for c in cells] == [1, 2] and all(c["failed"] == 0 for c in cells), cells
    for cell in cells:
        assert cell["output_throughput"] > 0 and cell["median_ttft_ms"] > 0  # tokens/s and TTFT
        assert 0 < cell["total_output_tokens"] <= 16 * cell["completed"]
        # drafts and positions from the workers' vllm:spec_decode_* counters, summed over workers
        assert cell["spec_decode_source"] == "server counters" and cell["spec_decode_num_drafts"] > 0
        assert cell["spec_decode_acceptance_length"] >= 1.0
        assert cell["spec_decode_per_position_acceptance_rates"] is not None
    from trtspec.client.metrics import metric_total

    counters = report["server_counters"]
    assert metric_total(counters, "trtspec:spec_decode_num_drafts") > 0, sorted(counters)[:20]
    # per category and per bucket: each (category, bucket) ran alone, its counters diffed (bench.phases)
    phases = report["phases"]
    assert [(p["category"], p["bucket"]) for p in phases] == [("copy", "<=128"), ("count", "<=128"),
                                                               ("copy", "129-256")], phases
    assert all(metric_total(p["counters"], "trtspec:spec_decode_num_drafts") > 0 for p in phases)
    unsettled = any(c["counters"].get("trtspec_bench:unsettled_reads") for p in phases for c in p["cells"])
    spec_keys = {k for k in counters if k.startswith("trtspec:spec_decode_")}
    if not unsettled:  # the phases' deltas add up to the run's, and the answers' usage to the counters
        assert report["phases_add_up"] is True
        assert {k: sum(p["counters"].get(k, 0) for p in phases) for k in spec_keys} == {k: counters[k] for k in spec_keys}
        assert report["acceptance_cross_check"]["disagreement"] is None, report["acceptance_cross_check"]
        assert report["acceptance_cross_check"]["answers_accepted_tokens"] == metric_total(
            counters, "trtspec:spec_decode_num_accepted_tokens")
    rows = report["by_category"] + report["by_context_length"]["rows"]
    assert {(r["max_concurrency"], r["category"]) for r in report["by_category"]} == {
        (c, name) for c in (1, 2) for name in ("copy", "count")}
    assert {r["bucket"] for r in report["by_context_length"]["rows"]} == {"<=128", "129-256"}
    for row in rows:  # alone on its worker a request drafts (at 2 the load policy may choose not to)
        assert row["spec_decode_source"] == "phase counters" and "spec_decode_acceptance_length" in row, row
        if row["max_concurrency"] == 1:
            assert row["spec_decode_acceptance_length"] >= 1.0 and row["spec_decode_per_position_acceptance_rates"]


@inside
def test_tune_served_deploys_each_candidate_as_a_dynamo_stack(stack, tmp_path, tiny_llama):
    import yaml
    from click.testing import CliRunner

    from tests.serve.conftest import free_ports, make_spec
    from trtspec.artifacts import Layout
    from trtspec.cli import main
    from trtspec.serve.dynamo import launcher

    (port,) = free_ports(1)  # a second stack beside the module's: its own workdir and port, one worker
    spec = make_spec(tmp_path, tiny_llama, serve={"openai_port": port, "startup_timeout_s": 400,
                                                   "dynamo": {"workers": 1, "router": "round-robin"}})
    config = _config(tmp_path, spec)
    result = CliRunner().invoke(main, ["tune", "-c", str(config), "--served", "--target", "dynamo", "--draft-lens", "2",
                                       "--concurrency", "1", "--prompts", str(tmp_path / "prompts.jsonl"),
                                       "--num-prompts", "1", "--max-tokens", "8", "--raw",
                                       "--json", "--out", str(tmp_path / "tune")])
    assert result.exit_code == 0, result.output
    summary = json.loads(result.stdout)
    assert summary["target"] == "dynamo" and summary["deployments"] == [0, 2]
    (row,) = summary["rows"]
    assert row["max_draft_len"] == 2 and row["output_throughput"] > 0 and row["speedup"] > 0
    assert summary["prompts_sent"] == "completion prompt as given"  # through the frontend's OpenAI API
    assert yaml.safe_load(config.read_text())["speculative"]["max_draft_len"] == 2
    assert not launcher.record_path(Layout.from_spec(spec)).exists()  # each stack stopped
