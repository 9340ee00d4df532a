"""A real tritonserver on loopback serving the tiny cpu engine, called with tritonclient.

One server per module (conftest `served`). What must hold: streaming works; greedy text through
Triton equals the engine's in-process greedy output and the non-speculative output; 8 concurrent
streams are all correct; every bad request is refused with a message naming the problem while the
server keeps serving; the speculative counters rise; a client that goes away frees its sequence.
"""

from __future__ import annotations

import threading

import numpy as np
import pytest

from trtspec.client.metrics import metric_total
from trtspec.errors import ServerError

pytestmark = pytest.mark.e2e

PROMPTS = ["the quick brown fox jumps over the lazy dog. the quick brown fox",
           "What is the capital of France?",
           "def add(a, b):\n    return a + b\n",
           "1 2 3 4 5 6 7 8 9 10",
           "speculative decoding drafts tokens and the target verifies them",
           "the lazy dog",
           "Paris is the capital of",
           "11 12 13 14 15 16"]
MAX_TOKENS = 24


@pytest.fixture(scope="module")
def expected(served):
    """Greedy outputs of the same engine in-process: speculative and not (they must agree). The
    prompt read as plain text (chat=False): the server reads text_input as the stock model does."""
    from trtspec.runtime import load_engine

    _, _, engine_dir = served
    engine = load_engine(engine_dir)
    outputs = {}
    for prompt in PROMPTS:
        spec_text = engine.generate(prompt, max_new_tokens=MAX_TOKENS, temperature=0.0, speculative=True,
                                    chat=False).text
        plain_text = engine.generate(prompt, max_new_tokens=MAX_TOKENS, temperature=0.0, speculative=False,
                                     chat=False).text
        assert spec_text == plain_text, f"in-process speculative != plain for {prompt!r}"
        outputs[prompt] = spec_text
    return outputs


def test_streaming_infer_sends_pieces_then_a_final_with_stats(served, expected):
    _, client, _ = served
    events = list(client.stream(PROMPTS[0], max_tokens=MAX_TOKENS, temperature=0.0))
    assert len(events) > 1 and events[-1].final and not any(e.final for e in events[:-1])
    assert [e.time_s for e in events] == sorted(e.time_s for e in events)
    stats = events[-1].stats
    assert stats["finish_reason"] in ("length", "stop")
    assert stats["num_output_tokens"] >= 1 and stats["total_draft_tokens"] >= stats["total_accepted_draft_tokens"]
    assert "".join(e.text for e in events) == expected[PROMPTS[0]]


@pytest.mark.parametrize("stream", [True, False])
def test_greedy_through_triton_equals_in_process_and_non_speculative(served, expected, stream):
    _, client, _ = served
    for prompt in PROMPTS[:3]:
        speculative = client.generate(prompt, max_tokens=MAX_TOKENS, stream=stream)
        plain = client.generate(prompt, max_tokens=MAX_TOKENS, stream=stream, speculative=False)
        assert speculative["text"] == plain["text"] == expected[prompt]
        assert plain["total_draft_tokens"] == 0


def test_eight_concurrent_streaming_clients_all_correct(served, expected):
    _, client, _ = served
    results: dict[str, str] = {}
    errors: list[BaseException] = []

    def one(prompt: str) -> None:
        try:
            results[prompt] = "".join(e.text for e in client.stream(prompt, max_tokens=MAX_TOKENS))
        except BaseException as error:  # noqa: BLE001 - reported below
            errors.append(error)

    threads = [threading.Thread(target=one, args=(p,)) for p in PROMPTS]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=120)
    assert not errors, errors
    assert results == expected


def test_eight_streams_on_one_aio_channel_all_correct_and_errors_named(served, expected):
    """bench's client (trtspec.client.triton_aio): 8 requests at once on one channel and one event
    loop get the in-process greedy answers, each ending with a final event carrying the stats; a
    bad request raises ServerError with the server's message."""
    import asyncio

    from trtspec.client.triton_aio import AsyncStreams

    _, client, _ = served

    async def run() -> tuple[dict[str, list], str]:
        async with AsyncStreams(client) as streams:
            async def one(prompt: str) -> list:
                return [event async for event in streams.stream(prompt, max_tokens=MAX_TOKENS)]

            answers = await asyncio.gather(*(one(prompt) for prompt in PROMPTS))
            with pytest.raises(ServerError) as refused:
                await one_bad(streams)
        return dict(zip(PROMPTS, answers, strict=True)), str(refused.value)

    async def one_bad(streams) -> None:
        async for _ in streams.stream(PROMPTS[0], max_tokens=0):
            pass

    answers, refused = asyncio.run(run())
    assert {prompt: "".join(e.text for e in events) for prompt, events in answers.items()} == expected
    assert all(events[-1].final and not any(e.final for e in events[:-1]) for events in answers.values())
    assert all(events[-1].stats["num_output_tokens"] >= 1 for events in answers.values())
    assert "sampling_param_max_tokens: must be at least 1" in refused


def test_an_aio_stream_left_early_frees_its_sequence(served, expected):
    import asyncio

    from tests.serve.conftest import counted_as_cancelled
    from trtspec.client.triton_aio import AsyncStreams

    _, client, _ = served

    async def read_one_piece() -> None:
        async with AsyncStreams(client) as streams:
            events = streams.stream(PROMPTS[3], max_tokens=400, speculative=False)
            assert not (await events.__anext__()).final
            await events.aclose()   # cancels the gRPC call: the server sees the client go away

    assert counted_as_cancelled(lambda: asyncio.run(read_one_piece()),
                                lambda: metric_total(client.server_metrics(), "trtspec:num_requests_cancelled"))
    assert client.generate(PROMPTS[1], max_tokens=MAX_TOKENS)["text"] == expected[PROMPTS[1]]


BAD_REQUESTS = [
    ("empty text", {"prompt": ""}, "text_input: empty"),
    ("max_tokens zero", {"max_tokens": 0}, "sampling_param_max_tokens: must be at least 1"),
    ("max_tokens negative", {"max_tokens": -5}, "sampling_param_max_tokens: must be at least 1"),
    ("max_tokens over the limit", {"max_tokens": 100_000}, "max_seq_len"),
    ("temperature below zero", {"temperature": -0.5}, "sampling_param_temperature"),
    ("top_p zero", {"top_p": 0.0}, "sampling_param_top_p"),
    ("top_p above one", {"top_p": 1.5}, "sampling_param_top_p"),
    ("bytes not UTF-8", {"prompt": b"\xff\xfe\xfd"}, "not valid UTF-8"),
    ("unknown input", {"extra": {"no_such_input": np.array([1], dtype=np.int32)}}, "no_such_input"),
    ("prompt over max_input_len", {"prompt": "the quick brown fox " * 200}, "max_input_len"),
]


@pytest.mark.parametrize("case, overrides, message", BAD_REQUESTS, ids=[c[0] for c in BAD_REQUESTS])
def test_bad_request_is_refused_and_server_keeps_serving(served, expected, case, overrides, message):
    _, client, _ = served
    kwargs = {"prompt": "hello", "max_tokens": 8, **overrides}
    with pytest.raises(ServerError, match=message):
        client.generate(**kwargs)
    assert client.is_ready()
    assert client.generate(PROMPTS[1], max_tokens=MAX_TOKENS)["text"] == expected[PROMPTS[1]]


def test_metrics_show_speculative_counters_rising(served):
    _, client, _ = served
    names = ["trtspec:spec_decode_num_drafts", "trtspec:spec_decode_num_draft_tokens",
             "trtspec:spec_decode_num_accepted_tokens", "trtspec:spec_decode_num_accepted_tokens_per_pos"]
    from tests.serve.conftest import metrics_when
    from trtspec.bench.server_counters import steps_by_draft

    def steps_since(metrics: dict) -> dict | None:
        return steps_by_draft({key: value - before.get(key, 0) for key, value in metrics.items()})

    before = client.server_metrics()
    result = client.generate(PROMPTS[0], max_tokens=MAX_TOKENS)
    # the step counter reaches the server with the engine's next metrics update (metrics_when)
    after = metrics_when(client, lambda m: sum((steps_since(m) or {}).values()) >= result["num_drafts"])
    assert result["num_drafts"] > 0
    assert metric_total(after, names[0]) - metric_total(before, names[0]) == result["num_drafts"]
    assert metric_total(after, names[1]) - metric_total(before, names[1]) == result["total_draft_tokens"]
    assert metric_total(after, names[2]) - metric_total(before, names[2]) == result["total_accepted_draft_tokens"]
    assert metric_total(after, names[3]) - metric_total(before, names[3]) == result["total_accepted_draft_tokens"]
    assert any('position="0"' in key for key in after if key.startswith(names[3]))
    # a lone request drafts max_draft_len every step, so its steps are counted as chains in the
    # load policy's per-step counter; the engine ran at least one such step per draft
    steps = steps_since(after)
    assert steps is not None and set(steps) <= {"chain:1", "chain:2", "chain:3", "chain:4", "chain:5", "chain:6",
                                                "chain:7", "chain:8"}
    assert sum(steps.values()) >= result["num_drafts"]


def test_client_that_disconnects_mid_stream_frees_its_sequence(served, expected):
    from tests.serve.conftest import counted_as_cancelled

    _, client, _ = served

    def leave_a_stream() -> None:
        events = client.stream(PROMPTS[3], max_tokens=400, speculative=False)
        assert not next(events).final
        events.close()   # stop_stream(cancel_requests=True): the server sees the client go away

    assert counted_as_cancelled(leave_a_stream, lambda: metric_total(client.server_metrics(),
                                                                     "trtspec:num_requests_cancelled"))
    assert client.generate(PROMPTS[1], max_tokens=MAX_TOKENS)["text"] == expected[PROMPTS[1]]


def test_stream_interval_gathers_steps_into_fewer_responses(tmp_path, tiny_llama):
    """serve.stream_interval 3: the first tokens go out at once, then one response every 3 steps,
    the rest with the final flag; the pieces still add up to the whole answer."""
    from tests.serve.conftest import serving_tiny

    with serving_tiny(tmp_path, tiny_llama, stream_interval=3) as (_, client, _engine):
        whole = client.generate(PROMPTS[0], max_tokens=12, speculative=False)
        events = list(client.stream(PROMPTS[0], max_tokens=12, speculative=False))
    assert whole["num_output_tokens"] == 12 and whole["finish_reason"] == "length"
    assert "".join(event.text for event in events) == whole["text"]
    # one token a step (speculation off): responses after steps 1, 4, 7 and 10, then the final at 12
    assert [event.final for event in events] == [False] * 4 + [True]


def test_a_bfloat16_model_serves_its_engine_s_answers(tmp_path, tiny_llama):
    """model.dtype bfloat16 from the spec through build (engine.json) and Triton's model load to
    the bfloat16 kernels: the served greedy texts are the bfloat16 engine's in-process texts,
    speculative or not, and (for these prompts and this model, 64 tokens) not all the float32
    engine's: on the AVX-512 EPYC both part from float32 after 52-57 tokens."""
    import json

    from tests.serve.conftest import serving_tiny
    from trtspec.runtime import Engine, load_engine
    from trtspec.runtime.kernels import rowdot

    if rowdot.bfloat16_unavailable():
        pytest.skip(rowdot.bfloat16_unavailable())
    from transformers import AutoTokenizer

    from trtspec.client.prompting import Renderer

    prompts, tokens = [PROMPTS[1], PROMPTS[5]], 64
    turn = Renderer(AutoTokenizer.from_pretrained(tiny_llama), "tiny")  # as trtspec's clients send a prompt
    with serving_tiny(tmp_path, tiny_llama, model_fields={"dtype": "bfloat16"}) as (_, client, engine_dir):
        served = [[client.generate(turn(p), max_tokens=tokens, speculative=s)["text"] for p in prompts]
                  for s in (True, False)]
    assert json.loads((engine_dir / "engine.json").read_text())["runtime"]["dtype"] == "bfloat16"
    with load_engine(engine_dir) as engine:  # in process the engine templates the prompt itself
        assert served == [[engine.generate(p, max_new_tokens=tokens).text for p in prompts]] * 2
    with Engine.from_checkpoints(tiny_llama, mode="none") as exact:
        assert served[0] != [exact.generate(p, max_new_tokens=tokens).text for p in prompts]
