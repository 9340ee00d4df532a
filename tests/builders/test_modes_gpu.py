"""What the GPU backends write for the modes of trtspec.modes: lookahead as TensorRT engines
(flags, Triton fields, checked against the release's contract), and the one-line refusals."""

from __future__ import annotations

import pytest

from trtspec.spec.schema import validate_spec


def _spec(tiny_llama, mode: str, backend: str, version: str = "1.2.1", **lookahead):
    speculative = {"mode": mode, **({"lookahead": lookahead} if lookahead else {})}
    return validate_spec({"model": {"source": str(tiny_llama)}, "speculative": speculative,
                          "build": {"backend": backend, "trtllm_version": version}})


@pytest.mark.parametrize(("window", "ngram", "verification_set", "draft_len"), [(4, 3, 4, 15), (7, 7, 7, 83),
                                                                               (2, 2, 1, 2), (1, 1, 0, 0)])
def test_lookahead_max_draft_len_is_upstreams_formula(tiny_llama, window, ngram, verification_set, draft_len):
    # (N-2 if N>1 else 0) + (W-1+G)(N-1): 15 for TensorRT-LLM's defaults (4, 3, 4), 83 for the
    # examples/lookahead README's [7,7,7]
    spec = _spec(tiny_llama, "lookahead", "trtllm-engine", window=window, ngram=ngram,
                 verification_set=verification_set)
    assert spec.speculative.lookahead.max_draft_len == draft_len


@pytest.mark.parametrize("version", ["1.1.0", "1.2.1"])
def test_lookahead_builds_tensorrt_engines_and_fills_the_lookahead_parameters(tiny_llama, in_tmp, version):
    from trtspec.builders import build
    from trtspec.repository import trtllm_engine as te

    spec = _spec(tiny_llama, "lookahead", "trtllm-engine", version, window=4, ngram=3, verification_set=4)
    result = build(spec, dry_run=True)
    target_build = next(c for c in result.commands if c.startswith("trtllm-build"))
    assert "--speculative_decoding_mode lookahead_decoding --max_draft_len 15" in target_build
    assert len([c for c in result.commands if c.startswith("trtllm-build")]) == 1  # no draft engine
    section = result.engine["trtllm_engine"]
    assert section["decoding_mode"] == "lookahead" and section["engines"]["draft"] is None
    assert section["lookahead"] == {"window_size": 4, "ngram_size": 3, "verification_set_size": 4}
    assert result.engine["build_config"]["max_draft_len"] == 15
    values = te.plan(result.engine, spec, "/engines/x", in_tmp)
    fills = te.fills(values, version)
    llm = fills["tensorrt_llm"]
    assert (llm["decoding_mode"], llm["lookahead_window_size"], llm["lookahead_ngram_size"],
            llm["lookahead_verification_set_size"]) == ("lookahead", 4, 3, 4)
    te.check(fills, version)  # every placeholder filled, each config parses as Triton's ModelConfig


def test_other_modes_leave_the_lookahead_parameters_unset(tiny_llama, in_tmp):
    from trtspec.builders import build
    from trtspec.repository import trtllm_engine as te

    spec = _spec(tiny_llama, "none", "trtllm-engine")
    fills = te.fills(te.plan(build(spec, dry_run=True).engine, spec, "/engines/x", in_tmp), "1.2.1")
    assert fills["tensorrt_llm"]["lookahead_window_size"] == "" and fills["tensorrt_llm"]["decoding_mode"] == "top_k_top_p"


@pytest.mark.parametrize(("mode", "backend", "words"), [
    ("lookahead", "trtllm", "TensorRT backend only"),
])
def test_gpu_refusals_are_one_line(tiny_llama, mode, backend, words):
    from trtspec.errors import SpecError

    with pytest.raises(SpecError) as caught:
        _spec(tiny_llama, mode, backend)
    lines = str(caught.value).strip().splitlines()
    assert len(lines) == 1 and words in lines[0] and lines[0].startswith("speculative.mode:")
