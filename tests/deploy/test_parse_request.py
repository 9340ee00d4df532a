"""The cpu model's request checks, without a server (the e2e tests send the same through Triton)."""

from __future__ import annotations

import numpy as np
import pytest

from trtspec.repository.cpu_request import InvalidRequest, parse_request


def _req(**values):
    arrays = {"text_input": np.array([b"hello"], dtype=np.object_)}
    for name, value in values.items():
        arrays[name] = value if isinstance(value, np.ndarray) else np.array([value])
    return arrays


def test_defaults_and_values_are_read():
    parsed = parse_request(_req(sampling_param_max_tokens=np.array([5], np.int32), streaming=np.array([True]),
                                sampling_param_top_p=np.array([0.5], np.float32), speculative=np.array([False]),
                                sampling_param_seed=np.array([7], np.uint64),
                                sampling_param_stop=np.array([b"\n", b""], dtype=np.object_)), max_seq_len=512)
    assert (parsed.prompt, parsed.max_tokens, parsed.streaming, parsed.top_p, parsed.speculative, parsed.seed) == \
        ("hello", 5, True, 0.5, False, 7)
    assert parsed.stop == ["\n"] and parsed.temperature == 0.0 and not parsed.perf_metrics


@pytest.mark.parametrize("values, message", [
    ({"text_input": np.array([b"  "], dtype=np.object_)}, "text_input: empty"),
    ({"text_input": np.array([b"\xff\xfe"], dtype=np.object_)}, "not valid UTF-8"),
    ({"sampling_param_max_tokens": np.array([0], np.int32)}, "at least 1"),
    ({"sampling_param_max_tokens": np.array([-4], np.int32)}, "at least 1"),
    ({"sampling_param_max_tokens": np.array([600], np.int32)}, "max_seq_len 512"),
    ({"sampling_param_temperature": np.array([-0.1], np.float32)}, "temperature: must be >= 0"),
    ({"sampling_param_temperature": np.array([np.nan], np.float32)}, "temperature: must be >= 0"),
    ({"sampling_param_top_p": np.array([0.0], np.float32)}, r"top_p: must be in \(0, 1\]"),
    ({"sampling_param_top_p": np.array([1.01], np.float32)}, r"top_p: must be in \(0, 1\]"),
    ({"sampling_param_top_k": np.array([-1], np.int32)}, "top_k"),
    ({"sampling_param_max_tokens": np.array([1, 2], np.int32)}, "expected one value"),
])
def test_bad_requests_name_the_problem(values, message):
    with pytest.raises(InvalidRequest, match=message):
        parse_request(_req(**values), max_seq_len=512)


def test_missing_text_input():
    with pytest.raises(InvalidRequest, match="text_input: required"):
        parse_request({}, max_seq_len=512)
