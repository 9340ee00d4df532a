"""What the load policy's choice costs per step: `CostModel.choose` at draft caps 4, 8, 24 and with a
dynamic tree, timed alone over a fixed, seeded replay of step measurements (no model, no engine).

Why: at a draft cap of 24 (mode suffix's own cap) the policy weighs off, chains of 1..24 and each
of them again drafted only on n-gram matches of at least M tokens, one row per match length seen:
about 190 options a step, each priced by the cost model (trtspec.runtime.policy.by_load). This
times that choice, per step, in process, with the replay below feeding the model what an engine
step would (proposals and their match lengths, the forward's tokens and seconds, verified chains
or trees, the committed tokens), so that before and after a change the same steps are priced.
`digest` is a hash of every step's choice: equal digests, same decisions.

    .venv/bin/python -m benchmarks policy-cost
    .venv/bin/python -m benchmarks policy-cost --cases chain:24 --steps 400 --repeats 7

Cases: chain:K (an n-gram drafter at cap K, match lengths 1..8 seen), tree:TOPK,DEPTH,NODES (a
model drafter, drafts priced, at cap DEPTH, beside its dynamic tree at every budget).
"""

from __future__ import annotations

import argparse
import hashlib
import random
import statistics
import time
from collections.abc import Iterator
from types import SimpleNamespace
from typing import Any

DEFAULT_CASES = "chain:4,chain:8,chain:24,tree:4,6,32"


def parse_case(case: str) -> tuple[int, Any]:
    """(cap, TreeShape or None) for chain:K or tree:TOPK,DEPTH,NODES."""
    from trtspec.runtime.verify.tree import TreeShape

    kind, _, value = case.partition(":")
    if kind == "chain":
        return int(value), None
    topk, depth, nodes = (int(v) for v in value.split(","))
    return depth, TreeShape(topk, depth, nodes)


def _tree_draft(shape: Any, rng: random.Random) -> tuple[Any, list[int]]:
    """A tree draft of `shape`'s nodes (each level's first topk children, listed in score order)
    and an accepted path down it: (draft for observe_verify, accepted node indices)."""
    from trtspec.runtime.verify.tree import Tree

    paths, level = [], [[]]
    while len(paths) < shape.num_nodes and level:
        level = [p + [r] for p in level for r in range(shape.topk)][: shape.num_nodes - len(paths)]
        paths += level
        level = [p for p in level if len(p) < shape.depth][:shape.topk]
    tree = Tree(paths)
    path: list[int] = []
    while rng.random() < 0.6:
        rank = 0 if rng.random() < 0.7 else rng.randrange(shape.topk)
        below = (tree.paths[path[-1]] if path else []) + [rank]
        if below not in tree.paths:
            break
        path.append(tree.paths.index(below))
    return SimpleNamespace(tree=tree, score_rank=list(range(tree.num_nodes)), budget=shape.num_nodes), path


def history(cap: int, shape: Any, steps: int, seed: int = 0) -> Iterator[tuple[int, int, Any]]:
    """Per step: (decoding sequences B, drafters' backlog, what the step measured as a
    `policy.plan.StepRecord` for the draft the model planned): seeded, the same for every run.
    Batch sizes wander over 5..9, lookups match 1..8 tokens, forwards cost 60 ms + 2 ms a token
    with 10 % noise and chains keep a geometric run of 0.7 a position, but every other 50 steps
    12 ms a token and 0.35 (where drafting stops paying)."""
    from trtspec.runtime.policy.plan import StepRecord

    rng = random.Random(seed)
    batch = 8
    for step in range(steps):
        dear = (step // 50) % 2 == 1  # every other 50 steps: compute-bound, drafts rarely kept
        keep, per_token = (0.35, 0.012) if dear else (0.7, 0.002)
        batch = min(9, max(5, batch + rng.choice((-1, 0, 0, 0, 1))))
        backlog = rng.choice((0, 0, 0, 3, 12)) if shape is not None else 0
        asked = batch
        found = asked if shape is not None else sum(rng.random() < 0.6 for _ in range(asked))
        matches = [] if shape is not None else [rng.randint(1, 8) for _ in range(found)]
        verified: list[tuple[int, int, Any, list[int]]] = []
        drafting = rng.random() < 0.5
        for i in range(found if drafting else 0):
            if shape is not None and rng.random() < 0.3:
                draft, path = _tree_draft(shape, rng)
                verified.append((shape.depth, len(path), draft, path))
                continue
            offered = rng.randint(1, cap)
            accepted = 0
            while accepted < offered and rng.random() < keep:
                accepted += 1
            match = matches[i] if matches else 0
            verified.append((offered, accepted, SimpleNamespace(tree=None, match=match), []))
        tokens = batch + sum(v[0] for v in verified)
        record = StepRecord(asked=asked, found=found, matches=matches,
                            draft_positions=max((v[0] for v in verified), default=0),
                            draft_seconds=0.004 * len(verified) if shape is not None else 0.0,
                            forward_tokens=tokens, forward_seconds=(0.06 + per_token * tokens) * rng.uniform(0.9, 1.1),
                            decode_batch=batch if rng.random() < 0.9 else None,
                            verified=verified, committed=batch + sum(v[1] for v in verified))
        yield batch, backlog, record


def run_case(case: str, steps: int, seed: int = 0) -> tuple[list[float], str, int]:
    """(seconds of each step's choice, digest of the choices, options the last step weighed)."""
    from trtspec.runtime.policy.by_load import CostModel
    from trtspec.runtime.policy.plan import record_step

    cap, shape = parse_case(case)
    model = CostModel(cap, drafts_cost=shape is not None)
    seconds, keys = [], []
    for batch, backlog, record in history(cap, shape, steps, seed):
        started = time.perf_counter()
        choice = model.choose(batch, shape, backlog)
        seconds.append(time.perf_counter() - started)
        model.planned = choice
        keys.append(f"{choice.key}:{model.estimate!r}")
        record_step(model, record)
    digest = hashlib.sha256("\n".join(keys).encode()).hexdigest()[:12]
    return seconds, digest, len(model.candidates(shape))


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--cases", default=DEFAULT_CASES, help="chain:K and tree:TOPK,DEPTH,NODES, comma-free between ':'")
    parser.add_argument("--steps", type=int, default=300)
    parser.add_argument("--repeats", type=int, default=5)
    args = parser.parse_args()
    cases = [c for c in args.cases.replace(",chain", ";chain").replace(",tree", ";tree").split(";") if c]
    with open("/proc/loadavg") as f:
        print(f"load average at start: {' '.join(f.read().split()[:3])}")
    print("| case | options | median ms a step (per repeat) | digest |")
    print("|---|---|---|---|")
    for case in cases:
        medians, digests, options = [], set(), 0
        for _ in range(args.repeats):
            seconds, digest, options = run_case(case, args.steps)
            medians.append(1000 * statistics.median(seconds))
            digests.add(digest)
        per = ", ".join(f"{m:.3f}" for m in medians)
        print(f"| {case} | {options} | {statistics.median(medians):.3f} ({per}) | {','.join(sorted(digests))} |")
    with open("/proc/loadavg") as f:
        print(f"load average at end: {' '.join(f.read().split()[:3])}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
