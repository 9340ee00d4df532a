"""The OpenAI-compatible API `trtspec deploy` serves (serve.openai_port), driven by the official
`openai` Python package against a real tritonserver serving the tiny cpu engine.

Streaming and not, chat and completions, usage counts, the speculative-decoding extension field,
refusals in OpenAI's error shape, and greedy output equal token for token to the same request
through tritonclient (trtspec's client).
"""

from __future__ import annotations

import json
import time
import urllib.request

import pytest

pytestmark = pytest.mark.e2e
PROMPT = "What is the capital of France?"


@pytest.fixture(scope="module")
def openai_served(tmp_path_factory, tiny_llama):
    from tests.serve.conftest import free_ports, serving_tiny

    (port,) = free_ports(1)
    # max_seq_len 1024 (the tiny model's positions): the cancel test needs a long answer, and 2 ms after
    # each step (TRTSPEC_INJECT_STEP_DELAY_S) makes its 1,000 tokens last 2 s or more, longer than a
    # loaded machine takes to deliver the cancel (0.4 s without: a busy machine can finish first)
    with serving_tiny(tmp_path_factory.mktemp("openai"), tiny_llama, openai_port=port,
                      build_fields={"max_seq_len": 1024},
                      env={"TRTSPEC_INJECT_STEP_DELAY_S": "0.002"}) as (spec, client, engine):
        from openai import OpenAI

        api = OpenAI(base_url=f"http://127.0.0.1:{port}/v1", api_key="unused", max_retries=0, timeout=120)
        yield spec, client, api


def test_models_health_and_status(openai_served):
    from trtspec.artifacts import Layout
    from trtspec.serve import server

    spec, _, api = openai_served
    assert [m.id for m in api.models.list().data] == ["tiny", "tensorrt_llm"]  # the local source path is not listed
    with urllib.request.urlopen(f"http://127.0.0.1:{spec.serve.openai_port}/health", timeout=10) as response:
        assert response.status == 200 and json.loads(response.read()) == {"status": "ok"}
    status = server.status(Layout.from_spec(spec), probe=False)
    assert status["ready"] and status["openai"] == {"port": spec.serve.openai_port, "running": True, "health": 200}
    from trtspec.cli.deploy_cmd import _status_line

    assert f"openai 127.0.0.1:{spec.serve.openai_port} (serving)" in _status_line(status)


def test_chat_greedy_equals_tritonclient_with_usage_and_speculative_stats(openai_served):
    _, client, api = openai_served
    answer = api.chat.completions.create(model="tiny", messages=[{"role": "user", "content": PROMPT}],
                                         temperature=0, max_completion_tokens=12)
    # the chat is one user turn through the template: what chat_template: true asks of text_input
    direct = client.generate(PROMPT, max_tokens=12, temperature=0.0, extra={"chat_template": True})
    assert answer.choices[0].message.content == direct["text"] and answer.choices[0].message.role == "assistant"
    assert answer.choices[0].finish_reason == direct["finish_reason"] == "length"
    assert answer.usage.completion_tokens == direct["num_output_tokens"] == 12
    assert answer.usage.prompt_tokens > 0 and answer.usage.total_tokens == answer.usage.prompt_tokens + 12
    stats = answer.model_extra["speculative_decoding"]
    assert stats["num_drafts"] == direct["num_drafts"] and stats["num_accepted_tokens"] == \
        direct["total_accepted_draft_tokens"]
    # OpenAI's names for the same counts: accepted + rejected = the request's draft tokens
    details = answer.usage.completion_tokens_details
    assert direct["total_draft_tokens"] > 0, direct  # ngram on this prompt drafts, or the check below is empty
    assert details.accepted_prediction_tokens == direct["total_accepted_draft_tokens"]
    assert details.accepted_prediction_tokens + details.rejected_prediction_tokens == direct["total_draft_tokens"]
    # without speculation nothing is drafted: 0 and 0
    plain = api.chat.completions.create(model="tiny", messages=[{"role": "user", "content": PROMPT}], temperature=0,
                                        max_completion_tokens=12, extra_body={"speculative": False})
    assert plain.usage.completion_tokens_details.accepted_prediction_tokens == 0
    assert plain.usage.completion_tokens_details.rejected_prediction_tokens == 0


def test_chat_stream_with_usage_chunk_equals_the_whole_answer(openai_served):
    _, _, api = openai_served
    messages = [{"role": "system", "content": "Answer briefly."}, {"role": "user", "content": PROMPT}]
    whole = api.chat.completions.create(model="tiny", messages=messages, temperature=0, max_tokens=10)
    chunks = list(api.chat.completions.create(model="tiny", messages=messages, temperature=0, max_tokens=10,
                                              stream=True, stream_options={"include_usage": True}))
    assert chunks[0].choices[0].delta.role == "assistant"
    text = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
    assert text == whole.choices[0].message.content
    finish = [c for c in chunks if c.choices and c.choices[0].finish_reason]
    assert len(finish) == 1 and "speculative_decoding" in finish[0].model_extra
    assert chunks[-1].choices == [] and chunks[-1].usage.completion_tokens == whole.usage.completion_tokens
    assert chunks[-1].usage.prompt_tokens == whole.usage.prompt_tokens
    # the usage chunk's draft tokens are the answer's own, counted once
    streamed, counted = chunks[-1].usage.completion_tokens_details, finish[0].model_extra["speculative_decoding"]
    assert streamed.accepted_prediction_tokens == counted["num_accepted_tokens"]
    assert streamed.accepted_prediction_tokens + streamed.rejected_prediction_tokens == counted["num_draft_tokens"]


def test_completions_plain_text_stream_and_not_equal_tritonclient(openai_served):
    _, client, api = openai_served
    whole = api.completions.create(model="tiny", prompt="The capital of France is", temperature=0, max_tokens=8,
                                   seed=3)
    direct = client.generate("The capital of France is", max_tokens=8, temperature=0.0,
                             extra={"chat_template": False})
    assert whole.choices[0].text == direct["text"] and whole.usage.completion_tokens == 8
    streamed = api.completions.create(model="tiny", prompt="The capital of France is", temperature=0, max_tokens=8,
                                      stream=True)
    assert "".join(c.choices[0].text for c in streamed) == whole.choices[0].text


def test_a_system_prompt_is_prefilled_once_then_copied(openai_served, tiny_llama):
    """Chat requests that share a system message: the second copies the first's kept prompt rows
    (trtspec.runtime.cache.prefix_reuse) for every token they share, and answers as it would alone."""
    from transformers import AutoTokenizer

    from tests.serve.conftest import metrics_when
    from trtspec.chat import conversation_ids
    from trtspec.client.metrics import metric_total

    _, client, api = openai_served
    system = {"role": "system", "content": "You answer questions about the weather in one short sentence, "
                                           "politely, and never mention that you are a model."}
    turns = [[system, {"role": "user", "content": question}] for question in ("Is it raining?", "Will it snow?")]
    tokenizer = AutoTokenizer.from_pretrained(str(tiny_llama))
    first, second = (conversation_ids(tokenizer, t, add_generation_prompt=True) for t in turns)
    shared = next(i for i, (a, b) in enumerate(zip(first, second, strict=False)) if a != b)
    hits, answers = [], []
    for messages in turns + turns[1:]:   # the second conversation twice: then all of it is kept
        before = client.server_metrics()
        answers.append(api.chat.completions.create(model="tiny", messages=messages, temperature=0,
                                                   max_completion_tokens=8).choices[0].message.content)
        queried = metric_total(before, "trtspec:prefix_cache_queries")   # this prompt's tokens counted:
        after = metrics_when(client, lambda m, q=queried: metric_total(m, "trtspec:prefix_cache_queries") > q)
        hits.append(metric_total(after, "trtspec:prefix_cache_hits") - metric_total(before, "trtspec:prefix_cache_hits"))
    assert shared > 16 and hits[0] < shared <= hits[1] < hits[2] == len(second) - 1
    assert answers[1] == answers[2]   # the same answer whatever was copied


def test_stop_string_ends_the_answer_before_it(openai_served):
    _, _, api = openai_served
    full = api.completions.create(model="tiny", prompt="Say something", temperature=0, max_tokens=12)
    text = full.choices[0].text
    stop = text[len(text) // 2:len(text) // 2 + 2]
    if not stop.strip():
        pytest.skip(f"the tiny model's answer has no stop string to pick: {text!r}")
    cut = api.completions.create(model="tiny", prompt="Say something", temperature=0, max_tokens=12, stop=[stop])
    assert cut.choices[0].finish_reason == "stop" and cut.choices[0].text == text[:text.index(stop)]


@pytest.mark.parametrize("arguments, status, words", [
    ({"n": 2}, 400, "n: only 1 is served"),
    ({"temperature": 5}, 400, "temperature: must be in [0, 2]"),
    ({"presence_penalty": 0.5}, 400, "presence_penalty: not served (the cpu engine's sampler applies no penalties)"),
    ({"model": "gpt-4o"}, 404, "model 'gpt-4o' does not exist"),
    ({"max_completion_tokens": 100000}, 400, "sampling_param_max_tokens: must be below the engine's max_seq_len"),
])
def test_bad_requests_get_openai_errors_and_the_server_serves_on(openai_served, arguments, status, words):
    import openai

    _, _, api = openai_served
    request = {"model": "tiny", "messages": [{"role": "user", "content": "hi"}], "max_completion_tokens": 2,
               **arguments}
    with pytest.raises(openai.APIStatusError) as raised:
        api.chat.completions.create(**request)
    assert raised.value.status_code == status
    body = raised.value.body
    assert words in body["message"] and body["type"] == "invalid_request_error", body
    assert api.chat.completions.create(model="tiny", messages=[{"role": "user", "content": "hi"}],
                                       max_completion_tokens=2).usage.completion_tokens >= 1


def test_a_client_that_leaves_a_stream_cancels_its_request_on_the_server(openai_served):
    from tests.serve.conftest import counted_as_cancelled
    from trtspec.client.metrics import fetch_metrics

    spec, client, api = openai_served

    def leave_a_stream() -> None:
        stream = api.completions.create(model="tiny", prompt="Count to a thousand", max_tokens=1000, stream=True,
                                        temperature=0)
        next(iter(stream))
        stream.close()

    def cancelled() -> float:
        return sum(v for k, v in fetch_metrics(client.metrics_url).items()
                   if k.startswith("trtspec:num_requests_cancelled"))

    assert counted_as_cancelled(leave_a_stream, cancelled)


def test_supervisor_restarts_a_dead_frontend_and_stop_ends_it(openai_served):
    """Fault: the OpenAI frontend process dies (SIGKILL).
    Behaviour: the supervisor sees it within a watch interval, ends tritonserver, starts both
    again (serve.restart on-failure) and the API answers; `deploy stop` then ends the frontend."""
    from trtspec import subproc
    from trtspec.artifacts import Layout
    from trtspec.serve import server

    spec, _, api = openai_served
    layout = Layout.from_spec(spec)
    first = server.read_record(layout)["openai_pid"]
    subproc.kill(first)
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        record = server.read_record(layout) or {}
        if record.get("state") == "ready" and record.get("openai_pid") not in (None, first):
            break
        time.sleep(0.5)
    assert record.get("state") == "ready" and record["restarts"] == 1, record
    assert "the OpenAI frontend" in record["failures"][-1]["reason"]
    assert api.completions.create(model="tiny", prompt="hello", max_tokens=2, temperature=0).usage.completion_tokens == 2
    second = record["openai_pid"]
    assert server.stop_local(layout)["stopped"] and not subproc.is_running(second)


def test_a_full_server_answers_503_server_busy(tmp_path, tiny_llama, monkeypatch):
    """One batch slot and no queue (build.max_batch_size 1, serve.max_queue_size 0): while one
    stream runs, the next request is refused at once with OpenAI's 503, and served after."""
    import openai

    from tests.serve.conftest import free_ports, make_spec
    from trtspec import repository
    from trtspec.artifacts import Layout
    from trtspec.builders import build
    from trtspec.serve import server

    (port,) = free_ports(1)
    spec = make_spec(tmp_path, tiny_llama, build={"max_batch_size": 1, "max_seq_len": 1024},
                     serve={"openai_port": port, "max_queue_size": 0})
    layout = Layout.from_spec(spec)
    repository.render(build(spec).engine_dir, spec, layout.repository)
    # 2 ms after each step: the 1,000-token stream lasts 2 s or more, so on a loaded machine the
    # second request still finds it running (the server inherits the environment)
    monkeypatch.setenv("TRTSPEC_INJECT_STEP_DELAY_S", "0.002")
    server.start_local(spec, layout.repository, layout)
    try:
        api = openai.OpenAI(base_url=f"http://127.0.0.1:{port}/v1", api_key="unused", max_retries=0, timeout=120)
        refused = None
        for _ in range(5):
            # The stream's 1,000 tokens take 2 s or more (half a second without the step delay), but
            # the next request may still come after it ended; with one slot and no queue it is then
            # served, which says the stream had ended: try again (five times at most, never passing
            # without a 503).
            running = api.completions.create(model="tiny", prompt="Count to a thousand", max_tokens=1000,
                                             stream=True, temperature=0)
            next(iter(running))
            try:
                api.completions.create(model="tiny", prompt="hello", max_tokens=2)
            except openai.APIStatusError as error:
                refused = error
            finally:
                running.close()
            if refused is not None:
                break
        assert refused is not None, "no request was refused while a stream ran, in five tries"
        assert refused.status_code == 503 and refused.body["code"] == "server_busy"
        assert refused.body["message"].startswith("server busy: 1 requests running and 0 queued")
        deadline = time.monotonic() + 30
        while True:  # the cancelled stream leaves the batch at its next step
            try:
                assert api.completions.create(model="tiny", prompt="hello", max_tokens=2, temperature=0).usage.completion_tokens == 2
                break
            except openai.APIStatusError:
                assert time.monotonic() < deadline
                time.sleep(0.2)
    finally:
        server.stop_local(layout)
