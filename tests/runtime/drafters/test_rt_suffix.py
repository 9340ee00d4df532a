"""suffix (suffix tries over the request and earlier responses): greedy output is the target's own,
token for token, alone and batched in flight, chains and trees, at the mode's own cap (24) too;
sampling stays lossless with drafts that long; the tries' counts, the scoring by frequency, the
draft length by match length, and the global cache's bounds and eviction; the cap from the spec
to the engine."""

from __future__ import annotations

import pytest

from tests.runtime.conftest import TINY_PROMPTS, assert_in_flight_equals_plain


@pytest.fixture(scope="module", params=[{}, {"tree": True, "factor": 2.0}], ids=["chain", "tree"])
def engine(request, tiny_llama):
    from trtspec.runtime import Engine

    # a schedule that always drafts: the cost model might turn drafting off for this cheap target
    engine = Engine.from_checkpoints(tiny_llama, mode="suffix", max_draft_len=6, draft_len_schedule=[[1, 6]],
                                     suffix=request.param)
    yield engine
    engine.close()


@pytest.mark.parametrize("prompt", TINY_PROMPTS)
def test_greedy_equals_plain_greedy(engine, prompt):
    plain = engine.generate(prompt, max_new_tokens=40, speculative=False)
    spec = engine.generate(prompt, max_new_tokens=40)
    assert spec.token_ids == plain.token_ids


def test_drafts_are_made_and_accepted(engine):
    """The repetitive prompt is drafted from and (a random target repeats itself) drafts pass."""
    engine.generate(TINY_PROMPTS[0], max_new_tokens=40)   # an earlier response for the global trie
    spec = engine.generate(TINY_PROMPTS[0], max_new_tokens=40)
    assert spec.stats.num_drafts > 0 and spec.stats.num_accepted_tokens > 0


def test_batched_in_flight_equals_plain(engine):
    """Eight requests from threads share steps (and the global trie); each answer is its plain greedy one."""
    prompts = [TINY_PROMPTS[i % len(TINY_PROMPTS)] + [i] for i in range(8)]
    results = assert_in_flight_equals_plain(engine, prompts, 24)
    assert sum(r.stats.num_drafts for r in results) > 0


def test_trie_counts_every_substring_up_to_depth():
    from trtspec.runtime.drafters.suffix import SuffixTrie

    trie = SuffixTrie(depth=3)
    trie.extend(0, [1, 2, 1, 2])
    trie.extend(0, [3])                       # grows where it ended: 1 2 1 2 3
    assert trie.root.count == 5
    assert trie.find([1]).count == 2 and trie.find([1, 2]).count == 2 and trie.find([2, 1, 2]).count == 1
    assert trie.find([1, 2, 3]).count == 1 and trie.find([2, 1, 2, 3]) is None   # cut at depth 3
    # nodes: 1 2 3 | 12 21 23 | 121 212 123 (the nodes of distinct substrings of 1..3 tokens)
    assert trie.num_nodes == 9
    trie.extend(1, [2, 3])
    trie.remove(0)                            # only the other sequence's substrings stay
    assert trie.num_nodes == 3 and trie.find([2, 3]).count == 1 and trie.find([1]) is None and trie.root.count == 2


def test_drafts_follow_the_most_frequent_continuation_and_the_match_length():
    from trtspec.runtime.drafters.suffix import SuffixTrie, speculate

    trie = SuffixTrie(depth=8)
    # after 7: 8 three times, 9 once; after 7 8: 4 twice, 5 once
    seq = [7, 8, 4, 7, 8, 4, 7, 8, 5, 7, 9, 1, 7]
    trie.extend(0, seq)
    score, match, tokens, parents = speculate(trie, seq, max_len=8, factor=1.0, offset=0.0, min_token_prob=0.1,
                                              tree=False)
    # match 1 ([7]: 5 occurrences, the last one at the end) drafts 1 token: 8 at 3/5; match 2 ([1, 7])
    # is not found before the end (its only occurrence is the context's own)
    assert (match, tokens, parents) == (1, [8], [-1]) and score == pytest.approx(3 / 5)
    # factor 3: up to 3 tokens from a 1-token match, 8 (3/5) then 4 (3/5 * 2/3), then 7 (2/5 * 1)
    score, match, tokens, _ = speculate(trie, seq, 8, 3.0, 0.0, 0.1, False)
    assert tokens == [8, 4, 7] and score == pytest.approx(3 / 5 + 2 / 5 + 2 / 5)
    # min_token_prob 0.5 stops before 4 (0.4)
    assert speculate(trie, seq, 8, 3.0, 0.0, 0.5, False)[2] == [8]
    # a tree of 5, best first: 8 (0.6), 8 4 (0.4), 8 4 7 (0.4), 8 4 7 8 (0.4), then of the 0.2s the
    # first found: 9, the root's other child
    score, match, tokens, parents = speculate(trie, seq, 5, 6.0, 0.0, 0.1, True)
    assert (tokens, parents) == ([8, 4, 7, 8, 9], [-1, 0, 1, 2, -1])
    assert score == pytest.approx(0.6 + 3 * 0.4 + 0.2)


def test_tree_drafts_are_trees_whose_rank_zero_path_is_the_chain():
    from trtspec.runtime.drafters.suffix import as_draft

    draft = as_draft([8, 4, 9, 5], [-1, 0, -1, 0], match=1)
    assert draft.tree.paths == [[0], [1], [0, 0], [0, 1]] and draft.token_ids.tolist() == [8, 9, 4, 5]
    assert draft.match == 1
    chain = as_draft([8, 4, 7], [-1, 0, 1], match=2)
    assert chain.tree is None and chain.token_ids.tolist() == [8, 4, 7]


def test_the_global_trie_drafts_an_earlier_response():
    from trtspec.runtime.drafters.suffix import SuffixDrafter

    drafter = SuffixDrafter(max_cached_requests=4)
    first = drafter.session([1, 2, 3], None, None)
    first.propose([1, 2, 3, 40, 41, 42, 43, 44], max_len=4)      # its output 40..44 enters the global trie
    second = drafter.session([9, 9, 9], None, None)
    # the second request's prompt never had 40 41: only the global trie continues it
    draft = second.propose([9, 9, 9, 40, 41], max_len=4)
    assert draft.token_ids.tolist() == [42, 43] and draft.match == 2     # factor 1: a 2-token match drafts 2
    # without a global trie: nothing to draft
    alone = SuffixDrafter(max_cached_requests=0)
    alone.session([1, 2, 3], None, None).propose([1, 2, 3, 40, 41, 42, 43, 44], 4)
    assert alone.session([9, 9, 9], None, None).propose([9, 9, 9, 40, 41], 4) is None


def test_the_global_trie_is_bounded_and_evicts_the_oldest():
    from trtspec.runtime.drafters.suffix import SuffixDrafter

    drafter = SuffixDrafter(depth=4, max_cached_requests=3, max_cached_nodes=10_000)
    cache = drafter.cache
    for n in range(5):
        drafter.session([0], None, None).propose([0] + [100 * n + i for i in range(6)], 4)
    assert len(cache.cached) == 3 and cache.num_evicted == 2
    assert cache.trie.find([100, 101]) is None and cache.trie.find([400, 401]) is not None   # FIFO: 0 and 1 went
    # every node left belongs to the three cached responses: 6 distinct tokens, 4 deep -> 6+5+4+3 nodes each
    assert cache.trie.num_nodes == 3 * 18 and cache.trie.root.count == 3 * 6
    # the node bound: one response of 18 nodes fits in 40, a third one evicts the first
    bounded = SuffixDrafter(depth=4, max_cached_nodes=40)
    for n in range(3):
        bounded.session([0], None, None).propose([0] + [100 * n + i for i in range(6)], 4)
        assert bounded.cache.trie.num_nodes <= 40
    assert list(bounded.cache.cached) == [2, 3] and bounded.cache.num_evicted == 1


def test_a_running_request_evicted_stops_adding():
    from trtspec.runtime.drafters.suffix import SuffixDrafter

    drafter = SuffixDrafter(depth=4, max_cached_requests=1)
    first = drafter.session([0], None, None)
    first.propose([0, 1, 2], 4)
    drafter.session([0], None, None).propose([0, 7, 8], 4)            # evicts the first response
    first.propose([0, 1, 2, 3, 4], 4)                                  # still drafts from its own trie
    assert drafter.cache.trie.find([3]) is None and drafter.cache.trie.find([7, 8]) is not None


# trtllm takes suffix at the spec since dbef860 (TensorRT-LLM 1.3's suffix automaton for Dynamo
# targets) and refuses it on 1.2.1 at build: tests/builders/test_contract_1_3.py
@pytest.mark.parametrize("backend", ["trtllm-engine"])
def test_the_gpu_backends_refuse_suffix_on_1_2_1_in_one_line(backend, tiny_llama):
    from trtspec.errors import SpecError
    from trtspec.spec.schema import validate_spec

    with pytest.raises(SpecError) as caught:
        validate_spec({"model": {"source": str(tiny_llama)}, "speculative": {"mode": "suffix"},
                       "build": {"backend": backend}})
    lines = str(caught.value).strip().splitlines()
    assert len(lines) == 1 and "TensorRT-LLM 1.2.1 has no suffix decoding" in lines[0] and "mode ngram" in lines[0]


def test_the_spec_section_reaches_the_drafter(in_tmp, tiny_llama):
    """speculative.suffix -> engine.json's runtime -> the cpu engine's drafter; its own cap
    (suffix.max_draft_len) is what the engine is built for, not speculative.max_draft_len; a spec
    asking a served engine for more than it was built for is refused in one line."""
    import json

    from trtspec.builders import build
    from trtspec.errors import IncompatibleArtifactError
    from trtspec.repository import cross_check
    from trtspec.runtime.loading import load_engine
    from trtspec.spec.schema import validate_spec

    data = {"model": {"source": str(tiny_llama)}, "speculative": {"mode": "suffix", "max_draft_len": 3, "suffix": {
        "depth": 12, "tree": True, "max_cached_requests": 7, "max_draft_len": 20}}}
    spec = validate_spec(data)
    engine_dir = build(spec).engine_dir
    bundle = json.loads((engine_dir / "engine.json").read_text())
    assert bundle["runtime"]["suffix"]["depth"] == 12 and bundle["build_config"]["max_draft_len"] == 20
    with load_engine(engine_dir) as engine:
        drafter = engine.drafter
        assert (drafter.depth, drafter.use_tree, drafter.max_cached_requests) == (12, True, 7)
        assert engine.max_draft_len == drafter.max_draft_len == 20
    data["speculative"]["suffix"]["max_draft_len"] = 21
    with pytest.raises(IncompatibleArtifactError) as raised:
        cross_check(bundle, validate_spec(data))
    assert "speculative.suffix.max_draft_len 21 exceeds the engine's max_draft_len 20" in str(raised.value)
    assert "\n" not in str(raised.value)


def test_each_mode_has_its_cap_and_suffix_takes_upstreams():
    from trtspec import modes
    from trtspec.errors import SpecError
    from trtspec.spec.schema import validate_spec

    def speculative(**fields):
        return validate_spec({"speculative": fields}).speculative

    # vLLM's suffix default: num_speculative_tokens = suffix_decoding_max_tree_depth (24)
    assert speculative(mode="suffix").draft_cap == 24 and speculative(mode="suffix", max_draft_len=8).draft_cap == 24
    assert speculative(mode="suffix", suffix={"max_draft_len": 8}).draft_cap == 8
    assert speculative(mode="ngram", suffix={"max_draft_len": 8}).draft_cap == 4
    assert modes.draft_cap_field("suffix") == "speculative.suffix.max_draft_len"
    assert modes.draft_cap_field("ngram") == "speculative.max_draft_len"
    with pytest.raises(SpecError) as raised:
        speculative(mode="suffix", suffix={"max_draft_len": 65})
    lines = str(raised.value).strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("speculative.suffix.max_draft_len:") and "65" in lines[0]


@pytest.fixture(scope="module", params=[((1, 24),), None], ids=["cap-24", "load-policy"])
def capped_engine(request, tiny_llama):
    """Suffix at its own cap (24, the defaults otherwise): drafting at every step, or as the load
    policy chooses (chains of 1..24, on every match length it has seen) once two sequences run."""
    from trtspec.runtime import Engine

    engine = Engine.from_checkpoints(tiny_llama, mode="suffix", max_draft_len=24, draft_len_schedule=request.param)
    yield engine
    engine.close()


def test_the_own_cap_drafts_past_the_shared_one_and_equals_plain_in_flight(capped_engine):
    """Eight requests in flight, each its plain greedy answer token for token; the tiny random
    target falls into loops, whose matches grow, so drafts run past 8 tokens and pass there.
    Under the load policy the chain length follows measured step times (a loaded machine chose
    short chains in a fresh-clone CI run), so there only the equality and the cap are asserted."""
    prompts = [TINY_PROMPTS[i % len(TINY_PROMPTS)] + [i] for i in range(8)]
    results = assert_in_flight_equals_plain(capped_engine, prompts, 64)
    alone = capped_engine.generate(TINY_PROMPTS[3], max_new_tokens=64)
    assert alone.token_ids == capped_engine.generate(TINY_PROMPTS[3], max_new_tokens=64, speculative=False).token_ids
    positions = [r.stats.accepted_per_position for r in results] + [alone.stats.accepted_per_position]
    assert max(len(p) for p in positions) <= 24                           # never past the cap
    if capped_engine.config.draft_len_schedule:                           # chains fixed at 24
        assert any(len(p) > 8 and p[8] > 0 for p in positions)            # a 9th draft token accepted


def test_sampling_at_the_cap_is_reproducible_and_drafts(tiny_llama):
    """The engine path of sampling at the cap (its distribution: the test below): a seed gives
    the same tokens again, another seed others, and drafts were verified. Without the global trie:
    with it, the first answer changes the second's drafts, and with them which random draws the
    verification makes (the same distribution, not the same tokens)."""
    from trtspec.runtime import Engine

    kwargs = {"max_new_tokens": 48, "temperature": 0.8, "top_k": 50, "top_p": 0.95}
    with Engine.from_checkpoints(tiny_llama, mode="suffix", max_draft_len=24, draft_len_schedule=[[1, 24]],
                                 suffix={"max_cached_requests": 0}) as engine:
        first = engine.generate(TINY_PROMPTS[0], seed=11, **kwargs)
        assert first.token_ids == engine.generate(TINY_PROMPTS[0], seed=11, **kwargs).token_ids
        assert first.token_ids != engine.generate(TINY_PROMPTS[0], seed=12, **kwargs).token_ids
    assert first.stats.num_drafts > 0


def test_long_point_mass_drafts_keep_sampling_lossless():
    """Vocab 16, drafts of 24 point-mass tokens (suffix decoding's kind, its cap): the token
    committed at every reached position follows the target's distribution (chi-square)."""
    import torch

    from tests.runtime.verify.test_rt_sampling import _chi_square_p_value
    from trtspec.runtime.verify import sampling

    vocab, k, batch = 16, 24, 40_000
    generator = torch.Generator().manual_seed(68)
    # peaked rows (a top token at 0.9 and more) so that deep positions are reached; token 0 never emitted
    spread = torch.rand(k + 1, vocab, generator=generator) ** 3
    spread[:, 0] = 0.0
    top = torch.randint(1, vocab, (k + 1,), generator=generator)
    target_probs = 0.1 * spread / spread.sum(-1, keepdim=True) + 0.9 * torch.nn.functional.one_hot(top, vocab)
    # drafts: usually the target's top token, sometimes a random one (0 among them: no target mass)
    noise = torch.randint(0, vocab, (batch, k), generator=generator)
    draft_ids = torch.where(torch.rand(batch, k, generator=generator) < 0.05, noise, top[:k].expand(batch, k))
    accepted, next_token = sampling.rejection_accept_batch(draft_ids, None, target_probs.expand(batch, k + 1, vocab),
                                                           generator)
    committed = torch.cat([draft_ids, torch.zeros(batch, 1, dtype=torch.long)], dim=1)
    committed[torch.arange(batch), accepted] = next_token
    tested = 0
    for position in range(k + 1):
        reached = accepted >= position
        if int(reached.sum()) < 1000:
            continue
        counts = torch.bincount(committed[reached, position], minlength=vocab).float()
        assert _chi_square_p_value(counts, target_probs[position]) > 1e-3, f"position {position}"
        tested += 1
    assert tested > 16   # positions well past a cap of 8 were reached and checked


def test_tune_writes_the_suffix_cap_it_chose(in_tmp):
    """tune's choice for mode suffix lands in the field its engine is built for (the shared one too)."""
    from trtspec.bench.tune import write_draft_len
    from trtspec.spec.loading import load_spec

    spec = in_tmp / "trtspec.yaml"
    spec.write_text("speculative:\n  mode: suffix\n  max_draft_len: 4\n  suffix:\n    depth: 24\n")
    write_draft_len(spec, 16)
    loaded = load_spec(spec).speculative
    assert (loaded.draft_cap, loaded.suffix.max_draft_len, loaded.max_draft_len) == (16, 16, 16)
    assert "    max_draft_len: 16" in spec.read_text()
