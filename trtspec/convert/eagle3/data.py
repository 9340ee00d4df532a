"""Self-distilled EAGLE-3 training data: the target answers the conversations in its own chat template.

Vocabulary: a *sample* is one training row to make; sample i uses conversation i mod N of the data
(N records), answered greedily in the first pass over the data and sampled (temperature 0.7) in
later passes, so `num_samples` > N never repeats an answer. A *dialogue* regenerates the
assistant turns of one sample's conversation in order: each answer is made with the earlier
answers (the target's own) in the context, as the target would see the conversation served.

A training row is the context of the last answered turn (`trtspec.chat.conversation_ids`, the ids
the engine feeds the target for that conversation) followed by the target's answer ids up to and
including its end-of-sequence token: what the head must learn to predict is exactly what the
target says there. Turns whose context already reaches `max_context` tokens are not generated
(training truncates rows to seq_len anyway).

`generate_rows` generates in process, batched with left padding (the padding is stripped again so
rows are right-padded and positions start at 0, as at inference); `trtspec.convert.eagle3.remote`
makes the same rows through a running server. Each row remembers where its answer starts, so the
draft vocabulary is counted over what the target said, not over the chat template and prompts.

`build_draft_vocab` makes the reduced draft vocabulary: the most frequent target ids in the data,
sorted, and `d2t` with target_id = draft_id + d2t[draft_id] (the ModelOpt / EAGLE-3 convention
that TensorRT-LLM and vLLM read). `coverage_vocab_size` picks its size when the spec leaves it
empty: the fewest most-frequent tokens that cover DRAFT_VOCAB_COVERAGE of the answer tokens, as
EAGLE-3 keeps 32 k of Llama-3's 128 k.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from itertools import islice
from typing import TYPE_CHECKING, Any

from trtspec.chat import Message, conversation_ids
from trtspec.convert.eagle3.sources import Conversation, DataSource
from trtspec.convert.progress import Phase

if TYPE_CHECKING:
    import torch

SAMPLED_TEMPERATURE = 0.7

# The draft vocabulary sized to the data (docs/CONVERT.md, "Draft vocabulary from coverage"). A
# target token outside it can never be drafted, so coverage bounds the acceptance at every
# position; 99 % of the answer tokens costs at most 0.01 of it (less: rare tokens are the ones a
# head misses anyway). The floor is for small data, whose coverage overstates what unseen answers
# need: on SmolLM2, the tokens of half of 55 answers covered the other half's at 0.75 with 1,024
# rows and 0.84 with 4,096 (every SmolLM2 head measured in docs/CONVERT.md had 4,096).
DRAFT_VOCAB_COVERAGE = 0.99
DRAFT_VOCAB_MULTIPLE = 256   # whole tiles for the lm_head's matrix product
DRAFT_VOCAB_FLOOR = 4096


@dataclass(frozen=True)
class Sample:
    index: int
    conversation: Conversation
    sampled: bool  # answered at SAMPLED_TEMPERATURE instead of greedily


def iter_samples(source: DataSource, num_samples: int, *, rank: int = 0, world_size: int = 1,
                 start: int = 0) -> Iterator[Sample]:
    """Samples start..num_samples-1 (this rank's share: (index - start) mod world_size == rank), streamed."""
    index = 0
    while index < num_samples:
        for conversation in source.conversations():
            if index >= num_samples:
                return
            if index >= start and (index - start) % world_size == rank:
                yield Sample(index, conversation, sampled=index >= source.count)
            index += 1


@dataclass
class Dialogue:
    """One sample's conversation with its assistant turns regenerated one at a time."""

    sample: Sample
    max_context: int
    history: list[Message] = field(default_factory=list)
    turn: int = 0
    consumed: int = 0  # messages of the conversation already in history
    context_ids: list[int] = field(default_factory=list)
    answer_ids: list[int] = field(default_factory=list)

    @property
    def points(self) -> list[int]:
        return self.sample.conversation.answer_points()

    def wants_answer(self) -> bool:
        if self.turn >= len(self.points):
            return False
        return self.turn == 0 or len(self.context_ids) + len(self.answer_ids) < self.max_context

    def context_messages(self) -> list[Message]:
        """The conversation up to the next answer point, with the earlier answers regenerated."""
        return self.history + self.sample.conversation.prompt_messages(self.consumed, self.points[self.turn])

    def record(self, context_ids: list[int], answer_ids: list[int], answer_text: str) -> None:
        self.history = self.context_messages() + [{"role": "assistant", "content": answer_text}]
        self.consumed = self.points[self.turn]
        self.context_ids, self.answer_ids = context_ids, answer_ids
        self.turn += 1

    def row(self) -> Row:
        return Row(self.context_ids + self.answer_ids, len(self.context_ids))


@dataclass(frozen=True)
class Row:
    """One training row: token ids, and where the target's last answer starts in them."""

    ids: list[int]
    answer_start: int


def generate_rows(model, tokenizer, samples: Iterable[Sample], *, answer_tokens: int, max_context: int,
                  batch_size: int = 64, phase: Phase | None = None) -> Iterator[tuple[int, Row]]:
    """(sample index, row) for every sample, in order, generated by `model` in batches."""
    device = model.device
    iterator = iter(samples)
    while chunk := list(islice(iterator, batch_size)):
        dialogues = [Dialogue(sample, max_context) for sample in chunk]
        # seeds from the chunk's first sample: a run made in pieces never reuses one
        seeds = iter(range(chunk[0].index << 12, (chunk[0].index + 1) << 12))
        # 1. one round per turn: every dialogue that still wants an answer gets its next one
        while active := [d for d in dialogues if d.wants_answer()]:
            for sampled in (False, True):
                group = [d for d in active if d.sample.sampled == sampled]
                if not group:
                    continue
                contexts = [conversation_ids(tokenizer, d.context_messages(), add_generation_prompt=True)
                            for d in group]
                answers = _generate_batch(model, tokenizer, contexts, sampled=sampled, answer_tokens=answer_tokens,
                                          device=device, seed=next(seeds))
                for dialogue, context, answer in zip(group, contexts, answers, strict=True):
                    dialogue.record(context, answer, tokenizer.decode(answer, skip_special_tokens=True))
                if phase:
                    phase.advance(0, tokens=sum(len(answer) for answer in answers))
        # 2. the rows, in sample order
        for dialogue in dialogues:
            if phase:
                phase.advance(1)
            yield dialogue.sample.index, dialogue.row()


def _generate_batch(model, tokenizer, contexts: list[list[int]], *, sampled: bool, answer_tokens: int,
                    device: torch.device, seed: int) -> list[list[int]]:
    import torch

    pad = tokenizer.pad_token_id
    width = max(len(ids) for ids in contexts)
    # Left padding: every row's next token sits at the same column.
    input_ids = torch.tensor([[pad] * (width - len(ids)) + ids for ids in contexts], device=device)
    attention = torch.tensor([[0] * (width - len(ids)) + [1] * len(ids) for ids in contexts], device=device)
    torch.manual_seed(seed)
    with torch.no_grad():
        out = model.generate(input_ids=input_ids, attention_mask=attention, max_new_tokens=answer_tokens,
                             do_sample=sampled, temperature=SAMPLED_TEMPERATURE if sampled else None, top_p=None,
                             top_k=None, pad_token_id=pad)
    return [_strip_after_eos(row, tokenizer.eos_token_id, pad) for row in out[:, width:].tolist()]


def _strip_after_eos(row: list[int], eos: int | None, pad: int | None) -> list[int]:
    """Keep the answer up to and including its first end-of-sequence token."""
    if eos is not None and eos in row:
        return row[:row.index(eos) + 1]
    while row and pad is not None and row[-1] == pad and pad != eos:
        row = row[:-1]
    return row


def generate_sequences(model, tokenizer, prompts: list[str], *, num_samples: int, answer_tokens: int,
                       batch_size: int = 64, on_batch: Callable[[int], Any] | None = None) -> list[list[int]]:
    """Rows for one-turn `prompts` held in memory (sample i answers prompt i mod len(prompts))."""
    conversations = [Conversation(i, ({"role": "user", "content": text},)) for i, text in enumerate(prompts)]
    samples = [Sample(i, conversations[i % len(prompts)], sampled=i >= len(prompts)) for i in range(num_samples)]
    rows = []
    for _, row in generate_rows(model, tokenizer, samples, answer_tokens=answer_tokens, max_context=1 << 30,
                                batch_size=batch_size):
        rows.append(row.ids)
        if on_batch:
            on_batch(1)
    return rows


def build_draft_vocab(counts: torch.Tensor | list[list[int]], vocab_size: int, draft_vocab_size: int):
    """(target ids kept, d2t, coverage) for a reduced draft vocabulary, by token frequency.

    `counts` is a [vocab_size] tensor of token counts (or rows of ids to count). Ties and unseen
    tokens are broken by the lowest id so the result is deterministic.
    """
    import torch

    if not isinstance(counts, torch.Tensor):
        counts = count_tokens(counts, vocab_size)
    # stable sort on -count keeps the lowest id first among equal counts
    ranked = torch.sort(-counts, stable=True).indices
    kept = ranked[:draft_vocab_size].sort().values.to(torch.int64)
    d2t = kept - torch.arange(draft_vocab_size, dtype=torch.int64)
    coverage = float(counts[kept].sum()) / max(1, int(counts.sum()))
    return kept, d2t, coverage


def count_tokens(rows: Iterable[list[int]], vocab_size: int) -> torch.Tensor:
    """[vocab_size] int64 counts of the token ids in `rows` (streamed)."""
    import torch

    counts = torch.zeros(vocab_size, dtype=torch.int64)
    pending: list[int] = []

    def flush() -> None:
        # one bincount per ~1 M tokens: per row it would cost a vocab-sized tensor each time
        if pending:
            counts.add_(torch.bincount(torch.tensor(pending, dtype=torch.int64), minlength=vocab_size)[:vocab_size])
            pending.clear()

    for row in rows:
        pending.extend(row)
        if len(pending) >= 1 << 20:
            flush()
    flush()
    return counts


def coverage_vocab_size(counts: torch.Tensor, vocab_size: int, *, coverage: float | None = None,
                        multiple: int | None = None, floor: int | None = None) -> int:
    """The fewest most-frequent tokens covering `coverage` of `counts`, rounded up to `multiple`,
    at least `floor`, at most `vocab_size` (None: the DRAFT_VOCAB_* constants).

    `counts` is a [vocab_size] tensor of token counts (count_tokens over the answers).
    """
    import torch

    coverage = DRAFT_VOCAB_COVERAGE if coverage is None else coverage
    multiple = multiple or DRAFT_VOCAB_MULTIPLE
    floor = DRAFT_VOCAB_FLOOR if floor is None else floor

    total = int(counts.sum())
    needed = 0
    if total:
        cumulative = torch.cumsum(torch.sort(counts, descending=True).values, dim=0)
        # the first rank whose cumulative count reaches the share (integers: no rounding at the edge)
        wanted = -(-int(round(coverage * 1_000_000)) * total // 1_000_000)
        needed = int(torch.searchsorted(cumulative, torch.tensor([wanted]), side="left")) + 1
    return min(vocab_size, max(floor, -(-needed // multiple) * multiple))
