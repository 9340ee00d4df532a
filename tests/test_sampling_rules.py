"""The sampling ranges are one rule (trtspec.sampling_rules): the engine's generate, the served
model's request parser and the OpenAI frontend refuse exactly the same values, in the same words."""

from __future__ import annotations

import math

import numpy as np
import pytest

from trtspec.runtime.loop.request import InvalidRequestError, validate
from trtspec.sampling_rules import MIN_TEMPERATURE, sampling_problem
from trtspec.serve.openai_protocol import OpenAIError, completion_request
from trtspec.triton_model.request import InvalidRequest, parse_request

# (parameter, value): in range, then out of range (each boundary's own type: floats, ints)
CASES = [("temperature", 0.0), ("temperature", MIN_TEMPERATURE), ("temperature", 0.7),
         ("temperature", MIN_TEMPERATURE / 2), ("temperature", -0.1), ("temperature", math.nan),
         ("top_p", 1.0), ("top_p", 0.5), ("top_p", 0.0), ("top_p", 1.01), ("top_p", -1.0),
         ("top_k", 0), ("top_k", 40), ("top_k", -1)]
DEFAULTS = {"temperature": 0.0, "top_p": 1.0, "top_k": 0}


def _engine(name: str, value: float) -> str | None:
    args = {**DEFAULTS, name: value}
    try:
        validate(num_prompt_tokens=3, max_input_len=8, max_new_tokens=4, **args)
    except InvalidRequestError as error:
        return str(error)
    return None


def _served(name: str, value: float) -> str | None:
    dtype = np.int32 if name == "top_k" else np.float32
    values = {"text_input": np.array([b"hi"], dtype=np.object_), f"sampling_param_{name}": np.array([value], dtype)}
    try:
        parse_request(values, max_seq_len=512)
    except InvalidRequest as error:
        return str(error)
    return None


def _openai(name: str, value: float) -> str | None:
    try:
        completion_request({"model": "tiny", "prompt": "a", name: value}, ("tiny",))
    except OpenAIError as error:
        return error.message
    return None


@pytest.mark.parametrize("name, value", CASES)
def test_every_boundary_refuses_what_the_rule_refuses_in_its_words(name, value):
    problem = sampling_problem(**{name: value})
    answers = {"engine": _engine(name, value), "served": _served(name, value)}
    if not math.isnan(value):  # JSON has no NaN: an OpenAI body cannot carry one
        answers["openai"] = _openai(name, value)
    if problem is None:
        assert answers == dict.fromkeys(answers), answers
    else:
        # float32 on the served path: the value reads back rounded, so compare up to "(got"
        words = problem[1].split(" (got")[0]
        assert all(answer is not None and name in answer for answer in answers.values()), answers
        # OpenAI's own temperature range ([0, 2]) is checked first and speaks its words
        said = [answers["engine"], answers["served"]] + [answers.get("openai")] * (name != "temperature" or value > 0)
        assert all(words in answer for answer in said if answer is not None), answers
