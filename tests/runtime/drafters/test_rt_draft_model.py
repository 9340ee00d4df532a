"""The external draft model drafter: lossless greedy output, its own cache, self-drafting accepts."""

from __future__ import annotations

import pytest

from tests.runtime.conftest import TINY_PROMPTS, assert_dynamic_trees_lossless, spy_drafts


@pytest.mark.parametrize("prompt", TINY_PROMPTS[:3])
def test_draft_model_greedy_equals_plain_greedy(draft_engine, prompt):
    plain = draft_engine.generate(prompt, max_new_tokens=40, speculative=False)
    spec = draft_engine.generate(prompt, max_new_tokens=40)
    assert spec.token_ids == plain.token_ids
    assert spec.stats.num_drafts > 0 and spec.stats.num_draft_tokens >= spec.stats.num_drafts


def test_the_target_as_its_own_draft_is_accepted_almost_always(tiny_llama):
    """Same weights drafting: every draft token equals the target's argmax (up to near-ties)."""
    from trtspec.runtime import Engine

    engine = Engine.from_checkpoints(tiny_llama, mode="draft-target", draft_dir=tiny_llama, max_draft_len=4)
    result = engine.generate(TINY_PROMPTS[3], max_new_tokens=40)
    assert result.stats.acceptance_rate > 0.95
    assert result.stats.mean_acceptance_length > 4.5
    assert result.token_ids == engine.generate(TINY_PROMPTS[3], max_new_tokens=40, speculative=False).token_ids


def test_draft_model_sampling_runs_and_is_seeded(draft_engine):
    kwargs = {"max_new_tokens": 20, "temperature": 1.0, "top_p": 0.9, "seed": 3}
    first = draft_engine.generate(TINY_PROMPTS[0], **kwargs)
    assert first.token_ids == draft_engine.generate(TINY_PROMPTS[0], **kwargs).token_ids
    assert first.stats.num_drafts > 0 and len(first.token_ids) == 20


def test_confidence_threshold_shortens_drafts(tiny_llama, tiny_llama_draft):
    from trtspec.runtime import Engine

    eager = Engine.from_checkpoints(tiny_llama, mode="draft-target", draft_dir=tiny_llama_draft, max_draft_len=4)
    careful = Engine.from_checkpoints(tiny_llama, mode="draft-target", draft_dir=tiny_llama_draft, max_draft_len=4,
                                      confidence_threshold=0.9)
    a = eager.generate(TINY_PROMPTS[1], max_new_tokens=30)
    b = careful.generate(TINY_PROMPTS[1], max_new_tokens=30)
    assert a.token_ids == b.token_ids
    assert b.stats.num_draft_tokens / b.stats.num_drafts < a.stats.num_draft_tokens / a.stats.num_drafts


TREE = (3, 4, 10)  # topk, depth, num_draft_tokens


@pytest.fixture(scope="module")
def draft_tree_engine(tiny_llama, tiny_llama_draft):
    from trtspec.runtime import Engine

    engine = Engine.from_checkpoints(tiny_llama, mode="draft-target", draft_dir=tiny_llama_draft, max_draft_len=4,
                                     tree=TREE)
    yield engine
    engine.close()


@pytest.mark.parametrize("prompt", TINY_PROMPTS)
def test_draft_model_trees_greedy_equal_plain_greedy(draft_tree_engine, prompt):
    """Alone, every step grows a dynamic tree of 10 nodes from the draft model; the output is the
    target's own greedy output."""
    assert_dynamic_trees_lossless(draft_tree_engine, prompt, TREE)


def test_draft_model_trees_batched_stay_lossless(draft_tree_engine):
    """4 requests side by side, each growing its own tree in the same draft forwards (the schedule
    keeps the tree on at every batch size)."""
    from tests.runtime.loop.test_rt_scheduler import PROMPTS, _concurrently

    alone = [draft_tree_engine.generate(p, max_new_tokens=20, speculative=False).token_ids for p in PROMPTS[:4]]
    with draft_tree_engine.variant(draft_len_schedule=((1, *TREE),)) as batched:
        seen = spy_drafts(batched)
        results = _concurrently(batched, PROMPTS[:4], max_new_tokens=20)
    assert [r.token_ids for r in results] == alone
    assert max(sum(d is not None and d.tree is not None for d in batch) for batch in seen) >= 2


@pytest.mark.parametrize("draft", ["tiny_llama_draft", "sharp_copy"])
def test_draft_model_trees_chosen_by_load_stay_lossless(tiny_llama, draft, request):
    """No schedule: the cost model picks off, a chain or the tree (at some budget) per step for 8
    sequences, from a random draft model (mostly rejected, and as dear as the tiny target: off)
    or a sharp copy of the target (always right; its cost left out of the model, as if it were
    free: drafting); whatever it picks, each sequence gets its plain greedy output, and every step
    that decoded is counted once under its pick."""
    from tests.runtime.loop.test_rt_scheduler import PROMPTS, _concurrently
    from trtspec.runtime import Engine

    engine = Engine.from_checkpoints(tiny_llama, mode="draft-target", draft_dir=request.getfixturevalue(draft),
                                     max_draft_len=4, tree=TREE)
    with engine.variant() as plain:  # its own scheduler: no step of these runs reaches `steps`
        alone = [plain.generate(p, max_new_tokens=20, speculative=False).token_ids for p in PROMPTS]
    steps = []
    engine.scheduler.on_step = steps.append
    engine.scheduler.cost_model.drafts_cost = draft == "tiny_llama_draft"
    results = _concurrently(engine, PROMPTS, max_new_tokens=20)
    engine.close()  # the loop has ended: every step has been reported
    assert [r.token_ids for r in results] == alone
    counted = steps[-1].draft_shapes
    assert sum(counted.values()) == sum(1 for s in steps if s.last_num_decoding)
    if draft == "sharp_copy":
        assert sum(n for key, n in counted.items() if key != "off") > counted.get("off", 0), counted
    else:
        assert counted.get("off", 0) > sum(counted.values()) / 2, counted


@pytest.fixture(scope="module")
def sharp_copy(tiny_llama, tmp_path_factory):
    """The target with its final norm scaled by 30: the same argmax everywhere, the top token's
    probability near 1, so a dynamic tree keeps the whole top-1 path to its full depth."""
    import shutil

    import torch
    from transformers import AutoModelForCausalLM

    path = tmp_path_factory.mktemp("sharp-draft")
    model = AutoModelForCausalLM.from_pretrained(tiny_llama)
    with torch.no_grad():
        model.model.norm.weight.mul_(30.0)
    model.save_pretrained(path)
    for name in ("tokenizer.json", "tokenizer_config.json", "special_tokens_map.json"):
        if (tiny_llama / name).exists():
            shutil.copy(tiny_llama / name, path / name)
    return path


def test_a_sharp_copy_of_the_target_as_tree_drafter_accepts_every_tree_to_its_depth(tiny_llama, sharp_copy):
    """The draft's top-1 path is the target's greedy continuation: every tree's accepted path is
    its whole top-1 path, 4 deep, 4 sequences at once, beside side branches (the trees are not
    chains). This holds only if every tree node is fed at its own position and sees exactly its
    ancestors, and the draft cache, rolled back to the committed tokens after each tree, catches
    up on the accepted path."""
    from tests.runtime.loop.test_rt_scheduler import PROMPTS, _concurrently
    from trtspec.runtime import Engine

    engine = Engine.from_checkpoints(tiny_llama, mode="draft-target", draft_dir=sharp_copy, max_draft_len=4,
                                     draft_len_schedule=[[1, *TREE]])
    alone = [engine.generate(p, max_new_tokens=24, speculative=False).token_ids for p in PROMPTS[:4]]
    seen = spy_drafts(engine)
    results = _concurrently(engine, PROMPTS[:4], max_new_tokens=24)
    engine.close()
    assert [r.token_ids for r in results] == alone
    trees = [d.tree for batch in seen for d in batch]
    assert all(t.max_depth == TREE[1] and not t.is_chain for t in trees)
    drafts = sum(r.stats.num_drafts for r in results)
    assert sum(r.stats.num_accepted_tokens for r in results) == TREE[1] * drafts


def test_draft_model_tree_sampling_is_seeded(draft_tree_engine):
    kwargs = {"max_new_tokens": 20, "temperature": 0.8, "seed": 3}
    first = draft_tree_engine.generate(TINY_PROMPTS[1], **kwargs)
    assert first.token_ids == draft_tree_engine.generate(TINY_PROMPTS[1], **kwargs).token_ids
    assert first.stats.num_drafts > 0 and len(first.token_ids) == 20


def test_every_tree_node_gets_the_draft_models_own_logits_on_its_path(draft_tree_engine, monkeypatch):
    """Two sessions grow trees in the same forwards; each fed node's logits row equals a plain
    forward of the draft model over the prompt and the node's path (its position and its ancestors
    are right, and it sees nothing else)."""
    import torch

    from trtspec.runtime.cache.paged import BlockAllocator, BlockTable, KVPool, SeqKV
    from trtspec.runtime.drafters.dynamic_tree import TreeSearch
    from trtspec.runtime.verify.sampling import SamplingParams
    from trtspec.runtime.verify.tree import TreeShape

    drafter = draft_tree_engine.drafter
    allocator = BlockAllocator(16, 16)
    pool = KVPool.for_model(drafter.kv_config, 16 * 16)
    prompts, sessions = [TINY_PROMPTS[0], TINY_PROMPTS[3]], []
    for _ in prompts:
        table = BlockTable(allocator.allocate(8), 16)
        pool.zero_blocks(table)
        sessions.append(drafter.session([], SamplingParams(), None, tree=TreeShape(*TREE), kv=SeqKV(pool, table)))
    searches, fed = [], []
    init, expanded = TreeSearch.__init__, TreeSearch.expanded

    def record_init(self, *args):
        init(self, *args)
        searches.append(self)

    def record_expanded(self, logits, states):
        fed.extend((self, node, logits[row]) for row, node in enumerate(self.to_feed()))
        expanded(self, logits, states)

    monkeypatch.setattr(TreeSearch, "__init__", record_init)
    monkeypatch.setattr(TreeSearch, "expanded", record_expanded)
    drafts = drafter.propose_batch(sessions, prompts, [TREE[2]] * 2)
    assert [d.size for d in drafts] == [TREE[2]] * 2 and all(s.kv.length == len(p) for s, p in zip(
        sessions, prompts, strict=True))  # the expanded nodes left the cache
    assert len({id(search) for search, _, _ in fed}) == 2 and len(fed) == 2 * TREE[0] * (TREE[1] - 1)
    with torch.inference_mode():
        for search, node, row in fed:
            path, walk = [], node
            while walk >= 0:
                path.insert(0, search.tokens[walk])
                walk = search.parent[walk]
            context = prompts[searches.index(search)] + path
            plain = drafter.model(input_ids=torch.tensor([context])).logits[0, -1]
            assert torch.allclose(row, plain, atol=1e-4), (context, (row - plain).abs().max())
