"""mode mtp on the GPU backends: the LLM-API package writes MTPDecodingConfig's fields as the
targeted release takes them (checked against its contract by the build itself); a target without
MTP weights and the TensorRT-engine backend are refused in one line."""

from __future__ import annotations

import pytest

from trtspec.spec.schema import validate_spec


@pytest.fixture(scope="module")
def tiny_deepseek(tmp_path_factory):
    from trtspec.testing.tiny import make_tiny_causal_lm

    return {mtp: make_tiny_causal_lm(tmp_path_factory.mktemp(f"deepseek-mtp-{mtp}"), "deepseek_v3", mtp=mtp)
            for mtp in (True, False)}


def _spec(source, backend: str = "trtllm", version: str = "1.2.1", **speculative):
    return validate_spec({"model": {"source": str(source)}, "speculative": {"mode": "mtp", **speculative},
                          "build": {"backend": backend, "trtllm_version": version}})


@pytest.mark.parametrize("version", ["1.1.0", "1.2.1"])
def test_the_llm_api_gets_mtp_decoding_config_with_the_release_s_fields(tiny_deepseek, in_tmp, version):
    from trtspec.builders import build
    from trtspec.builders.contracts import load

    result = build(_spec(tiny_deepseek[True], version=version, max_draft_len=3), dry_run=True)
    speculative = result.engine["trtllm"]["llm_api_options"]["speculative_config"]
    # num_nextn_predict_layers is the release's draft length (from_dict ties max_draft_len to it);
    # the one module is reused 3 times (MTP Eagle); relaxed acceptance off, as lossless decoding needs
    assert speculative == {"decoding_type": "MTP", "max_draft_len": 3, "num_nextn_predict_layers": 3,
                           "use_relaxed_acceptance_for_thinking": False, "relaxed_topk": 1, "relaxed_delta": 0.0}
    fields = load(version).decoding("mtp")["fields"]
    assert set(speculative) <= set(fields) and "speculative_model_dir" not in speculative


def test_several_mtp_modules_need_one_draft_position_each(tiny_deepseek, in_tmp):
    from trtspec.builders import build
    from trtspec.errors import TrtSpecError

    with pytest.raises(TrtSpecError, match="max_draft_len must be 2"):
        build(_spec(tiny_deepseek[True], max_draft_len=3, mtp={"num_layers": 2}), dry_run=True)


def test_a_target_without_mtp_weights_is_refused_in_one_line(tiny_deepseek, in_tmp):
    from trtspec.builders import build
    from trtspec.errors import IncompatibleArtifactError

    with pytest.raises(IncompatibleArtifactError) as refused:
        build(_spec(tiny_deepseek[False]), dry_run=True)
    assert "needs the checkpoint's MTP weights" in str(refused.value) and "\n" not in str(refused.value)


def test_tensorrt_engines_refuse_mtp_in_one_line(tiny_deepseek):
    from trtspec.errors import SpecError

    with pytest.raises(SpecError) as caught:
        _spec(tiny_deepseek[True], backend="trtllm-engine")
    lines = str(caught.value).strip().splitlines()
    assert len(lines) == 1 and "no MTP path" in lines[0] and "build.backend: trtllm" in lines[0]
