"""tune over EAGLE-3 draft trees: a real ModelOpt-exported head on the tiny target, in-process."""

from __future__ import annotations

import pytest

from trtspec.bench.tune import BASELINE_LABEL, Candidate, measure
from trtspec.prompts import Prompt


@pytest.fixture(scope="module")
def eagle3_engine(tiny_llama, tmp_path_factory):
    """The tiny target with a random EAGLE-3 head made and exported by ModelOpt itself."""
    from modelopt.torch.export import export_speculative_decoding

    from trtspec.runtime import Engine
    from trtspec.testing.tiny import make_tiny_eagle3

    model = make_tiny_eagle3(tiny_llama)
    export_dir = tmp_path_factory.mktemp("eagle3")
    export_speculative_decoding(model.eval(), export_dir=export_dir)
    return Engine.from_checkpoints(tiny_llama, mode="eagle3", draft_dir=export_dir, max_draft_len=4)


@pytest.mark.slow
def test_chains_and_trees_measured_side_by_side(eagle3_engine):
    prompts = [Prompt(0, "the quick brown fox jumps over the lazy dog. the quick", "chat"),
               Prompt(1, "1 2 3 4 5 6 7 8 9 10 11", "math")]
    shapes = [Candidate(2), Candidate.tree([[0], [1], [0, 0]])]
    result = measure(eagle3_engine, prompts, shapes, max_tokens=8, concurrency=1, repeats=1)
    chain, tree = result["rows"]
    assert chain["eagle_choices"] is None and tree["eagle_choices"] == [[0], [1], [0, 0]]
    assert tree["max_draft_len"] == 3 and tree["spec_decode_acceptance_length"] >= 1.0
    assert result["choice"] in result["rows"]
    # every shape is lossless: the same token counts as plain decoding, prompt by prompt
    tokens = {(r.variant, r.prompt_index): r.output_tokens for r in result["records"]}
    for shape in shapes:
        assert all(tokens[(shape.label, i)] == tokens[(BASELINE_LABEL, i)] for i in range(2))
    # the tree variant drafted trees: the runtime counts a tree step's draft tokens along its
    # depth (2 here), the chain's as its length (2); the engine it came from is untouched
    tree_records = [r for r in result["records"] if r.variant == shapes[1].label]
    assert all(r.spec.num_drafts > 0 and r.spec.num_draft_tokens == 2 * r.spec.num_drafts for r in tree_records)
    assert eagle3_engine.tree is None and eagle3_engine.config.eagle_choices is None
    from trtspec.bench.targets import engine_variant

    with engine_variant(eagle3_engine, 3, [[0], [1], [0, 0]]) as variant:
        assert variant.tree.num_nodes == 3 and variant.drafter is eagle3_engine.drafter
        assert variant.config.max_draft_len == 3 and variant.config.mode == eagle3_engine.config.mode
