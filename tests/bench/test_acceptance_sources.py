"""Acceptance on the GPU backends: read from the release's sources, parsed as strings or numbers,
and left out (not reported as 0 %) where the release's per-request zeros cannot be trusted."""

from __future__ import annotations

import math

import numpy as np

from trtspec.bench import acceptance
from trtspec.bench.metrics import SpecCounts, spec_summary
from trtspec.client.events import _number
from trtspec.spec.schema import validate_spec


def _spec(backend: str, mode: str, version: str | None = None):
    build = {"backend": backend, **({"trtllm_version": version} if version else {})}
    return validate_spec({"model": {"source": "smollm2"}, "build": build,
                          "speculative": {"mode": mode, **({"draft": "smollm2"} if mode == "draft-target" else {})}})


def test_the_stock_models_string_outputs_and_numbers_parse_alike():
    # 1.2.1's stock model.py builds the perf outputs with text_output's dtype: BYTES holding the number
    assert _number(b"0.75") == 0.75 and _number(b"12") == 12 and _number("3") == 3
    assert _number(np.float32(0.5).item()) == 0.5 and _number(7) == 7


def test_one_model_eagle3_zeros_on_1_2_1_are_marked_not_reported():
    spec = _spec("trtllm", "eagle3")
    zero = {"variant": "speculative", "max_concurrency": 1,
            **spec_summary(SpecCounts(num_drafts=0, num_draft_tokens=40, num_accepted_tokens=0)),
            "tokens_per_target_pass": 1.0}
    plain = {"variant": "baseline", "max_concurrency": 1}
    notes = acceptance.mark([zero, plain], spec, {"speculative"})
    assert math.isnan(zero["spec_decode_acceptance_rate"]) and math.isnan(zero["tokens_per_target_pass"])
    assert "PR #17082" in zero["acceptance_untrusted"] and len(notes) == 1 and "acceptance_untrusted" not in plain
    assert "TensorRT-LLM 1.2.1 per-request perf outputs (acceptance_rate" in acceptance.source(spec)
    assert "no speculative Prometheus series" in acceptance.source(spec)


def test_a_real_count_or_another_mode_keeps_its_figures():
    counted = {"variant": "speculative", **spec_summary(SpecCounts(num_drafts=10, num_draft_tokens=40,
                                                                     num_accepted_tokens=12))}
    assert not acceptance.mark([counted], _spec("trtllm", "eagle3"), {"speculative"})
    assert counted["spec_decode_acceptance_rate"] == 30.0
    for spec in (_spec("trtllm", "ngram"), _spec("cpu", "eagle3"), _spec("trtllm", "draft-target", "1.1.0")):
        zero = {"variant": "speculative", **spec_summary(SpecCounts(num_drafts=5, num_draft_tokens=20))}
        assert not acceptance.mark([zero], spec, {"speculative"}) and zero["spec_decode_acceptance_rate"] == 0.0
    assert acceptance.source(_spec("cpu", "ngram")).startswith("cpu model")
