"""The cost model with a draft tree: trees and chains measured from each other, priced by the
nodes they verify, chosen against chains and off by load, and probed while not chosen."""

from __future__ import annotations

from trtspec.runtime.policy.by_load import CostModel


def test_probes_stay_frequent_while_the_probed_draft_is_near():
    """In 8 sequences at 60 ms + 1.5 ms a token, with the tree's branches worth something (one
    tree in 3 gains 4 tokens off the top path, one 2), a chain of 1 is best and the best tree
    comes to 0.87 of its rate: near enough that the tree is probed every 32 steps, never rarer."""
    from trtspec.runtime.verify.tree import TreeShape

    shape = TreeShape(4, 4, 16)
    near = CostModel(4, drafts_cost=False)
    _trees_measured(near, lambda n: 0.06 + 0.0015 * n, [BRANCH, SECOND, MISS])
    rates = {c.key: near.rate(8, c) for c in near.candidates(shape)}
    assert max(rates, key=rates.get) == "chain:1" and 0.8 < rates["tree:4,4,8"] / rates["chain:1"] < 0.9
    probes, estimates = [], set()
    for i in range(96):
        if near.choose(8, shape).probe:
            probes.append(i)
            assert near.estimate is None  # one sequence drafts the tree: no outcome of the chain
        else:
            estimates.add(near.estimate)
    assert probes == [31, 63, 95] and near.backoff == 0
    assert estimates == {rates["chain:1"]}  # every other step measures the chain's own estimate


# A dynamic tree of topk 4, depth 4, 16 nodes, as a drafter might return it, and the places of its
# nodes in the search's score order (a budget of N keeps the N best: 8 nodes keep [0] .. [1, 0]).
TREE_PATHS = [[0], [1], [2], [3], [0, 0], [0, 1], [0, 2], [0, 3], [1, 0], [1, 1], [0, 0, 0], [0, 0, 1], [0, 1, 0],
              [0, 0, 0, 0], [0, 0, 0, 1], [0, 1, 0, 0]]
SCORE_ORDER = [[0], [0, 0], [1], [0, 0, 0], [0, 1], [2], [0, 0, 0, 0], [1, 0], [3], [0, 2], [0, 1, 0], [0, 0, 1],
               [0, 3], [1, 1], [0, 0, 0, 1], [0, 1, 0, 0]]
TOP1 = ([0], [0, 0], [0, 0, 0], [0, 0, 0, 0])    # the top-1 path all the way: 4 tokens at 16 and 8 nodes, 3 at 4
BRANCH = ([0], [0, 1], [0, 1, 0], [0, 1, 0, 0])  # 4 tokens at 16 nodes, 2 at 8, 1 at 4; the chain gets 1
SECOND = ([1], [1, 0])                           # 2 tokens at 16 and 8 nodes, 1 at 4; the chain gets none
MISS = ()                                        # nothing accepted


def _tree_draft(accepted):
    """(draft, accepted path) for observe_verify: the tree above, `accepted` its accepted paths."""
    from types import SimpleNamespace

    from trtspec.runtime.verify.tree import Tree

    tree = Tree(TREE_PATHS)
    draft = SimpleNamespace(tree=tree, score_rank=[SCORE_ORDER.index(p) for p in tree.paths])
    return draft, [tree.paths.index(list(p)) for p in accepted]


def _trees_measured(model: CostModel, seconds_for_tokens, patterns) -> None:
    """Forward timings, then only tree drafts (chains never ran), `patterns` in turn."""
    from trtspec.runtime.verify.tree import TreeShape

    for n in (1, 2, 4, 8, 16, 32, 64, 128) * 3:
        model.observe_forward(n, seconds_for_tokens(n))
    model.candidates(TreeShape(4, 4, 16))
    for budget in (4, 8, 16):  # the budgets the engine's tree is weighed at
        model.tree_gain(TreeShape(4, 4, budget))
    for _ in range(100):
        for accepted in patterns:
            draft, path = _tree_draft(accepted)
            model.observe_verify(4, len(path), draft, path)


def test_tree_drafts_measure_the_chain_and_every_smaller_tree():
    """One kind of draft measured, the others estimated from it: a tree's top-1 path is the chain
    the drafter would have drafted, and its N' best-scored nodes the tree a budget of N' keeps."""
    from trtspec.runtime.verify.tree import TreeShape

    model = CostModel(6, drafts_cost=False)
    _trees_measured(model, lambda n: 0.06 + 0.0022 * n, [BRANCH])
    # the chain passed its first token every time and failed the second (the path turned to rank 1)
    assert abs(model.chain_gain(1) - 1.0) < 0.02 and abs(model.chain_gain(4) - 1.0) < 0.02
    # the tree: 4 tokens at 16 nodes; cut at the first node ranked 8th or worse: 2; at 4th: 1
    gains = {n: model.tree_gain(TreeShape(4, 4, n)) for n in (4, 8, 16)}
    assert [round(gains[n], 1) for n in (4, 8, 16)] == [1.0, 2.0, 4.0]
    # censored: a top-1 path that ends at a leaf says nothing about the chain's 5th token
    leaf = CostModel(6, drafts_cost=False)
    _trees_measured(leaf, lambda n: 0.06 + 0.0022 * n, [TOP1])
    assert abs(leaf.chain_gain(4) - 4.0) < 0.05 and leaf.offered[4] == 2.0  # position 5: the prior only


def test_a_tree_cut_by_its_floor_is_priced_by_the_nodes_it_verified():
    """With speculative.tree.min_path_prob a 16-node budget often verifies a handful of nodes: the
    model measures that per budget (V(N)) and prices it, where it priced the budget before; the
    drafts count toward their budget, not toward a budget the size of the cut tree."""
    from types import SimpleNamespace

    from trtspec.runtime.policy.by_load import Choice
    from trtspec.runtime.verify.tree import Tree, TreeShape

    shape = TreeShape(4, 4, 16)
    best5 = SCORE_ORDER[:5]  # what a floor left of the 16 best: a prefix of the score order, a tree
    cut_tree = Tree(best5)
    cut = SimpleNamespace(tree=cut_tree, score_rank=[best5.index(p) for p in cut_tree.paths], budget=16)
    uncut, _ = _tree_draft(())
    costs = lambda n: 0.06 + 0.0022 * n  # noqa: E731
    models = {name: CostModel(4, drafts_cost=False) for name in ("cut", "uncut")}
    for name, model in models.items():
        _trees_measured(model, costs, [])
        assert model.verified_nodes(shape) == 16.0  # before any draft: the budget
        draft = cut if name == "cut" else uncut
        for _ in range(200):  # both accept [0], [0, 1]: 2 tokens from 5 nodes on, 1 at 4, the chain 1
            path = [draft.tree.paths.index(p) for p in ([0], [0, 1])]
            model.observe_verify(4, 2, draft, path)
    cut_model, uncut_model = models["cut"], models["uncut"]
    assert 5.0 < cut_model.verified_nodes(shape) < 5.3 and uncut_model.verified_nodes(shape) == 16.0
    assert cut_model.verified_nodes(TreeShape(4, 4, 4)) < 4.2        # a smaller budget keeps 4 of the 5
    assert set(cut_model.tree_accepted) == {4, 8, 16}                 # no budget of 5 appeared
    assert abs(cut_model.tree_gain(shape) - uncut_model.tree_gain(shape)) < 1e-9
    tree16 = Choice(4, shape)
    assert cut_model.rate(8, tree16) > 1.25 * uncut_model.rate(8, tree16)  # 8 x 5 nodes, not 8 x 16
    # 4 sequences: 5 nodes for 2 tokens beat a chain of 1 (the 8- and 16-node budgets tie: the
    # cheaper is taken); 8 nodes for them do not
    assert cut_model.choose(4, shape).key == "tree:4,4,8" and uncut_model.choose(4, shape).key == "chain:1"


def test_the_cost_model_chooses_tree_chain_or_off_by_load():
    """Hand-fed costs: a verify pass of n tokens takes 60 ms + 2.2 ms n (this CPU's order), the
    drafter is free; acceptance measured from tree drafts only."""
    from trtspec.runtime.verify.tree import TreeShape

    shape = TreeShape(4, 4, 16)
    # 2 of 3 trees accept 4 tokens off the top-1 path (the chain gets 1 of them), 1 of 3 nothing
    model = CostModel(4, drafts_cost=False)
    _trees_measured(model, lambda n: 0.06 + 0.0022 * n, [BRANCH, BRANCH, MISS])
    # 2 sequences: 32 nodes cost 70 ms more and bring 2.7 tokens each: the full tree (1.11x the next)
    assert model.choose(2, shape).key == "tree:4,4,16"
    # 8 sequences: 128 nodes would cost 280 ms; one chain token each (67% accepted) pays best
    assert model.choose(8, shape).key == "chain:1"
    # the branches help less (one of 3 trees takes the second-ranked token, 2 tokens, kept at 8
    # nodes): 2 sequences get the 8-node tree, the 16-node one's extra nodes bring nothing more
    smaller = CostModel(4, drafts_cost=False)
    _trees_measured(smaller, lambda n: 0.06 + 0.0022 * n, [BRANCH, SECOND, MISS])
    assert smaller.choose(2, shape).key == "tree:4,4,8"
    assert smaller.choose(8, shape).key == "chain:1"
    # a tree whose other branches never pay (only the top-1 path is accepted): the chain of its
    # depth accepts as much for 12 fewer nodes, even where tokens are cheap
    top1 = CostModel(4, drafts_cost=False)
    _trees_measured(top1, lambda n: 0.06 + 0.0005 * n, [TOP1, TOP1, MISS])
    assert top1.choose(2, shape).key == "chain:4"
    # compute-bound (every token 10 ms, a step of one token 11 ms) and little accepted: off; after
    # 99 steps (16 nodes add twice a step's cost: PROBE_SHARE) one sequence probes the full tree
    # (the probe measures the chain too), then twice as long after
    dear = CostModel(4, drafts_cost=False)
    _trees_measured(dear, lambda n: 0.001 + 0.01 * n, [MISS, MISS, SECOND])
    keys = [dear.choose(8, shape).key for _ in range(100)]
    assert set(keys) == {"off", "probe:tree:4,4,16"}
    keys += [dear.choose(8, shape).key for _ in range(200)]
    assert [i for i, key in enumerate(keys) if key.startswith("probe")] == [98, 296]


def test_a_dear_drafter_tips_the_choice_from_tree_to_chain():
    """The same acceptance as the 8-node tree's win above, but each draft forward costs 4 ms + 1 ms
    a row: a tree's 4 forwards (13 rows per sequence) cost more than a chain of 1's single row."""
    from trtspec.runtime.verify.tree import TreeShape

    shape = TreeShape(4, 4, 16)
    free, paid = CostModel(4, drafts_cost=False), CostModel(4, drafts_cost=True)
    for model in (free, paid):
        _trees_measured(model, lambda n: 0.06 + 0.0022 * n, [BRANCH, SECOND, MISS])
    for _ in range(20):
        for rows in (1, 2, 4, 8, 16, 32, 64):
            paid.observe_draft(rows, 1, 0.004 + 0.001 * rows)
    assert free.choose(2, shape).key == "tree:4,4,8"
    assert paid.choose(2, shape).key == "chain:1"  # 1.08x the 16-node tree, the best of the trees
