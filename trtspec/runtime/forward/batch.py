"""One forward of a transformers causal LM over a packed batch of sequences on the paged KV cache.

Each `Feed` is one sequence's new tokens: a prefill chunk, `[pending] + draft` to verify, a
static tree, or a draft model's catch-up. They are packed into one row (the linear layers run on
exactly the real tokens, no padding), attention goes through trtspec.runtime.forward.attention's Layout,
and each sequence's cache grows by its tokens (`kv.length`); rolling back what was rejected is
the caller's job. The model must have been switched to paged attention
(attention.use_paged_attention); without a layout it still runs as plain transformers. A float32
Llama runs through llama_forward (the same operations without transformers' per-call plumbing,
bit-for-bit the same numbers); any other model through its own transformers forward.

Rows that carry their hidden state (`Feed.hidden`, from layer E: a layerskip draft's rows) skip
layers 0..E-1: the forward then runs in two ranges of llama_forward.decoder_layers over the same
feeds. First the rows without one (the rest of those feeds, at their cache positions after the
carried rows, whose keys and values in layers 0..E-1 are in the cache already; every other feed
whole) through layers 0..E-1; then every row, carried or just computed, through layers E..L-1, the
final norm and the head, on the layout a one-range forward would use. Every weight is read once
either way. The numbers are a one-range forward's where a row's do not depend on which rows share
its call (the caller's check: trtspec.runtime.drafters.layerskip); a model that does not run through
llama_forward ignores the carried rows and computes every row from its embedding. Feeds without
hidden states take the one-range forward, unchanged.
"""

from __future__ import annotations

import weakref
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from trtspec.runtime.forward import llama_forward
from trtspec.runtime.forward.attention import Layout

if TYPE_CHECKING:
    from trtspec.runtime.cache.paged import SeqKV


@dataclass
class Feed:
    """New tokens of one sequence, written at cache positions kv.length, kv.length + 1, ..."""

    kv: SeqKV
    token_ids: list[int]
    # rotary positions, one per token; None: the cache positions (a tree puts nodes at their depth)
    positions: list[int] | None = None
    # [tokens, kv.length + tokens] bool: keys each token sees; None: causal
    mask: Any = None
    # logits wanted for this many of its last tokens (0: none, e.g. a prefill chunk mid-prompt)
    num_logits: int = 1
    # [n, hidden_size] or None: the input of decoder layer `hidden_layer` for the first n tokens,
    # computed already (a layerskip draft ran them through the first layers, whose keys and values
    # it wrote at these positions); the forward runs those rows from that layer on (module docstring)
    hidden: Any = None
    hidden_layer: int = 0


_NO_MASK: list = []


def _mask_placeholder():
    """A 4-D mask transformers passes through untouched (the Layout decides what each row sees),
    so no [T, T] mask is built for a batch."""
    if not _NO_MASK:
        import torch

        _NO_MASK.append(torch.ones(1, 1, 1, 1, dtype=torch.bool))
    return _NO_MASK[0]


_LEAN: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()


def _lean(model: Any) -> bool:
    """Whether `model` runs through llama_forward (its classes are checked once per model object)."""
    if model not in _LEAN:
        _LEAN[model] = llama_forward.supports(model)
    return _LEAN[model] and not model.training


def forward(model: Any, feeds: list[Feed], aux_outputs: Any = None, aux_ids: tuple[int, ...] = ()):
    """Run `model` once over every feed. Returns (logits, aux): per feed its
    [num_logits, vocab_size] float logits, and when `aux_ids` are given its
    [tokens, sum of hidden sizes] auxiliary hidden states read from `aux_outputs` (a mapping the
    caller's forward hooks fill: hidden_states index -> [1, T, hidden] layer output)."""
    import torch

    if _lean(model) and not aux_ids and any(feed.hidden is not None for feed in feeds):
        return _forward_from_hidden(model, feeds)
    lengths = [len(feed.token_ids) for feed in feeds]
    layout = Layout.build([feed.kv for feed in feeds], lengths, [feed.mask for feed in feeds])
    input_ids = torch.tensor([[token for feed in feeds for token in feed.token_ids]])
    positions, keep, start = [], [], 0
    for feed, length in zip(feeds, lengths, strict=True):
        positions.extend(feed.positions if feed.positions is not None else range(feed.kv.length, feed.kv.length + length))
        keep.extend(range(start + length - feed.num_logits, start + length))
        start += length
    position_ids, keep = torch.tensor([positions]), torch.tensor(keep, dtype=torch.long)
    if _lean(model):  # the same operations without transformers' plumbing (llama_forward.py)
        logits = llama_forward.run(model, input_ids, position_ids, layout, keep, aux_outputs, aux_ids)
    else:
        logits = model(input_ids=input_ids, position_ids=position_ids, attention_mask=_mask_placeholder(),
                       use_cache=False, logits_to_keep=keep, trtspec_layout=layout).logits
    for feed, length in zip(feeds, lengths, strict=True):
        feed.kv.length += length
    logits = list(logits[0].float().split([feed.num_logits for feed in feeds]))
    if not aux_ids:
        return logits, [None] * len(feeds)
    hidden = torch.cat([aux_outputs[i][0] for i in aux_ids], dim=-1)  # [T, sum of hidden sizes]
    return logits, list(hidden.split(lengths))


def _forward_from_hidden(model: Any, feeds: list[Feed]):
    """`forward` for feeds some of whose rows carry their hidden state (module docstring)."""
    import torch

    from trtspec.runtime.cache.paged import SeqKV

    start_layers = {feed.hidden_layer for feed in feeds if feed.hidden is not None}
    if len(start_layers) != 1:
        raise ValueError(f"carried hidden states come from one layer per forward, not {sorted(start_layers)}")
    start = start_layers.pop()
    lengths = [len(feed.token_ids) for feed in feeds]
    carried = [0 if feed.hidden is None else min(len(feed.hidden), length)
               for feed, length in zip(feeds, lengths, strict=True)]
    positions = [feed.positions if feed.positions is not None else list(range(feed.kv.length, feed.kv.length + length))
                 for feed, length in zip(feeds, lengths, strict=True)]
    # 1. The rows without a hidden state, through layers 0..start-1, each after its feed's carried rows.
    early = [i for i in range(len(feeds)) if carried[i] < lengths[i]]
    rows_from = {}
    if early:
        kvs = [SeqKV(feeds[i].kv.pool, feeds[i].kv.table, feeds[i].kv.length + carried[i]) for i in early]
        masks = [None if feeds[i].mask is None else feeds[i].mask[carried[i]:] for i in early]
        layout = Layout.build(kvs, [lengths[i] - carried[i] for i in early], masks)
        input_ids = torch.tensor([[t for i in early for t in feeds[i].token_ids[carried[i]:]]])
        position_ids = torch.tensor([[p for i in early for p in positions[i][carried[i]:]]])
        hidden = llama_forward.decoder_layers(model, llama_forward.embed(model, input_ids), position_ids, layout,
                                              0, start)
        rows_from = dict(zip(early, hidden[0].split([lengths[i] - carried[i] for i in early]), strict=True))
    # 2. Every row through layers start..L-1, the norm and the head, on the one-range forward's layout.
    parts = []
    for i, feed in enumerate(feeds):
        parts.extend(([feed.hidden[:carried[i]]] if carried[i] else []) + ([rows_from[i]] if i in rows_from else []))
    hidden = torch.cat(parts)  # [T, hidden_size], the packed rows in order
    layout = Layout.build([feed.kv for feed in feeds], lengths, [feed.mask for feed in feeds])
    keep, row = [], 0
    for feed, length in zip(feeds, lengths, strict=True):
        keep.extend(range(row + length - feed.num_logits, row + length))
        row += length
    hidden = llama_forward.decoder_layers(model, hidden[None], torch.tensor([[p for ps in positions for p in ps]]),
                                          layout, start)
    logits = llama_forward.head(model, hidden, torch.tensor(keep, dtype=torch.long))
    for feed, length in zip(feeds, lengths, strict=True):
        feed.kv.length += length
    return list(logits[0].float().split([feed.num_logits for feed in feeds])), [None] * len(feeds)
