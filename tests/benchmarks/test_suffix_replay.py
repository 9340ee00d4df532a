"""benchmarks/suffix.py's acceptance replay: from plain greedy answers it reproduces the engine's own
drafting call for call (drafts and verified draft tokens equal the engine's counters), and greedy
verification's accepted length of chains and trees."""

from __future__ import annotations

import pytest

from benchmarks.suffix import accepted_length, parse_variant, replay

pytestmark = pytest.mark.usefixtures("one_torch_thread")   # tiny models: one thread (tests/conftest.py)

PROMPTS = [[5, 6, 7, 8, 5, 6, 7, 8, 5, 6], [100, 200, 300, 100, 200, 300, 100], [9, 10, 11, 12, 9, 10]]


@pytest.mark.parametrize(("mode", "drafter_options", "max_len"), [
    ("ngram", {"ngram_min": 1, "ngram_max": 3}, 4), ("suffix", {"max_cached_requests": 0}, 6),
    ("suffix", {"max_cached_requests": 0, "tree": True, "factor": 2.0}, 6)], ids=["ngram", "suffix", "suffix-tree"])
def test_the_replay_drafts_what_the_engine_drafted(tiny_llama, mode, drafter_options, max_len):
    from trtspec.bench.targets import mode_variant
    from trtspec.runtime import Engine
    from trtspec.runtime.drafters.ngram import NgramDrafter
    from trtspec.runtime.drafters.suffix import SuffixDrafter

    make = (lambda: NgramDrafter(**drafter_options)) if mode == "ngram" else (lambda: SuffixDrafter(**drafter_options))
    base = Engine.from_checkpoints(tiny_llama, mode="ngram", max_draft_len=2, draft_len_schedule=[[1, 2]])
    engine = mode_variant(base, mode, make(), max_len)
    try:
        for prompt in PROMPTS:
            plain = base.generate(prompt, max_new_tokens=32, speculative=False)
            spec = engine.generate(prompt, max_new_tokens=32)
            assert spec.token_ids == plain.token_ids
            answer = {"prompt_ids": list(plain.prompt_token_ids), "output_ids": list(plain.token_ids), "category": "c"}
            replayed = replay(make(), [answer], max_len)["c"]
            assert (replayed["drafts"], replayed["verified"]) == (spec.stats.num_drafts, spec.stats.num_verified_tokens)
        assert spec.stats.num_drafts > 0
    finally:
        engine.close()
        base.close()


def test_accepted_length_of_a_chain_and_of_a_tree():
    import torch

    from trtspec.runtime.drafters.base import Draft
    from trtspec.runtime.drafters.suffix import as_draft

    chain = Draft(torch.tensor([4, 5, 6]))
    assert accepted_length(chain, [4, 5, 9]) == 2 and accepted_length(chain, [7]) == 0
    assert accepted_length(chain, [4, 5]) == 2          # the answer ended: nothing past it counts
    # tokens 4 (root) -> 5 -> 6, and 4 -> 8: parents as suffix drafts give them
    tree = as_draft([4, 5, 8, 6], [-1, 0, 0, 1], match=1)
    assert tree.tree is not None
    assert accepted_length(tree, [4, 8, 1]) == 2        # the second branch
    assert accepted_length(tree, [4, 5, 6, 1]) == 3     # the deepest path
    assert accepted_length(tree, [3]) == 0


def test_variants_are_read_and_a_bad_one_is_refused():
    assert parse_variant("suffix@16,factor=2,depth=64") == ("suffix", 16, {"factor": 2, "depth": 64})
    assert parse_variant("ngram@8") == ("ngram", 8, {})
    # plain suffix: the mode's own cap (speculative.suffix.max_draft_len's default), or the one given
    assert parse_variant("suffix") == ("suffix", 24, {}) and parse_variant("suffix,max_draft_len=12")[1] == 12
    with pytest.raises(SystemExit, match="want ngram@K"):
        parse_variant("eagle3@4")
    with pytest.raises(SystemExit, match="want ngram@K"):
        parse_variant("ngram")   # prompt lookup has no cap of its own here
