"""`trtspec convert --mode medusa`: heads imported from FasterDecoding's layout (checked against
the target, written canonical with a manifest, skipped on a re-run) or trained on the target's
own answers; wrong heads are one line."""

from __future__ import annotations

import json

import pytest
from click.testing import CliRunner

from trtspec import artifacts
from trtspec.cli import main


@pytest.fixture(scope="module")
def random_heads(tiny_llama, tmp_path_factory):
    from trtspec.testing.tiny_medusa import make_tiny_medusa

    return make_tiny_medusa(tiny_llama, tmp_path_factory.mktemp("fd"), trained=False, num_heads=2)


def _config(root, target, **medusa):
    import yaml

    spec = {"model": {"source": str(target), "name": "tiny"}, "speculative": {"mode": "medusa", "medusa": medusa}}
    (root / "trtspec.yaml").write_text(yaml.safe_dump(spec))
    return str(root / "trtspec.yaml")


def test_imported_heads_become_the_canonical_checkpoint_and_rerun_skips(in_tmp, tiny_llama, random_heads):
    config = _config(in_tmp, tiny_llama, heads=str(random_heads))
    result = CliRunner().invoke(main, ["convert", "-c", config])
    assert result.exit_code == 0, result.output
    final = in_tmp / "work" / "checkpoints" / "medusa"
    manifest = artifacts.read_manifest(final)
    target_sha = artifacts.read_manifest(in_tmp / "work" / "checkpoints" / "target")["weights_sha256"]
    assert manifest["target_sha256"] == target_sha and manifest["imported"]["layout"] == "faster-decoding"
    assert manifest["heads"] == {"num_heads": 2, "num_layers": 1, "choices": [[0], [1], [2], [0, 0], [0, 1], [1, 0]]}
    assert json.loads((final / "config.json").read_text())["medusa_num_heads"] == 2
    again = CliRunner().invoke(main, ["convert", "-c", config])
    assert again.exit_code == 0 and artifacts.read_manifest(final)["created"] == manifest["created"]


@pytest.mark.parametrize(("settings", "words"), [
    ({"num_heads": 3}, "speculative.medusa.num_heads is 3, but the heads hold 2"),
    ({"choices": [[0], [0, 0], [0, 0, 0]]}, "a path of depth 3 needs 3 heads"),
])
def test_heads_that_do_not_fit_are_one_line(in_tmp, tiny_llama, random_heads, settings, words):
    result = CliRunner().invoke(main, ["convert", "-c", _config(in_tmp, tiny_llama, heads=str(random_heads),
                                                               **settings)])
    assert result.exit_code != 0 and words in result.output
    assert not (in_tmp / "work" / "checkpoints" / "medusa").exists()


def test_heads_of_another_target_are_refused(in_tmp, tiny_llama, tmp_path):
    from trtspec.testing.tiny import make_tiny_llama
    from trtspec.testing.tiny_medusa import make_tiny_medusa

    other = make_tiny_llama(tmp_path / "wide", hidden_size=32, intermediate_size=64)
    heads = make_tiny_medusa(other, tmp_path / "heads", trained=False, num_heads=2)
    result = CliRunner().invoke(main, ["convert", "-c", _config(in_tmp, tiny_llama, heads=str(heads))])
    assert result.exit_code != 0 and "hidden_size 32 differs from the target's 64" in result.output


def test_trained_heads_learn_the_target_s_next_tokens(in_tmp, tiny_llama):
    config = _config(in_tmp, tiny_llama, num_heads=2, train_seconds=4, num_prompts=4, answer_tokens=24)
    result = CliRunner().invoke(main, ["convert", "-c", config])
    assert result.exit_code == 0, result.output
    manifest = artifacts.read_manifest(in_tmp / "work" / "checkpoints" / "medusa")
    trained = manifest["trained"]
    assert manifest["source"] == "trained" and trained["steps"] > 1 and trained["prompts"] == 4
    # the head started as the target's lm_head (which predicts the token before head 0's): it learned
    assert trained["held_out_top1"][0] is not None and trained["held_out_top1"][0] > 0.2
