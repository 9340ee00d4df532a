"""bench's OpenAI-API target without a server: the workers' counters read back from the real exporter
(trtspec.serve.dynamo.metrics), summed and renamed for the report's parser; an answer's usage as
draft counts; an error answer, in Dynamo's flat shape or OpenAI's nested one, as one line. The
target against a real Dynamo stack runs in tests/serve/dynamo/test_dynamo_local.py."""

from __future__ import annotations

import pytest

from trtspec.bench.metrics import spec_counts_from_counters
from trtspec.bench.openai_target import renamed, spec_from_usage, summed
from trtspec.client.metrics import parse_prometheus


def _worker_samples(drafts: int, accepted_per_position: list[int], running: int = 0) -> dict[str, float]:
    """What one worker's /metrics says after one finished request with these counts."""
    from prometheus_client import generate_latest

    from trtspec.runtime.loop.stats import GenerationStats
    from trtspec.serve.dynamo.metrics import SpecMetrics

    metrics = SpecMetrics("tiny", 3)
    stats = GenerationStats(num_drafts=drafts, num_draft_tokens=3 * drafts, num_accepted_tokens=sum(accepted_per_position),
                            accepted_per_position=accepted_per_position)
    metrics.record(stats, prompt_tokens=10, generated=20, finish_reason="length", cache=(10, 4))
    metrics.running.labels("tiny").set(running)
    return renamed(parse_prometheus(generate_latest(metrics.registry).decode()))


def test_two_workers_counters_sum_into_the_names_the_report_reads():
    total = summed([_worker_samples(5, [4, 2, 1]), _worker_samples(3, [2, 1, 0], running=1)])
    counts = spec_counts_from_counters(total)
    assert counts is not None
    assert (counts.num_drafts, counts.num_draft_tokens, counts.num_accepted_tokens) == (8, 24, 10)
    assert counts.accepted_per_position == [6, 3, 1]
    assert total['trtspec:prefix_cache_hits{model_name="tiny"}'] == 8
    assert total['trtspec:num_requests_running{model_name="tiny"}'] == 1  # what the settle wait reads
    assert not any(key.startswith("vllm:") for key in total)


def test_usage_details_are_the_answers_draft_counts():
    counts = spec_from_usage({"accepted_prediction_tokens": 7, "rejected_prediction_tokens": 5})
    assert counts is not None and (counts.num_draft_tokens, counts.num_accepted_tokens, counts.num_drafts) == (12, 7, 0)
    assert spec_from_usage({"accepted_prediction_tokens": None}) is None  # a server without the details


@pytest.mark.parametrize("body", [
    {"message": "Validation: max_tokens must be positive", "type": "Bad Request", "code": 400},  # Dynamo 1.6.1
    {"error": {"message": "Validation: max_tokens must be positive", "type": "invalid_request_error",
               "param": "max_tokens", "code": None}},  # OpenAI's shape
])
def test_an_error_answer_becomes_one_line_in_either_shape(body):
    import httpx
    import openai

    from trtspec.errors import ServerError
    from trtspec.serve.dynamo.ask import error_line

    request = httpx.Request("POST", "http://127.0.0.1:1/v1/completions")
    error = openai.OpenAI(base_url="http://127.0.0.1:1/v1", api_key="x")._make_status_error_from_response(
        httpx.Response(400, json=body, request=request))
    line = error_line(error, "http://127.0.0.1:1/v1")
    assert isinstance(line, ServerError)
    assert str(line).startswith("http://127.0.0.1:1/v1 answered 400: Validation: max_tokens must be positive; ")
    assert "\n" not in str(line) and "{" not in str(line)
    other = ValueError("not an API answer")
    assert error_line(other, "u") is other
