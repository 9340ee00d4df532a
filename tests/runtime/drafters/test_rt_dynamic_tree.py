"""EAGLE-2 dynamic draft trees: the search on hand-built logits, lossless tree sampling
(chi-square), and greedy engines token for token equal to the target alone, under load too."""

from __future__ import annotations

import pytest
import torch

from tests.runtime.conftest import TINY_PROMPTS, assert_dynamic_trees_lossless, spy_drafts
from tests.runtime.loop.test_rt_scheduler import PROMPTS, _concurrently, _steer_trees_to_the_target
from trtspec.runtime.drafters.dynamic_tree import TreeSearch
from trtspec.runtime.verify.tree import Tree, TreeShape, rejection_accept_tree

SHAPE = (3, 4, 10)  # topk, depth, num_draft_tokens


def _row(**probs):
    """Logits over a vocabulary of 8 whose softmax puts `probs` on tokens t0..t7 (the rest share)."""
    row = torch.full((8,), 1e-6)
    for name, p in probs.items():
        row[int(name[1:])] = p
    return row.log()


def _identity(ids):
    return ids


def test_search_scores_paths_and_keeps_a_tree_by_construction():
    # root: t1 0.6, t2 0.3, t3 0.1 (topk 2 keeps t1, t2)
    search = TreeSearch(TreeShape(topk=2, depth=3, num_draft_tokens=4), 4, _row(t1=0.6, t2=0.3, t3=0.1), None,
                        _identity)
    assert search.to_feed() == [0, 1] and search.tokens == [1, 2]
    # depth 2: under t1 -> t4 0.5, t5 0.5 (paths 0.30, 0.30); under t2 -> t6 0.9, t7 0.1 (0.27, 0.03)
    search.expanded(torch.stack([_row(t4=0.5, t5=0.5), _row(t6=0.9, t7=0.1)]), [None, None])
    # the frontier is the 2 best of the 4 children: t1->t4 and t1->t5 (0.30 each), not t2->t6 (0.27)
    assert [search.tokens[n] for n in search.to_feed()] == [4, 5]
    mask = search.feed_mask(committed=3)  # 3 committed, t1 and t2 fed before
    assert mask.tolist() == [[True] * 3 + [True, False] + [True, False],   # t4 sees t1 (its parent), itself
                             [True] * 3 + [True, False] + [False, True]]   # t5 sees t1, itself
    search.expanded(torch.stack([_row(t0=0.99), _row(t0=0.2, t3=0.8)]), [None, None])
    assert search.done
    tree, tokens = search.tree()
    # best 4 scores: t1 0.6, t2 0.3, t1->t4 0.30, t1->t5 0.30 (t1->t4->t0 0.297 is fifth)
    assert tree.paths == [[0], [1], [0, 0], [0, 1]] and tokens == [1, 2, 4, 5]
    assert all(tree.parent[n] < n for n in range(tree.num_nodes))


def test_search_with_ties_still_keeps_every_parent():
    # a head certain of its token: children score exactly their parent's score (log 1 = 0)
    certain = torch.full((8,), -1e9)
    certain[3] = 0.0
    search = TreeSearch(TreeShape(topk=2, depth=4, num_draft_tokens=5), 5, certain, None, _identity)
    while not search.done:
        search.expanded(certain.expand(len(search.to_feed()), 8), [None] * len(search.to_feed()))
    tree, _ = search.tree()
    assert tree.max_depth == 4 and tree.num_nodes == 5
    for path in tree.paths:
        assert len(path) == 1 or path[:-1] in tree.paths


@pytest.mark.parametrize(("settings", "problem"), [
    ((0, 3, 4), "topk must be at least 1"),
    ((2, 3, 2), "num_draft_tokens must lie between depth (3)"),
    ((2, 3, 11), "the 10 candidates"),
])
def test_unusable_shapes_are_named(settings, problem):
    assert problem in TreeShape(*settings).problems()[0]


def test_tree_sampling_is_lossless_chi_square():
    """Chi-square over 16 tokens: the first committed token, and the second after a given first,
    follow the target exactly whatever the tree (root children t3, t5, t9; t3 has children t1, t2)."""
    from scipy.stats import chisquare

    generator = torch.Generator().manual_seed(0)
    tree = Tree([[0], [1], [2], [0, 0], [0, 1]])
    node_tokens = [3, 5, 9, 1, 2]
    target_probs = torch.softmax(torch.randn(1 + tree.num_nodes, 16, generator=torch.Generator().manual_seed(1)), -1)
    first, second_after_3, trials = torch.zeros(16), torch.zeros(16), 40_000
    for _ in range(trials):
        path, next_token = rejection_accept_tree(tree, node_tokens, target_probs, generator)
        committed = [node_tokens[n] for n in path] + [next_token]
        first[committed[0]] += 1
        if committed[0] == 3 and len(committed) > 1:
            second_after_3[committed[1]] += 1
    assert chisquare(first.numpy(), (target_probs[0] * trials).numpy()).pvalue > 1e-3
    row = target_probs[1 + node_tokens.index(3)]  # the target's distribution after t3 (node 0)
    assert chisquare(second_after_3.numpy(), (row * second_after_3.sum()).numpy()).pvalue > 1e-3
    # the test can fail: a rule that always takes the first child is rejected
    lossy = torch.zeros(16)
    lossy[3] = trials
    assert chisquare(lossy.numpy() + 1e-9, (target_probs[0] * trials).numpy()).pvalue < 1e-6


@pytest.fixture(scope="module")
def dynamic_engine(tiny_llama, modelopt_eagle3):
    from trtspec.runtime import Engine

    engine = Engine.from_checkpoints(tiny_llama, mode="eagle3", draft_dir=modelopt_eagle3[1], max_draft_len=4,
                                     tree=SHAPE)
    yield engine
    engine.close()


@pytest.mark.parametrize("prompt", TINY_PROMPTS)
def test_dynamic_tree_greedy_equals_plain_greedy(dynamic_engine, prompt):
    assert_dynamic_trees_lossless(dynamic_engine, prompt, SHAPE)


def test_dynamic_trees_of_different_shapes_share_one_step_and_stay_lossless(dynamic_engine):
    alone = [dynamic_engine.generate(p, max_new_tokens=20, speculative=False).token_ids for p in PROMPTS]
    with dynamic_engine.variant(draft_len_schedule=((1, 4),)) as batched:
        seen = spy_drafts(batched)
        results = _concurrently(batched, PROMPTS, max_new_tokens=20)
    assert [r.token_ids for r in results] == alone
    shapes = [{tuple(map(tuple, d.tree.paths)) for d in batch if d is not None} for batch in seen]
    assert max(len(s) for s in shapes) >= 2, "no step verified trees of different shapes side by side"


def test_trees_accepted_deep_under_load_stay_lossless(tiny_llama, modelopt_eagle3):
    """Trees whose nodes carry the target's own ranked tokens (the rank-0 child is always right):
    every step accepts a path, its KV kept and the rest dropped, 4 sequences side by side, and the
    head catches up on several verified positions at once; the output is still plain greedy's."""
    from trtspec.runtime import Engine

    engine = Engine.from_checkpoints(tiny_llama, mode="eagle3", draft_dir=modelopt_eagle3[1], max_draft_len=4,
                                     draft_len_schedule=[[1, *SHAPE]])
    alone = [engine.generate(p, max_new_tokens=20, speculative=False).token_ids for p in PROMPTS[:4]]
    _steer_trees_to_the_target(engine, tiny_llama)
    results = _concurrently(engine, PROMPTS[:4], max_new_tokens=20)
    engine.close()
    assert [r.token_ids for r in results] == alone
    assert all(r.stats.mean_acceptance_length >= 2.0 for r in results)


def test_dynamic_tree_sampling_is_seeded_and_accepts(dynamic_engine):
    kwargs = {"max_new_tokens": 24, "temperature": 0.8, "seed": 3}
    first = dynamic_engine.generate(TINY_PROMPTS[1], **kwargs)
    assert first.token_ids == dynamic_engine.generate(TINY_PROMPTS[1], **kwargs).token_ids
    assert first.stats.num_drafts > 0


def test_tree_budget_follows_the_token_budget(dynamic_engine):
    """With room for fewer nodes than the shape asks, every sequence's tree shrinks to fit."""
    with dynamic_engine.variant(max_num_tokens=24, draft_len_schedule=((1, 4),)) as tight:
        seen = spy_drafts(tight)
        results = _concurrently(tight, PROMPTS[:4], max_new_tokens=12)
    alone = [dynamic_engine.generate(p, max_new_tokens=12, speculative=False).token_ids for p in PROMPTS[:4]]
    assert [r.token_ids for r in results] == alone
    for batch in seen:
        assert sum(1 + d.size for d in batch if d is not None) <= 24


def test_a_bad_tree_is_refused_in_one_line(tiny_llama, modelopt_eagle3):
    from trtspec.errors import TrtSpecError
    from trtspec.runtime import Engine

    with pytest.raises(TrtSpecError, match=r"speculative.tree \[2, 3, 2\]: num_draft_tokens must lie between"):
        Engine.from_checkpoints(tiny_llama, mode="eagle3", draft_dir=modelopt_eagle3[1], tree=[2, 3, 2])


def test_the_schedule_picks_tree_chain_or_off_by_batch_size(tiny_llama, modelopt_eagle3):
    """draft_len_schedule rows: alone a dynamic tree, from 2 sequences a chain of 2, from 6 nothing;
    every request still gets exactly its plain greedy output."""
    from trtspec.runtime import Engine

    engine = Engine.from_checkpoints(tiny_llama, mode="eagle3", draft_dir=modelopt_eagle3[1], max_draft_len=4,
                                     draft_len_schedule=[[1, 3, 3, 8], [2, 2], [6, 0]])
    seen, sizes, original = [], [], engine.drafter.propose_batch

    def spy(sessions, tokens, max_lens):
        drafts = original(sessions, tokens, max_lens)
        seen.append((len(sessions), drafts))
        return drafts

    engine.drafter.propose_batch = spy
    engine.scheduler.on_step = lambda stats: sizes.append(stats.last_num_decoding)
    alone = engine.generate(TINY_PROMPTS[1], max_new_tokens=12)
    assert all(d.tree is not None and d.size == 8 for _, batch in seen for d in batch)
    plain = [engine.generate(p, max_new_tokens=16, speculative=False).token_ids for p in PROMPTS]
    seen.clear()
    assert [r.token_ids for r in _concurrently(engine, PROMPTS[:3], max_new_tokens=16)] == plain[:3]
    chains = [d for n, batch in seen for d in batch if n >= 2 and d is not None]
    assert chains and all(d.tree is None and d.size <= 2 for d in chains)
    seen.clear()
    sizes.clear()
    assert [r.token_ids for r in _concurrently(engine, PROMPTS, max_new_tokens=16)] == plain
    assert max(sizes) >= 6 and all(n < 6 for n, _ in seen)  # 6 or more decoding sequences: no drafts
    assert alone.stats.num_drafts > 0
    engine.close()


def test_the_load_policy_may_pick_off_chain_or_tree_each_step_and_says_which(tiny_llama, modelopt_eagle3):
    """No schedule: the cost model picks each step's draft. Forced to go round off, a chain of 2,
    the tree at 5 nodes (half its budget), the full tree and a probe of it, 4 sequences batched
    still get exactly their plain greedy output, each step drafts what was chosen, and the step
    counters (SchedulerStats.draft_shapes) say which draft every step made."""
    from trtspec.runtime import Engine
    from trtspec.runtime.policy.by_load import Choice

    engine = Engine.from_checkpoints(tiny_llama, mode="eagle3", draft_dir=modelopt_eagle3[1], max_draft_len=4,
                                     tree=SHAPE)
    alone = [engine.generate(p, max_new_tokens=16, speculative=False).token_ids for p in PROMPTS[:4]]
    full, half = TreeShape(*SHAPE), TreeShape(SHAPE[0], SHAPE[1], 5)
    rounds = [Choice(0), Choice(2), Choice(4, half), Choice(4, full), Choice(4, full, probe=True)]
    model, chosen, seen = engine.scheduler.cost_model, [], []
    original = engine.drafter.propose_batch

    def forced(batch_size, tree, backlog=0):
        choice = rounds[len(chosen) % len(rounds)]
        chosen.append(choice)
        model.probe = choice.probe
        return choice

    def spy(sessions, tokens, max_lens):
        drafts = original(sessions, tokens, max_lens)
        seen.append((model.planned, drafts))
        return drafts

    model.choose, engine.drafter.propose_batch = forced, spy
    results = _concurrently(engine, PROMPTS[:4], max_new_tokens=16)
    engine.close()
    assert [r.token_ids for r in results] == alone
    assert len(chosen) >= 2 * len(rounds)
    for planned, drafts in seen:  # a lone sequence drafts the full tree without asking the model
        made = [d for d in drafts if d is not None]
        if planned.tree is None:
            assert planned.length == 2 and all(d.tree is None and d.size <= 2 for d in made)
        else:
            assert all(d.tree is not None and d.size == planned.tree.num_nodes for d in made)
        if planned.probe:
            assert len(drafts) == 1
    assert any(p.tree is None for p, _ in seen) and any(p.tree == half for p, _ in seen)
    counts = engine.scheduler.snapshot().draft_shapes
    lone = counts["tree:3,4,10"] - chosen.count(rounds[3])  # steps with one decoding sequence
    assert {choice.key: counts.get(choice.key, 0) for choice in rounds} == \
        {choice.key: chosen.count(choice) + (lone if choice == rounds[3] else 0) for choice in rounds}
    assert lone >= 0 and sum(counts.values()) == len(chosen) + lone


def test_a_path_probability_floor_drops_unlikely_nodes_and_keeps_a_tree():
    # root t1 0.6, t2 0.3, t3 0.1; under t1: t4 0.9 (path 0.54), t5 0.1 (0.06); under t2: t6 0.5 (0.15), t7 0.5
    def grown(floor):
        search = TreeSearch(TreeShape(3, 2, 8, min_path_prob=floor), 8, _row(t1=0.6, t2=0.3, t3=0.1), None,
                            _identity)
        search.expanded(torch.stack([_row(t4=0.9, t5=0.1), _row(t6=0.5, t7=0.5), _row(t0=1.0)]), [None] * 3)
        return search.tree()

    tree, tokens = grown(0.0)
    assert tree.num_nodes == 8  # no floor: the whole budget
    tree, tokens = grown(0.12)  # kept: t1 .6, t4 .54, t2 .3, t6 .15, t7 .15; dropped t3 .1, t5 .06, t3->t0 .1
    assert sorted(tokens) == [1, 2, 4, 6, 7]
    assert all(len(path) == 1 or path[:-1] in tree.paths for path in tree.paths)
    tree, tokens = grown(0.99)  # nothing reaches it: the best node is still verified
    assert tokens == [1]


def test_dynamic_tree_with_a_floor_stays_lossless_and_verifies_fewer_nodes(dynamic_engine):
    with dynamic_engine.variant(tree_min_path_prob=0.2) as floored:
        seen = spy_drafts(floored)
        for prompt in TINY_PROMPTS:
            result = floored.generate(prompt, max_new_tokens=24)
            assert result.token_ids == dynamic_engine.generate(prompt, max_new_tokens=24, speculative=False).token_ids
    drafts = [d for batch in seen for d in batch if d is not None]
    sizes = [d.tree.num_nodes for d in drafts]
    assert sizes and max(sizes) <= SHAPE[2] and min(sizes) < SHAPE[2]
    # each draft names the budget it was cut from, so the load policy prices the nodes verified
    assert {d.budget for d in drafts} == {SHAPE[2]}
