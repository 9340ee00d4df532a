"""One iteration of the engine loop: every running sequence goes through the same numbered phases.

0. Retire: sequences whose caller went away leave and free their blocks.
1. Plan: decoding sequences verify [pending] + a draft whose length the load policy picks for
   this batch size (and each sequence's own policy may shorten; a probe while speculation is off
   drafts for one sequence only; with a dynamic tree the length is its node budget); prompt chunks of new sequences fill what is left of the
   `max_num_tokens` budget, at most `max_prefill_tokens` of them (chunked prefill, in arrival
   order; the decode and draft rows are not counted against max_prefill_tokens).
2. Draft: one drafter call for every decoding sequence that speculates (batched inside); when
   the policy drafts only on long n-gram matches (chain:K@M), shorter matches' drafts are dropped;
   a sequence with a grammar cuts its draft at the first token the grammar rejects
   (trtspec.runtime.grammar), and phases 4 and the prefill's first token take the target's
   grammar-masked distribution.
3. Verify: ONE target forward over all feeds (ragged: per-sequence positions and masks); a
   layerskip chain's rows the draft already ran through the first layers start after them.
4. Accept per sequence (greedy prefix or tree path, or lossless rejection sampling of a chain or
   a tree), roll back
   the rejected tokens' KV, hand the drafter the hidden states of what was kept (and a lookahead
   drafter the target's argmax at every verified row: its Jacobi guesses).
5. Commit: stream each sequence's tokens, update statistics and its policy; finished sequences
   leave and free their blocks.
6. Measure: what the step measured goes to the cost model, once (trtspec.runtime.policy.plan).

A step sees the loop through a StepView, built once by the Scheduler: the engine's parts, the
config, the gauges, the KV pool, the cost model, the prompt reuse and `retire`. It never touches
the queue, admission or the thread count.

A prompt chunk that completes a prompt produces the sequence's first token in phase 4; the prompt's
rows are then kept for later prompts that begin the same way (trtspec.runtime.cache.prefix_reuse).
"""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Callable
from typing import Any, Protocol

from trtspec.modes import tree_modes
from trtspec.runtime.cache.paged import KVPool
from trtspec.runtime.cache.prefix_reuse import PrefixReuse
from trtspec.runtime.config import EngineConfig
from trtspec.runtime.forward.batch import Feed, forward
from trtspec.runtime.loop.request import RequestCancelled
from trtspec.runtime.loop.stats import GenerationStats, SchedulerStats
from trtspec.runtime.policy.by_load import CostModel
from trtspec.runtime.policy.plan import StepPlan, StepRecord, plan_step, record_step
from trtspec.runtime.verify import sampling
from trtspec.runtime.verify.tree import Tree, TreeShape, accept_tree, rejection_accept_tree, tree_inputs


class StepEngine(Protocol):
    """The parts of an Engine a step uses."""

    config: EngineConfig
    target: Any    # the transformers causal LM
    drafter: Any   # a Drafter, or None (mode none)
    tree: Any      # None, a static Tree (eagle_choices) or the dynamic TreeShape

    def layer_outputs(self) -> dict[int, Any]: ...
    def record_finished(self, stats: GenerationStats) -> None: ...


@dataclasses.dataclass(frozen=True)
class StepView:
    """What a step reads and calls of the loop that runs it."""

    engine: StepEngine
    config: EngineConfig
    stats: SchedulerStats      # gauges: last_* and draft_shapes; num_steps turns the probe
    pool: KVPool               # the target's keys and values, rolled back in phase 4
    cost_model: CostModel      # plans the step (phase 1), learns from it (phase 6)
    reuse: PrefixReuse | None  # prompts kept after their prefill
    retire: Callable[..., None]  # retire(sequence, error=None): leave the batch, free its blocks


def run_step(view: StepView, batch: list[Any]) -> None:
    engine, config = view.engine, view.config
    # 0. Retire what the callers cancelled.
    live = []
    for sequence in batch:
        if sequence.wants_cancel():
            view.retire(sequence, RequestCancelled("the client went away"))
        else:
            live.append(sequence)
    if not live:
        return
    # 1. Plan the step under the token budget.
    decoding = [s for s in live if s.decoding]
    prefilling = [s for s in live if not s.decoding]
    plan: StepPlan = plan_step(view, decoding)
    lengths = plan.lengths
    view.stats.last_batch_size = len(live)
    view.stats.last_num_decoding = len(decoding)
    view.stats.last_draft_len = max(lengths, default=0)
    record = StepRecord(draft_positions=max(lengths, default=0))
    # 2. Draft for every decoding sequence that speculates.
    started = time.perf_counter()
    drafts = _draft(engine, decoding, lengths, plan.shape)
    record.draft_seconds = time.perf_counter() - started
    asked = [d for d, k in zip(drafts, lengths, strict=True) if k > 0]
    record.asked, record.found = len(asked), sum(d is not None for d in asked)
    record.matches = [d.match for d in asked if d is not None]
    if plan.min_match:  # the policy drafts only on long n-gram matches: shorter ones' drafts are not verified
        drafts = [d if d is None or d.match >= plan.min_match else None for d in drafts]
    # A grammar cuts each draft at its first token it rejects and fixes each verify row's allowed tokens.
    drafts = [s.grammar.constrain(d, s.stats) if s.grammar is not None else d
              for s, d in zip(decoding, drafts, strict=True)]
    # 3. One target forward: [pending] + draft per decoding sequence, then prompt chunks.
    feeds = [_verify_feed(s, d) for s, d in zip(decoding, drafts, strict=True)]
    budget = prefill_budget(config, sum(len(f.token_ids) for f in feeds))
    chunked = []
    for sequence in prefilling:
        if budget <= 0:
            break
        start = sequence.kv.length
        chunk = sequence.tokens[start:min(sequence.num_prompt, start + budget)]
        last = start + len(chunk) == sequence.num_prompt
        feeds.append(Feed(sequence.kv, chunk, num_logits=1 if last else 0))
        chunked.append(sequence)
        budget -= len(chunk)
    started = time.perf_counter()
    aux_ids = engine.drafter.aux_layer_ids if engine.drafter is not None else ()
    if not any(s.session is not None for s in decoding + chunked) and all(s.prompt_aux is None for s in chunked):
        aux_ids = ()  # nothing takes layer outputs this step (a prompt to keep for EAGLE-3 does)
    logits, aux = forward(engine.target, feeds, engine.layer_outputs(), aux_ids)
    record.forward_seconds = time.perf_counter() - started
    record.forward_tokens = sum(len(f.token_ids) for f in feeds)
    record.decode_batch = None if chunked else len(decoding)
    view.stats.last_prefill_tokens = record.forward_tokens - sum(len(f.token_ids) for f in feeds[:len(decoding)])
    # 4. + 5. Accept, roll back and commit, sequence by sequence (each saw the whole step's times).
    for index, (sequence, draft) in enumerate(zip(decoding, drafts, strict=True)):
        committed = _accept(view, record, sequence, draft, logits[index], aux[index])
        record.committed += len(committed)
        sequence.stats.draft_time_s += record.draft_seconds
        sequence.stats.verify_time_s += record.forward_seconds
        _commit(view, sequence, committed)
    for offset, sequence in enumerate(chunked):
        index = len(decoding) + offset
        if aux_ids:
            if sequence.session is not None:
                sequence.session.on_verified(aux[index])
            if sequence.prompt_aux is not None:
                sequence.prompt_aux.append(aux[index])
        if sequence.kv.length == sequence.num_prompt:
            if view.reuse is not None:
                view.reuse.prefilled(sequence)
            last = logits[index][-1:]
            if sequence.grammar is not None:
                last = sequence.grammar.mask_next(last)
            _commit(view, sequence, [choose(last, sequence.params, sequence.generator)])
    # 6. What the step measured, to the cost model.
    record_step(view.cost_model, record)


def prefill_budget(config: EngineConfig, decode_rows: int) -> int:
    """Prompt tokens a step may prefill beside `decode_rows` ([pending] + draft rows): what
    max_num_tokens leaves (one at least), and no more than max_prefill_tokens where it is set. The
    decode rows never count against max_prefill_tokens, so it cuts prompt chunks, never drafts."""
    budget = max(1, config.max_num_tokens - decode_rows)
    if config.max_prefill_tokens:
        budget = min(budget, config.max_prefill_tokens)
    return budget


def _draft(engine: Any, decoding: list[Any], lengths: list[int], shape: TreeShape | None = None) -> list[Any]:
    """Phase 2: drafts (or None) aligned with `decoding`; `shape`: this step's dynamic tree (None:
    chains), for EAGLE-3 and draft-model sessions, whose trees are chosen by load."""
    wanted = [i for i, k in enumerate(lengths) if k > 0]
    drafts: list[Any] = [None] * len(decoding)
    if not wanted:
        return drafts
    if engine.config.mode in tree_modes() and not isinstance(engine.tree, Tree):
        if shape is not None and engine.config.tree_min_path_prob:
            shape = dataclasses.replace(shape, min_path_prob=engine.config.tree_min_path_prob)
        for i in wanted:
            decoding[i].session.tree = shape
    proposed = engine.drafter.propose_batch([decoding[i].session for i in wanted],
                                            [decoding[i].tokens for i in wanted], [lengths[i] for i in wanted])
    for i, draft in zip(wanted, proposed, strict=True):
        drafts[i] = draft if draft is not None and draft.size > 0 else None
    return drafts


def _verify_feed(sequence: Any, draft: Any) -> Feed:
    """[pending] + draft at the sequence's next cache positions (a tree: nodes at their depths); a
    layerskip chain's rows that carry their early layers' output start from it (Draft.hidden)."""
    past = sequence.kv.length
    draft_ids = draft.token_ids.tolist() if draft is not None else []
    tokens = sequence.tokens[-1:] + draft_ids
    if draft is not None and draft.tree is not None:
        positions, mask = tree_inputs(draft.tree, past)
        return Feed(sequence.kv, tokens, positions=positions[0].tolist(), mask=mask, num_logits=len(tokens))
    if draft is not None and draft.hidden is not None:
        return Feed(sequence.kv, tokens, num_logits=len(tokens), hidden=draft.hidden, hidden_layer=draft.hidden_layer)
    return Feed(sequence.kv, tokens, num_logits=len(tokens))


def _accept(view: StepView, record: StepRecord, sequence: Any, draft: Any, logits: Any, aux: Any) -> list[int]:
    """Phase 4 for one sequence; returns its committed tokens. # logits: [1 + k, vocab_size]"""
    params, generator = sequence.params, sequence.generator
    k = draft.size if draft is not None else 0
    draft_probs = draft.draft_probs if draft is not None else None
    if sequence.grammar is not None:  # the target (and a sampled draft) restricted to what the grammar allows
        logits = sequence.grammar.mask(logits)
        if draft_probs is not None:
            draft_probs = sequence.grammar.mask_draft_probs(draft_probs)
    draft_ids = draft.token_ids.tolist() if k else []
    tree = draft.tree if draft is not None else None
    if k == 0:
        path, next_token = [], choose(logits, params, generator)
    elif tree is not None and params.greedy:
        path, next_token = accept_tree(tree, draft_ids, sampling.greedy_tokens(logits))
    elif tree is not None:
        path, next_token = rejection_accept_tree(tree, draft_ids, sampling.logits_to_probs(logits, params), generator)
    elif params.greedy:
        num_accepted, next_token = sampling.greedy_accept(draft.token_ids, logits)
        path = list(range(num_accepted))
    else:
        num_accepted, next_token = sampling.rejection_accept(draft.token_ids, draft_probs,
                                                             sampling.logits_to_probs(logits, params), generator)
        path = list(range(num_accepted))
    # Roll back: keep the pending token's KV and the accepted positions', contiguous after it.
    past = sequence.kv.length - 1 - k
    if path != list(range(len(path))):
        sources = [past + 1 + i for i in path]
        destinations = [past + 1 + j for j in range(len(path))]
        view.pool.move(sequence.table, sources, destinations)
    sequence.kv.length = past + 1 + len(path)
    sequence.stats.num_target_passes += 1
    if k and tree is None and view.engine.drafter.wants_target_tokens:  # Jacobi guesses (lookahead)
        sequence.session.on_target_tokens(draft_ids, sampling.greedy_tokens(logits), len(path))
    if sequence.session is not None and aux is not None:
        sequence.session.on_verified(aux[[0] + [1 + i for i in path]])
    if k:
        offered = tree.max_depth if tree is not None else k
        sequence.stats.record_draft(offered, len(path), k)
        record.verified.append((offered, len(path), draft, path))
        if sequence.policy.update(offered, len(path)):
            sequence.stats.fallback = True
    return [draft_ids[i] for i in path] + [next_token]


def _commit(view: StepView, sequence: Any, committed: list[int]) -> None:
    """Phase 5 for one sequence: stream its tokens; when finished it leaves the batch."""
    try:
        finished = sequence.commit(committed)
    except Exception as error:  # noqa: BLE001 - a detokenizing or sink failure ends this request only
        view.retire(sequence, RuntimeError(f"internal error: {type(error).__name__}: {error}"))
        return
    if finished:
        view.engine.record_finished(sequence.stats)
        view.retire(sequence)


def choose(logits: Any, params: Any, generator: Any) -> int:
    """The next token from the last row of logits. # logits: [n, vocab_size]"""
    if params.greedy:
        return sampling.greedy_tokens(logits[-1])
    return int(sampling.sample(sampling.logits_to_probs(logits[-1:], params), generator)[0])
