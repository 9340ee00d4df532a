"""Lanes: the allocator starts each sequence at a multiple of the longest sequence's blocks, so a
decode batch's keys are evenly spaced and attention multiplies them in one strided product per key
head (trtspec.runtime.forward.attention_strided). Placement is a speed matter only: any other placement
still works (first fit, gathers), and the numbers are the same either way. The compiled attention
(trtspec.runtime.forward.attention_kernel) reads every sequence where it lies: lanes change nothing there."""

from __future__ import annotations

from tests.runtime.conftest import run_in_flight
from trtspec.runtime.cache.paged import BlockAllocator
from trtspec.runtime.forward.attention_strided import StridedGroup


def test_runs_start_at_free_lanes_then_first_fit():
    allocator = BlockAllocator(12, 16, lane_blocks=4)
    assert allocator.allocate(3) == [0, 1, 2]
    assert allocator.allocate(2) == [4, 5]  # not block 3: the next free lane
    assert allocator.allocate(4) == [8, 9, 10, 11]
    assert allocator.allocate(1) == [3]  # no lane free: first fit
    allocator.free([4, 5])
    assert allocator.allocate(4) == [4, 5, 6, 7]  # a lane freed is a lane again


def test_without_lanes_it_is_first_fit():
    allocator = BlockAllocator(12, 16)
    assert allocator.allocate(3) == [0, 1, 2]
    assert allocator.allocate(2) == [3, 4]


def test_a_decode_batch_attends_in_lanes_and_gets_what_each_gets_alone(ngram_engine, monkeypatch):
    """Three requests at once through the engine's scheduler, reserving different block counts
    (first fit would pack them unevenly): each starts at a lane, their decode steps go through
    StridedGroup, and each output equals the same request alone, token for token. On torch's
    attention route: the compiled one (attention_kernel.py) reads each sequence in place anyway."""
    monkeypatch.setenv("TRTSPEC_CPU_ATTENTION", "torch")
    engine = ngram_engine.variant(max_batch_size=4, kv_cache_reuse=False)
    prompts = [[5, 6, 7, 8, 9] * 3, list(range(20, 31)), [42, 7, 42, 7, 42]]
    budgets = [24, 90, 24]  # the second reserves twice the blocks of the others
    try:
        alone = [engine.generate(p, max_new_tokens=n, speculative=False).token_ids for p, n in zip(prompts, budgets, strict=True)]
        bases = []
        attend = StridedGroup.attend

        def counted(self, *args, **kwargs):
            bases.append([entry.kv.table.base for entry in self.entries])
            return attend(self, *args, **kwargs)

        monkeypatch.setattr(StridedGroup, "attend", counted)
        # the three share decode steps on any machine (threads started one by one overlapped by chance)
        sequences, _ = run_in_flight(engine, prompts, budgets, speculative=False)
        together = [s.output.token_ids for s in sequences]
        lane = engine.scheduler.allocator.lane_blocks * engine.scheduler.allocator.block_size
    finally:
        engine.close()
    assert together == alone
    assert any(len(members) == 3 for members in bases)
    assert lane > 0 and all(base % lane == 0 for members in bases for base in members)
