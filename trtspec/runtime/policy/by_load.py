"""Speculation that adapts to load: which draft each sequence makes in a step of B sequences.

Why: verifying k draft tokens per sequence makes a step feed B (k + 1) tokens instead of B. At
batch 1 on a CPU that costs little more than one token (the weights are read once either way);
as B grows the step turns compute-bound and the extra tokens cost almost their full price, so
drafting stops paying (the reason vLLM, SGLang and TensorRT-LLM shorten or drop drafts under load).
A tree pays the same way, only more so: its N nodes cost what a chain of N would.

Two sources, in this order:
1. A measured table, `speculative.draft_len_schedule` ([[batch_size, draft_len], ...] and tree
   rows, written by `trtspec tune --concurrency 1,2,4,8`; trtspec.runtime.policy.plan).
2. Otherwise, for two or more sequences, a cost model fed by the engine's own measurements
   (`CostModel.choose`): per step it picks, among off, chains of 1..max_draft_len and the engine's
   tree (a dynamic tree also at smaller node budgets: N, N/2, N/4, ... down to its depth), the
   draft with the most committed tokens per second (a lone sequence drafts the engine's own
   draft: its verify pass costs about one plain step, and its seeded sampling stays reproducible),

       chain k:  B (1 + f G(k))  / (T(B + f B k) + k D(B))
       tree N:   B (1 + f E(N))  / (T(B + f B V(N)) + d D(B r))  off: B / T(B)

   G(k) = sum_{j<k} q_j: a chain's expected accepted tokens, q_j how often its first j + 1
   tokens are all accepted (the product of each position's pass rate, measured over the recent
   drafts where that position was at stake: every earlier one passed);
   E(N) = R(N) G(d): a tree's expected accepted tokens (d its depth), R(N) its measured gain over
   its own top-1 path (below); V(N): the nodes a tree of budget N really verifies, measured (N
   without `min_path_prob`; with it, the nodes whose path probability reaches the floor);
   f: how often the drafter proposes anything (n-gram lookup often finds nothing);
   T(n): a target forward over n tokens, measured at this batch size where it can be
   (trtspec.runtime.policy.forward_costs);
   D(x): one batched draft forward of x rows (model drafters; n-gram lookup costs nothing); a
   chain of k makes k forwards of B rows, a dynamic tree d forwards of r B rows on average
   (r = (1 + topk (d - 1)) / d: the catch-up row, then topk frontier nodes per depth);
   and a draft of either kind adds (D(B + L) - D(B)) / CATCH_UP_HORIZON, L the rows the drafters
   are behind (positions verified while they did not draft; 0 for n-gram lookup).
   For n-gram lookup, chains are also weighed drafted only where the lookup matched at least M
   tokens (Choice.min_match, step key chain:K@M): f and G then count only those drafts
   (trtspec.runtime.policy.ngram_matches: a 3-token match's draft passes far more often than a 2-token
   one's, and in a full batch only the former pay).

Chain and tree acceptance, from each other. A tree's top-1 path (the rank-0 child at every depth)
is the chain the same drafter would have drafted (greedy: the same argmax tokens, fed the same
way), so every verified tree also measures the chain: its accepted path's leading rank-0 nodes
were accepted chain tokens; the next chain token was rejected where the path turns to a lower
rank, or ends below a rank-0 child it did not take; where the tree lacks that rank-0 child the
chain's fate is unknown and nothing is recorded for it (censored). So G stays current whatever
runs. The tree's own figure is the ratio R(N) = sum accepted(N) / sum top-1 accepted over recent
tree drafts (the uplift the other branches bring), which carries over when the text changes what
G is. A dynamic tree of N' < N nodes keeps exactly the N' best-scored of the same candidates
(trtspec.runtime.drafters.dynamic_tree), so under greedy its accepted path is the N-tree's
path cut at the first node whose score rank is N' or more: one tree draft measures every
smaller budget (Draft.score_rank). Under sampling these are estimates (the chain samples, the
tree tries its top-k children), which is all a cost model needs. Before tree drafts are seen
R(N) = 1 + 0.3 log2(N / d) (SmolLM2's 5-minute head, docs/BENCHMARKS-log.md: trees of 8 and 16
nodes, depth 4, accepted 1.31x and 1.72x the chain's tokens).

Probes (`probe`): while the choice is not the tree, every `probe_every` steps one sequence drafts
the full tree anyway (a tree probe measures the chain too); without a tree, every PROBE_EVERY-th
step off, one sequence drafts max_draft_len. A probe adds one sequence's draft to the step, not
B of them (at batch 8 and k = 4 all B drafting fed 40 tokens instead of 12), and probes are
spaced further where they are dear, so that they cost at most PROBE_SHARE of the time (their
verified tokens, draft forwards and catch-up, from the same fits). While the probed
draft's estimate stays far below the best (under PROBE_FAR of its rate), each probe doubles the
wait for the next, up to 2^MAX_BACKOFF: in a full batch on a CPU, where a 16-node tree is nowhere
near paying, probes cost almost nothing; when the estimate comes near, they are frequent again.
The choice itself needs no probe to follow the load: T(n) is measured on every step. Before
enough steps are measured the model assumes a verify pass costs 1 + 0.035 n plain steps
(docs/BENCHMARKS-engine.md) and acceptance 0.5 per position.

Outcomes (`observe_step`): a step that drafted what `choose` picked (not a probe) committed some
tokens in some time; their rate over the estimate that picked the draft is averaged (decayed per
step, with a prior of "as estimated"), and drafts' estimates are scaled by that mean where it is
below 1. The estimate that wins among several noisy ones reads high on average; this takes the
bias out, and the prior's weight comes back while nothing is drafted, so the correction never shuts
drafting off for good.
"""

from __future__ import annotations

import math
from typing import Any

from trtspec.runtime.policy.choices import Choice, draft_work, tree_budgets, with_budget
from trtspec.runtime.policy.decayed_line import DecayedLine
from trtspec.runtime.policy.forward_costs import ForwardCosts
from trtspec.runtime.policy.ngram_matches import MatchStats
from trtspec.runtime.policy.step_rates import StepRates

PROBE_EVERY = 8
DECAY = 0.98            # forgetting per observation: the machine's speed and the text change
# Acceptance forgets per step, not per draft: the B drafts of one step share one step's DECAY. Why:
# per draft, a batch of 16 (4 n-gram drafts a step) remembered ~12 steps, about 50 drafts; so
# noisy an estimate chooses drafting whenever it happens to read high, and at concurrency 16 the
# steps that drafted a chain of 2 kept 7 % fewer tokens than the estimate that chose them
# (in process, 2026-11-26; docs/BENCHMARKS-log.md, "Drafting only on long n-gram matches").
PRIOR_ACCEPT = 0.5      # acceptance per draft position before measurements
PRIOR_TREE_GAIN = 0.3   # a tree's uplift over its top-1 path per doubling of nodes over its depth, before measurements
PRIOR_TREE_WEIGHT = 1.0  # top-1 accepted tokens the prior uplift counts as
PROBE_FAR = 0.8         # a probed draft estimated below this share of the best rate: probe it more rarely
MAX_BACKOFF = 3         # ... at most 2^3 times more rarely
# A draft must be estimated this much faster than plain decoding to be chosen: the estimates
# carry a few percent of error, and a wrong "draft" loses that much while a wrong "off" loses
# nothing (speculation must never lose under load; at concurrency 16 chains estimated just
# above off measured 0.93-0.98x of it, docs/BENCHMARKS-log.md)
SPEC_MARGIN = 0.05
# Probes (one sequence drafts while the choice is off) are spaced so that they cost at most this
# share of the engine's time, at least every probe_every() steps: at concurrency 8 through Triton,
# EAGLE-3 chain probes every 8th step (10 % of the steps, each a catch-up and 4 head forwards)
# made the run 0.93x of plain decoding with drafting off for 87 % of the steps.
PROBE_SHARE = 0.02
# Steps' worth of "as estimated" the outcomes' mean starts from and returns to (module docstring,
# Outcomes). Why outcomes at all: at concurrency 8 the drafts the model chose kept 0.95-0.96x the
# tokens per second estimated (docs/BENCHMARKS-log.md, "The load policy's drafts against their own
# estimates"), and a wrong "draft" loses where a wrong "off" does not.
CALIBRATION_PRIOR = 8.0


class CostModel:
    """The engine's measured costs and acceptance; `choose(B, tree)` picks a step's draft."""

    def __init__(self, max_draft_len: int, drafts_cost: bool):
        self.max_draft_len = max_draft_len
        self.drafts_cost = drafts_cost
        self.target = ForwardCosts(DECAY)  # seconds of a target forward by tokens fed
        self.draft = DecayedLine(DECAY)    # seconds of one batched draft forward by rows fed
        self.offered: list[float] = []   # per chain position: decayed drafts where it was at stake
        self.accepted: list[float] = []  # ... and of them, the ones it passed
        self._grow(max_draft_len)
        self.tree_accepted: dict[int, float] = {}  # per node budget: decayed accepted tokens of tree drafts
        self.tree_top1: dict[int, float] = {}      # ... and of their top-1 paths
        self.tree_nodes: dict[int, float] = {}     # ... and the nodes they verified (fewer under a floor)
        self.tree_drafts: dict[int, float] = {}    # ... and how many drafts those are
        self.proposed = 2.0  # proposals asked, of which `found` returned a draft (f = found / proposed)
        self.found = 2.0
        self.draft_decay = DECAY  # forgetting per verified draft this step: DECAY ** (1 / drafts asked)
        self.matches = MatchStats(DECAY)  # n-gram drafts by their lookup's match length (Choice.min_match)
        self.steps_waiting = 0  # steps since the last probe that did not draft the probed kind
        self.backoff = 0        # probes come 2^backoff times rarer (choose)
        self.probe = False   # the last best_length was a probe: one sequence drafts (step.py)
        self.min_match = 0   # ... and the match length its chains require (Choice.min_match)
        self.planned: Choice | None = None  # this step's draft, whoever chose it (policy.plan.plan_step)
        self.estimate: float | None = None  # tokens per second `choose` expected of the draft it chose this step
        self.outcomes = 0.0        # decayed sum over steps that drafted `choose`'s pick: realized / estimated rate
        self.outcome_steps = 0.0   # ... and their decayed count

    def _grow(self, positions: int) -> None:
        """Pseudo-counts for positions not seen yet: each passes PRIOR_ACCEPT of the time."""
        for _ in range(len(self.offered), positions):
            self.offered.append(2.0)
            self.accepted.append(2.0 * PRIOR_ACCEPT)

    # -- measurements --------------------------------------------------------------------------

    def observe_forward(self, num_tokens: int, seconds: float, batch_size: int | None = None) -> None:
        """`batch_size`: the sequences of a step that only decoded (None with a prompt chunk)."""
        self.target.observe(num_tokens, seconds, batch_size)

    def observe_draft(self, batch_size: int, positions: int, seconds: float) -> None:
        """A step's drafting took `seconds` for `batch_size` sequences; `positions` is the longest
        draft a chain made (for a tree step the planned tree says how many forwards it made)."""
        if positions <= 0 or not self.drafts_cost or batch_size <= 0:
            return
        plan = self.planned
        forwards, rows = draft_work(plan) if plan is not None and plan.tree is not None else (positions, 1.0)
        self.draft.add(batch_size * rows, seconds / max(1, forwards))

    def observe_verify(self, offered: int, accepted: int, draft: Any = None, path: list[int] | None = None) -> None:
        """One sequence's draft was verified: a chain of `offered` tokens, the first `accepted`
        kept; or a tree `draft` (its depth offered) whose accepted nodes are `path`."""
        if draft is None or getattr(draft, "tree", None) is None:
            self._observe_chain(offered, accepted)
            self.matches.observe_chain(getattr(draft, "match", 0), offered, accepted, self.draft_decay)
        else:
            self._observe_tree(draft.tree, path or [], getattr(draft, "score_rank", None),
                               getattr(draft, "budget", None) or draft.tree.num_nodes)

    def _observe_chain(self, offered: int, accepted: int) -> None:
        """A chain's position j was at stake when every earlier one passed: positions 0..accepted-1
        passed, position `accepted` (if offered) failed, the rest were never at stake."""
        self._grow(offered)
        decay = self.draft_decay
        for j in range(min(accepted + 1, offered)):
            self.offered[j] = self.offered[j] * decay + 1.0
            self.accepted[j] = self.accepted[j] * decay + (1.0 if j < accepted else 0.0)

    def _observe_tree(self, tree: Any, path: list[int], score_rank: list[int] | None, budget: int) -> None:
        """The chain through the tree's top-1 path, then the tree's accepted tokens and verified
        nodes at every budget it measures (module docstring). `budget`: the nodes the search was
        allowed; `tree` holds fewer when min_path_prob cut it (and any smaller budget then keeps
        the same best-scored prefix, so min(b, nodes) of them)."""
        top1 = 0
        while top1 < len(path) and tree.rank[path[top1]] == 0:
            top1 += 1
        end = path[top1 - 1] if top1 else -1
        chain_rejected = top1 < len(path) or any(tree.rank[c] == 0 for c in tree.children[end])
        self._observe_chain(top1 + 1 if chain_rejected else top1, top1)
        budgets = {budget}
        if score_rank is not None:
            budgets |= {b for b in self.tree_accepted if b < budget}
        decay = self.draft_decay
        for b in budgets:
            kept = len(path) if b >= tree.num_nodes else _kept_at(path, score_rank, b)
            self.tree_accepted[b] = self.tree_accepted.get(b, 0.0) * decay + kept
            self.tree_top1[b] = self.tree_top1.get(b, 0.0) * decay + top1
            self.tree_nodes[b] = self.tree_nodes.get(b, 0.0) * decay + min(b, tree.num_nodes)
            self.tree_drafts[b] = self.tree_drafts.get(b, 0.0) * decay + 1.0

    def observe_step(self, tokens: int, seconds: float, decode_only: bool) -> None:
        """A step committed `tokens` for its decoding sequences in `seconds` (drafting and the
        forward); where it only decoded and drafted what `choose` picked, that is one outcome for
        `calibration`. Every step ages the outcomes, so the prior comes back while nothing drafts."""
        self.outcomes *= DECAY
        self.outcome_steps *= DECAY
        if decode_only and self.estimate is not None and seconds > 0:
            self.outcomes += (tokens / seconds) / self.estimate
            self.outcome_steps += 1.0
        self.estimate = None

    def calibration(self) -> float:
        """Chosen drafts' realized tokens per second over their estimates (decayed mean, with the
        prior), at most 1: what drafts' estimates are scaled by."""
        return min(1.0, (self.outcomes + CALIBRATION_PRIOR) / (self.outcome_steps + CALIBRATION_PRIOR))

    def observe_proposals(self, asked: int, found: int, matches: list[int] | None = None) -> None:
        """A step asked `asked` sequences for drafts and `found` came back; `matches`: their
        n-gram match lengths (none for model drafters)."""
        if asked:
            self.proposed = self.proposed * DECAY + asked
            self.found = self.found * DECAY + found
            self.draft_decay = DECAY ** (1.0 / asked)
            self.matches.observe_found(matches or ())

    # -- predictions ---------------------------------------------------------------------------

    def forward_seconds(self, num_tokens: float, batch_size: int | None = None) -> float:
        """T(n), for a decode step of `batch_size` sequences when given."""
        return self.target.seconds(num_tokens, batch_size)

    def draft_seconds(self, rows: float) -> float:
        """One batched draft forward over `rows` rows."""
        if not self.drafts_cost:
            return 0.0
        measured = self.draft.predict(rows, _flat)
        return measured if measured is not None else 0.1 * self.forward_seconds(rows)

    def chain_gain(self, k: int, min_match: int = 0) -> float:
        """G(k): a chain of k's expected accepted tokens, sum over j < k of q_j, the product of the
        pass rates of positions 0..j (each measured where it was at stake); with `min_match`, of
        the drafts from lookups that matched at least that many tokens (the same prior)."""
        gains = self.chain_gains(k, min_match)
        return gains[-1] if gains else 0.0

    def chain_gains(self, k: int, min_match: int = 0) -> list[float]:
        """[G(1), ..., G(k)] in one running sum (`chain_gain`)."""
        self._grow(k)
        if min_match:
            offered, accepted = self.matches.at_least_positions(min_match, k)
            rates = [(a + 2.0 * PRIOR_ACCEPT) / (o + 2.0) for o, a in zip(offered, accepted, strict=True)]
        else:
            rates = [self.accepted[j] / self.offered[j] for j in range(k)]
        gains, gain, survive = [], 0.0, 1.0
        for rate in rates:
            survive *= rate
            gain += survive
            gains.append(gain)
        return gains

    def tree_gain(self, tree: Any) -> float:
        """E(N) = R(N) G(depth): a tree's expected accepted tokens."""
        nodes, depth = tree.num_nodes, tree.max_depth
        self.tree_accepted.setdefault(nodes, 0.0)  # from now on its tree drafts measure this budget
        self.tree_top1.setdefault(nodes, 0.0)
        prior = 1.0 + PRIOR_TREE_GAIN * math.log2(max(1.0, nodes / depth))
        ratio = (self.tree_accepted[nodes] + PRIOR_TREE_WEIGHT * prior) / (self.tree_top1[nodes] + PRIOR_TREE_WEIGHT)
        return ratio * self.chain_gain(depth)

    def verified_nodes(self, tree: Any) -> float:
        """V(N): the nodes a draft of `tree` verifies on average (a static tree: all of them; a
        dynamic one: its budget until drafts are measured, PRIOR_TREE_WEIGHT drafts' worth)."""
        nodes = tree.num_nodes
        if not hasattr(tree, "topk") or nodes not in self.tree_drafts:
            return float(nodes)
        return (self.tree_nodes[nodes] + PRIOR_TREE_WEIGHT * nodes) / (self.tree_drafts[nodes] + PRIOR_TREE_WEIGHT)

    def rate(self, batch_size: int, choice: Choice, backlog: int = 0) -> float:
        """Expected committed tokens per second when every sequence drafts `choice`, its drafters
        `backlog` rows behind (their catch-up spread over CATCH_UP_HORIZON steps;
        trtspec.runtime.policy.step_rates prices a step's options together)."""
        return self.step_rates(batch_size, backlog).rate(choice)

    def step_rates(self, batch_size: int, backlog: int = 0) -> StepRates:
        """`rate` for every option of one step, what they share worked out once (step_rates.py)."""
        return StepRates(self, batch_size, backlog)

    def candidates(self, tree: Any = None) -> list[Choice]:
        """What a step may draft, cheapest first: off, every chain (not beside a static tree, which
        its sessions always draft), also drafted only on longer n-gram matches, the tree at each budget."""
        options = [Choice(0)]
        if tree is None or hasattr(tree, "topk"):
            options += [Choice(k) for k in range(1, self.max_draft_len + 1)]
        if tree is None:
            options += [Choice(k, min_match=m) for m in self.matches.levels() for k in range(1, self.max_draft_len + 1)]
        if tree is not None:
            options += [Choice(tree.max_depth, with_budget(tree, n)) for n in tree_budgets(tree)]
        return options

    def choose(self, batch_size: int, tree: Any = None, backlog: int = 0) -> Choice:
        """The draft for a step of `batch_size` decoding sequences (the highest rate; ties go to
        the cheaper draft; off unless a draft beats it by SPEC_MARGIN), or a probe: one sequence drafts the full tree while no tree is chosen
        (without a tree, max_draft_len while off). Probes come every `probe_every` such steps, and
        half as often after each probe while the probed draft's estimate stays below PROBE_FAR of
        the best (up to 2^MAX_BACKOFF times rarer; back to normal once it comes near)."""
        options = self.candidates(tree)
        prices = self.step_rates(batch_size, backlog)
        estimates = [prices.rate(option) for option in options]
        scale = self.calibration()
        rates = [rate * scale if option.length else rate for rate, option in zip(estimates, options, strict=True)]
        chosen = rates.index(max(rates))
        if max(rates) < (1 + SPEC_MARGIN) * rates[0]:  # options[0] is off
            chosen = 0
        best = options[chosen]
        self.probe = False
        self.estimate = estimates[chosen] if best.length else None  # observe_step's yardstick
        if tree is not None:
            if best.tree is not None:
                return best
            probed, kind = Choice(tree.max_depth, tree, probe=True), [o.tree is not None for o in options]
        else:
            if best.length != 0:
                return best
            probed, kind = Choice(self.max_draft_len, probe=True), [o.length > 0 for o in options]
        self.steps_waiting += 1
        stretch = 2 ** self.backoff  # the priced spacing is only worked out once the plain wait is over
        if (self.steps_waiting < probe_every(self.max_draft_len, tree) * stretch
                or self.steps_waiting < self.probe_spacing(batch_size, probed, backlog) * stretch):
            return best
        self.steps_waiting = 0
        far = max(r for r, k in zip(rates, kind, strict=True) if k) < PROBE_FAR * max(rates)
        self.backoff = min(MAX_BACKOFF, self.backoff + 1) if far else 0
        self.probe = True
        self.estimate = None  # a probe drafts for one sequence: no outcome of `best`
        return probed

    def probe_spacing(self, batch_size: int, probed: Choice, backlog: int = 0) -> int:
        """Steps between probes of `probed` such that they cost at most PROBE_SHARE of the time:
        a probe adds one sequence's draft to a step of `batch_size` (its verified tokens, its draft
        forwards, and its share of the `backlog` to catch up)."""
        width = self.verified_nodes(probed.tree) if probed.tree is not None else probed.length
        forwards, rows = draft_work(probed)
        step = self.forward_seconds(batch_size, batch_size)
        extra = self.forward_seconds(batch_size + width, batch_size) - step + forwards * self.draft_seconds(rows)
        extra += self.draft_seconds(rows + backlog / max(1, batch_size)) - self.draft_seconds(rows)
        return math.ceil(extra / (PROBE_SHARE * step))

    def best_length(self, batch_size: int, tree: Any = None, backlog: int = 0) -> int:
        """`choose` as a draft length (0: plain decoding); a tree's choice is max_draft_len."""
        if batch_size < 1:
            return 0
        choice = self.choose(batch_size, tree, backlog)
        self.min_match = choice.min_match
        return self.max_draft_len if choice.tree is not None else choice.length


def _flat(_: float) -> float:
    return 1.0


def _kept_at(path: list[int], score_rank: list[int], budget: int) -> int:
    """How much of `path` a tree of the `budget` best-scored nodes holds: its leading nodes ranked
    below `budget` (a node's ancestors always rank before it)."""
    count = 0
    while count < len(path) and score_rank[path[count]] < budget:
        count += 1
    return count


def probe_every(max_draft_len: int, tree: Any = None) -> int:
    """Steps between probes while the draft is not chosen: PROBE_EVERY for a chain (while off),
    proportionally more for a tree (while off or a chain), whose probe verifies all its nodes, so
    probes cost the same share of the steps
    (at batch 8, 16-node dynamic-tree probes every 8th step cost 0.92x plain, chain probes 0.99x)."""
    nodes = tree.num_nodes if tree is not None else max_draft_len
    return PROBE_EVERY * max(1, -(-nodes // max(1, max_draft_len)))


def schedule_length(schedule: Any, batch_size: int, max_draft_len: int) -> int:
    """The table's draft length for `batch_size`: its last entry at or below it (the first entry
    below its own size), capped by max_draft_len."""
    length = schedule[0][1]
    for size, draft_len in schedule:
        if size <= batch_size:
            length = draft_len
    return min(length, max_draft_len)
