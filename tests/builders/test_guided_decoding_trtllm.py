"""build.guided_decoding_backend on the trtllm backend (issue 68 item d): the LLM-API option
guided_decoding_backend, written for TensorRT-LLM 1.2.1 with every LLM-API mode, the name, its
values and the modes it combines with cited in the 1.2.1 contract (llm_api.guided_decoding);
releases whose contract has not read the option (1.1.0, the 1.3 line for Dynamo) and the legacy
engine backend refuse it in one line instead of dropping it."""

from __future__ import annotations

import pytest
import yaml
from click.testing import CliRunner

from trtspec.builders import contracts, trtllm, upstream
from trtspec.errors import SpecError, TrtSpecError
from trtspec.spec.schema import validate_spec

MODES = ["none", "eagle3", "mtp", "draft-target", "ngram", "layerskip"]


def _spec(mode: str, backend: str = "trtllm", **build):
    draft = {"draft": "smollm2"} if mode == "draft-target" else {}
    return validate_spec({"model": {"source": "smollm2"}, "build": {"backend": backend, **build},
                          "speculative": {"mode": mode, **draft}})


def test_the_1_2_1_contract_cites_the_option_and_the_modes_it_combines_with():
    guided = contracts.load("1.2.1").llm_api["guided_decoding"]
    assert guided["option"] == "guided_decoding_backend" and guided["values"] == ["xgrammar", "llguidance"]
    assert guided["option"] in contracts.load("1.2.1").llm_api["llm_args"]
    assert "features/guided-decoding.html@58fb435eacc402f3bd177e60f592c955d2b0719d" in guided["read"]
    assert "feature-combination-matrix.html@58fb435eacc402f3bd177e60f592c955d2b0719d" in guided["modes_source"]
    assert set(guided["modes"]) == {"none"} | set(contracts.load("1.2.1").llm_api["decoding"])


@pytest.mark.parametrize("mode", MODES)
def test_written_for_every_llm_api_mode_and_checked_against_the_contract(mode):
    contract = contracts.load("1.2.1")
    spec = _spec(mode, guided_decoding_backend="xgrammar")
    written = spec
    if mode == "layerskip":  # the build serves it as draft-target (builders: written_spec)
        written = spec.model_copy(update={"speculative": spec.speculative.model_copy(update={"mode": "draft-target",
                                                                                            "draft": "smollm2"})})
    options = trtllm.llm_api_options(written, contract, target="target", draft="draft")
    assert options["guided_decoding_backend"] == "xgrammar"
    upstream.check_llm_api_options(options, contract, upstream.pinned_fields(contract))
    assert "guided_decoding_backend" not in trtllm.llm_api_options(_spec("ngram"), contract, target="t", draft=None)
    assert "guided_decoding_backend: xgrammar" in trtllm.render_yaml(options, contract)


def test_releases_without_the_option_refuse_it_in_one_line():
    spec = _spec("eagle3", guided_decoding_backend="llguidance")
    for contract in (contracts.load("1.1.0"), contracts.for_dynamo("1.6.1")):
        with pytest.raises(TrtSpecError, match=f"TensorRT-LLM {contract.version} has not read") as raised:
            trtllm.llm_api_options(spec, contract, target="t", draft="d")
        assert "\n" not in str(raised.value)
    with pytest.raises(SpecError, match="build.guided_decoding_backend: an LLM-API option"):
        _spec("draft-target", backend="trtllm-engine", guided_decoding_backend="xgrammar")


def test_a_trtllm_build_writes_it(in_tmp, gpu_target):
    from tests.builders.conftest import write_workspace
    from trtspec.cli import main

    config = write_workspace(in_tmp, gpu_target, build={"guided_decoding_backend": "xgrammar"})
    result = CliRunner().invoke(main, ["build", "-c", str(config), "--backend", "trtllm", "--mode", "ngram"],
                                catch_exceptions=False)
    assert result.exit_code == 0, result.output
    (engine_dir,) = (in_tmp / "engines").iterdir()
    options = yaml.safe_load((engine_dir / "llm_api_options.yaml").read_text())
    assert options["guided_decoding_backend"] == "xgrammar"
    assert options["speculative_config"]["decoding_type"] == "NGram"
