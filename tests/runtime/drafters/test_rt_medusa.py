"""Medusa heads draft a static tree from the target's last hidden state: greedy output is the
target's own, token for token, alone and batched in flight, with heads read from FasterDecoding's
and ModelOpt's layouts (written by those layouts' own code: trtspec.testing.tiny_medusa)."""

from __future__ import annotations

import pytest

from tests.runtime.conftest import TINY_PROMPTS, assert_in_flight_equals_plain, spy_drafts

TEXT_PROMPTS = ["the quick brown fox", "def add(a, b):", "What is the capital of France?"]


@pytest.fixture(scope="module")
def trained_heads(tiny_llama, tmp_path_factory):
    """Heads trained for a fixed number of steps on the tiny target's own answers (tied lm_head)."""
    from trtspec.testing.tiny_medusa import make_tiny_medusa

    return make_tiny_medusa(tiny_llama, tmp_path_factory.mktemp("medusa"), num_heads=3)


@pytest.fixture(scope="module")
def engine(tiny_llama, trained_heads):
    from trtspec.runtime import Engine

    # a schedule that always drafts: the cost model might turn drafting off for this cheap target
    engine = Engine.from_checkpoints(tiny_llama, mode="medusa", draft_dir=trained_heads, max_draft_len=8,
                                     draft_len_schedule=[[1, 8]])
    yield engine
    engine.close()


@pytest.mark.parametrize("prompt", TEXT_PROMPTS + TINY_PROMPTS[:2])
def test_greedy_equals_plain_greedy(engine, prompt):
    seen = spy_drafts(engine)
    try:
        spec = engine.generate(prompt, max_new_tokens=40)
    finally:
        del engine.drafter.propose_batch
    assert spec.token_ids == engine.generate(prompt, max_new_tokens=40, speculative=False).token_ids
    trees = [d.tree for batch in seen for d in batch if d is not None]
    # the engine's tree is the drafter's (default choices cut to 3 heads), verified whole
    assert trees and all(t is engine.tree for t in trees) and engine.tree.num_nodes == 8
    assert engine.drafter.projections is None  # trained heads share the target's lm_head: one product


def test_trained_heads_are_accepted_beyond_the_first_depth(engine):
    """On a prompt it was trained on, the tree's deeper nodes are accepted too (not only depth 1)."""
    spec = engine.generate(TEXT_PROMPTS[0], max_new_tokens=40)
    assert spec.stats.num_drafts > 0
    assert spec.stats.num_accepted_tokens > spec.stats.num_drafts  # more than one token per draft on average


def test_batched_in_flight_equals_plain(engine):
    prompts = [TINY_PROMPTS[i % len(TINY_PROMPTS)] + [i] for i in range(6)] + TEXT_PROMPTS
    assert_in_flight_equals_plain(engine, prompts, 24)


@pytest.mark.parametrize("layout", ["faster-decoding-pt", "modelopt"])
def test_imported_layouts_draft_the_same_trees(tiny_llama, trained_heads, tmp_path, layout):
    """Heads written by FasterDecoding's .pt save and by ModelOpt's converted model, imported by
    convert's reader into the canonical layout, draft exactly what the canonical heads draft."""
    from safetensors.torch import load_file

    from trtspec.convert.medusa import layouts
    from trtspec.runtime import Engine
    from trtspec.testing.tiny_medusa import make_tiny_medusa

    tensors = load_file(str(trained_heads / layouts.CANONICAL_FILE))
    source = make_tiny_medusa(tiny_llama, tmp_path / "source", layout=layout, tensors=tensors)
    heads = layouts.read_heads(source)
    assert (heads.layout, heads.num_heads, heads.num_layers) == (
        "modelopt" if layout == "modelopt" else "faster-decoding", 3, 1)
    canonical = tmp_path / "canonical"
    canonical.mkdir()
    layouts.write_canonical(canonical, heads, str(tiny_llama))
    with Engine.from_checkpoints(tiny_llama, mode="medusa", draft_dir=canonical, max_draft_len=8,
                                 draft_len_schedule=[[1, 8]]) as imported, \
            Engine.from_checkpoints(tiny_llama, mode="medusa", draft_dir=trained_heads, max_draft_len=8,
                                    draft_len_schedule=[[1, 8]]) as own:
        drafts = []
        for engine in (imported, own):
            seen = spy_drafts(engine)
            result = engine.generate(TEXT_PROMPTS[1], max_new_tokens=24)
            drafts.append(([d.token_ids.tolist() for batch in seen for d in batch if d is not None], result.token_ids))
        assert drafts[0] == drafts[1]


def test_untied_heads_and_given_choices(tiny_llama, tmp_path):
    """Random heads with projections of their own run per head; a given tree is the engine's."""
    from trtspec.runtime import Engine
    from trtspec.testing.tiny_medusa import make_tiny_medusa

    heads = make_tiny_medusa(tiny_llama, tmp_path / "random", trained=False, num_heads=2)
    choices = [[0], [1], [0, 0], [0, 1], [1, 0]]
    with Engine.from_checkpoints(tiny_llama, mode="medusa", draft_dir=heads, max_draft_len=5,
                                 draft_len_schedule=[[1, 5]], medusa_choices=choices) as engine:
        assert engine.drafter.projections is not None and len(engine.drafter.projections) == 2
        assert engine.tree.paths == [[0], [1], [0, 0], [0, 1], [1, 0]]
        for prompt in TINY_PROMPTS[:3]:
            assert (engine.generate(prompt, max_new_tokens=24).token_ids
                    == engine.generate(prompt, max_new_tokens=24, speculative=False).token_ids)


def test_choices_deeper_than_the_heads_are_refused(tiny_llama, trained_heads):
    from trtspec.errors import ModelSourceError
    from trtspec.runtime import Engine

    with pytest.raises(ModelSourceError, match="depth 4, the heads are 3"):
        Engine.from_checkpoints(tiny_llama, mode="medusa", draft_dir=trained_heads,
                                medusa_choices=[[0], [0, 0], [0, 0, 0], [0, 0, 0, 0]])
