"""layerskip (the target's first layers draft for it) and lookahead (n-gram pool + Jacobi guesses):
greedy output is the target's own, token for token, alone and batched in flight; the drafters'
own rules on hand-built sequences."""

from __future__ import annotations

import pytest

from tests.runtime.conftest import TINY_PROMPTS, assert_in_flight_equals_plain, spy_drafts


@pytest.fixture(scope="module", params=[("layerskip", {"exit_layer": 2}), ("lookahead", {"lookahead": [4, 3, 4]}),
                                        ("lookahead", {"lookahead": [2, 2, 1]})],
                ids=["layerskip-e2", "lookahead-4-3-4", "lookahead-2-2-1"])
def engine(request, tiny_llama):
    from trtspec.runtime import Engine

    mode, options = request.param
    # a schedule that always drafts: the cost model might turn drafting off for this cheap target
    engine = Engine.from_checkpoints(tiny_llama, mode=mode, max_draft_len=4, draft_len_schedule=[[1, 4]], **options)
    yield engine
    engine.close()


@pytest.mark.parametrize("prompt", TINY_PROMPTS)
def test_greedy_equals_plain_greedy(engine, prompt):
    plain = engine.generate(prompt, max_new_tokens=40, speculative=False)
    spec = engine.generate(prompt, max_new_tokens=40)
    assert spec.token_ids == plain.token_ids
    assert spec.stats.num_drafts > 0 and spec.stats.num_draft_tokens >= spec.stats.num_drafts


def test_batched_in_flight_equals_plain(engine):
    """Eight requests from threads share steps; each answer is its plain greedy answer."""
    prompts = [TINY_PROMPTS[i % len(TINY_PROMPTS)] + [i] for i in range(8)]
    results = assert_in_flight_equals_plain(engine, prompts, 24)
    assert sum(r.stats.num_drafts for r in results) > 0
    total = engine.cumulative_stats()
    assert total.num_drafts >= sum(r.stats.num_drafts for r in results)


def test_layerskip_shares_the_target_weights_and_its_cache(tiny_llama):
    from trtspec.runtime import Engine

    with Engine.from_checkpoints(tiny_llama, mode="layerskip", max_draft_len=3) as engine:
        view, target = engine.drafter.model, engine.target
        assert engine.drafter.exit_layer == 1  # a quarter of 4 layers
        assert len(view.model.layers) == 1 and view.model.layers[0] is target.model.layers[0]
        assert view.lm_head is target.lm_head and view.model.norm is target.model.norm
        target_tensors = {p.data_ptr() for p in target.parameters()}
        assert all(p.data_ptr() in target_tensors for p in view.parameters())
        assert engine.drafter.kv_config is None and engine.scheduler.draft_pool is None  # the target's cache only


def test_layerskip_exit_layer_must_be_below_the_layer_count(tiny_llama):
    from trtspec.errors import IncompatibleArtifactError
    from trtspec.runtime import Engine

    with pytest.raises(IncompatibleArtifactError, match="exit_layer 4 must lie in 1..3"):
        Engine.from_checkpoints(tiny_llama, mode="layerskip", exit_layer=4)


def test_lookahead_pool_keeps_the_newest_g_continuations_per_first_token():
    from trtspec.runtime.drafters.lookahead import LookaheadSession

    session = LookaheadSession(window=4, ngram=3, verification_set=2)
    # 3-grams starting with 1: (1,2,3), (1,4,5), (1,6,7); G = 2 keeps the last two, newest first
    draft = session.propose([1, 2, 3, 1, 4, 5, 1, 6, 7, 9, 1], max_len=2)
    assert session.pool[1] == [(6, 7), (4, 5)]
    # the verification set: the newest chain [6, ...] and the other candidate's first token 4 beside
    # it, as a tree of max_len nodes (depth-1 nodes first: 6 at rank 0, 4 at rank 1)
    assert draft.tree.paths == [[0], [1]] and draft.token_ids.tolist() == [6, 4]
    # chained: after 7 comes 9, then 1 -> 6, 7; the last node goes to the other candidate
    longer = session.propose([1, 2, 3, 1, 4, 5, 1, 6, 7, 9, 1], max_len=6)
    assert longer.tree.paths == [[0], [1], [0, 0], [0, 0, 0], [0, 0, 0, 0], [0, 0, 0, 0, 0]]
    assert longer.token_ids.tolist() == [6, 4, 7, 9, 1, 6]
    # one candidate only: a chain
    single = LookaheadSession(window=4, ngram=3, verification_set=1)
    assert single.propose([1, 2, 3, 1, 4, 5, 1, 6, 7, 9, 1], max_len=6).tree is None


def test_lookahead_jacobi_guesses_become_the_window_and_pool_ngrams():
    from trtspec.runtime.drafters.lookahead import LookaheadSession

    session = LookaheadSession(window=3, ngram=2, verification_set=4)
    tokens = [10, 11, 10]
    assert session.propose(tokens, max_len=3).token_ids.tolist() == [11, 10, 11]
    # the target kept one draft token (11), then said 12 (so the sequence grows by 11, 12); its
    # rows after that guessed 13, 14 for the next positions (conditioned on the rejected 10, 11)
    session.on_target_tokens([11, 10, 11], [11, 12, 13, 14], num_accepted=1)
    assert session.guesses == [13, 14] and session.guess_start == 5
    assert session.pool[10][0] == (13,) and session.pool[11][0] == (14,)  # (draft token, the next row)
    # a sequence whose last token has no pool entry drafts the window's guesses at its positions
    assert session.propose(tokens + [11, 99], max_len=3).token_ids.tolist() == [13, 14]


def test_lookahead_verification_set_trees_are_greedy_lossless(tiny_llama):
    """Pools seeded with two candidates for every token: each step verifies the verification set
    as a tree (the chain and the other candidate beside it), and the answers are the target's own."""
    from trtspec.runtime import Engine

    with Engine.from_checkpoints(tiny_llama, mode="lookahead", lookahead=[4, 3, 4], max_draft_len=4,
                                 draft_len_schedule=[[1, 4]]) as engine:
        vocab, opened = engine.target.config.vocab_size, engine.drafter.session

        def session(*args, **kwargs):
            seeded = opened(*args, **kwargs)
            seeded.pool = {t: [((t + 1) % vocab, t), ((t * 7) % vocab, t)] for t in range(vocab)}
            return seeded

        engine.drafter.session = session
        seen = spy_drafts(engine)
        for prompt in TINY_PROMPTS:
            assert engine.generate(prompt, max_new_tokens=30).token_ids == \
                engine.generate(prompt, max_new_tokens=30, speculative=False).token_ids
    assert any(d is not None and d.tree is not None for batch in seen for d in batch)
