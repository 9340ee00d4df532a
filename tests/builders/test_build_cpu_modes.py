"""`trtspec build --backend cpu` for the modes without a second model (layerskip, lookahead, mtp):
the bundle carries the mode's settings, the smoke generation runs, the loaded engine drafts so."""

from __future__ import annotations

import json

import pytest
from click.testing import CliRunner

from tests.builders.conftest import write_workspace
from trtspec import artifacts
from trtspec.cli import main


@pytest.mark.parametrize(("mode", "speculative", "runtime"), [
    ("layerskip", {"layerskip": {"exit_layer": 2}}, {"exit_layer": 2}),
    ("lookahead", {"lookahead": {"window": 3, "ngram": 2, "verification_set": 2}}, {"lookahead": [3, 2, 2]}),
])
def test_cpu_build_of_a_self_drafting_mode_smoke_generates(mode, speculative, runtime, in_tmp, tiny_llama):
    from trtspec.runtime import load_engine

    config = write_workspace(in_tmp, tiny_llama, speculative=speculative)
    result = CliRunner().invoke(main, ["build", "-c", str(config), "--backend", "cpu", "--mode", mode])
    assert result.exit_code == 0, result.output
    engine_dir = in_tmp / "engines" / f"tiny-{mode}-cpu"
    engine = json.loads((engine_dir / "engine.json").read_text())
    assert engine["mode"] == mode and engine["draft"] is None and not (engine_dir / "draft").exists()
    assert {key: engine["runtime"][key] for key in runtime} == runtime
    assert engine["build_config"]["max_draft_len"] == 4  # the cpu engine's chains: speculative.max_draft_len
    assert artifacts.read_manifest(engine_dir)["smoke"]["status"] == "ok"
    with load_engine(engine_dir) as loaded:
        assert loaded.drafter.kind == mode
        if mode == "layerskip":
            assert loaded.drafter.exit_layer == 2
        else:
            assert (loaded.drafter.window, loaded.drafter.ngram, loaded.drafter.verification_set) == (3, 2, 2)
        prompt = [5, 6, 7, 8, 5, 6, 7, 8, 5, 6]
        assert loaded.generate(prompt, max_new_tokens=20).token_ids == \
            loaded.generate(prompt, max_new_tokens=20, speculative=False).token_ids


def test_cpu_build_of_mtp_drafts_with_the_checkpoint_s_own_module(in_tmp):
    from trtspec.runtime import load_engine
    from trtspec.testing.tiny import make_tiny_causal_lm

    target = make_tiny_causal_lm(in_tmp / "deepseek", "deepseek_v3", mtp=True)
    config = write_workspace(in_tmp, target, speculative={"mtp": {"num_layers": 1}})
    result = CliRunner().invoke(main, ["build", "-c", str(config), "--backend", "cpu", "--mode", "mtp"])
    assert result.exit_code == 0, result.output
    engine_dir = in_tmp / "engines" / "tiny-mtp-cpu"
    engine = json.loads((engine_dir / "engine.json").read_text())
    assert engine["mode"] == "mtp" and engine["draft"] is None and engine["runtime"]["mtp_layers"] == 1
    assert artifacts.read_manifest(engine_dir)["smoke"]["status"] == "ok"
    with load_engine(engine_dir) as loaded:
        assert loaded.drafter.kind == "mtp"
        prompt = list(range(10, 30))
        assert loaded.generate(prompt, max_new_tokens=12).token_ids == \
            loaded.generate(prompt, max_new_tokens=12, speculative=False).token_ids
