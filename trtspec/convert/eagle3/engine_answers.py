"""Self-distilled rows made in process by trtspec's own cpu engine, `in_flight` answers at a time.

Why: the answers were a third to a half of the default 15-minute budget, made with transformers'
`generate` in batches of 64, where every row of a batch waits for the longest answer and a
finished row still computes. The cpu engine batches in flight: a finished answer's slot takes the
next one at once. SmolLM2, 64 packaged prompts x 128 tokens, 2 cores: `generate` in one batch of
64 gave 122 tokens/s, the engine with 64 in flight 233 (docs/CONVERT.md, "Answers in flight").

The engine borrows the convert's own target for the duration (no second copy of the weights): its
linear layers run on prepacked weights (runtime.prepack.prepacked) and its attention through the
paged kernel, and both are put back when the answers are made, so the model converts and
computes features as it did before. The engine is batch invariant, so an answer does not depend
on what else was in flight: the rows are the same at any `in_flight` and on every run.

Where it applies (`usable`): the target on the CPU in float32, the engine's only placement and
dtype. Elsewhere (a GPU, bfloat16) transformers' generate makes the rows (eagle3.data).

The row is the context ids (trtspec.chat.conversation_ids) followed by the engine's answer ids,
plus the end-of-sequence id it stopped at: what eagle3.data.generate_rows makes.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from typing import Any

from trtspec.chat import Message, conversation_ids
from trtspec.convert.eagle3.data import SAMPLED_TEMPERATURE, Row, Sample
from trtspec.convert.eagle3.in_flight import dialogue_row, rows_in_sample_order
from trtspec.convert.progress import Phase
from trtspec.errors import TrtSpecError


def usable(model) -> bool:
    """Whether the cpu engine can make this target's answers: on the CPU, float32 throughout."""
    import torch

    return all(p.device.type == "cpu" and p.dtype == torch.float32 for p in model.parameters())


def generate_rows_engine(model, tokenizer, samples: Iterable[Sample], *, answer_tokens: int, max_context: int,
                         in_flight: int = 64, phase: Phase | None = None) -> Iterator[tuple[int, Row]]:
    """(sample index, row) for every sample, in order, answered by the cpu engine over `model`."""
    with borrowed_engine(model, tokenizer, in_flight=in_flight, row_tokens=max_context + answer_tokens,
                         answer_tokens=answer_tokens) as engine:

        def ask(sample: Sample, messages: list[Message], turn: int) -> tuple[list[int], list[int], str]:
            context = conversation_ids(tokenizer, messages, add_generation_prompt=True)
            result = _generate(engine, context, sample, turn, answer_tokens)
            ids = list(result.token_ids)
            if result.stop_token_id is not None:
                ids.append(result.stop_token_id)
            return context, ids, result.text

        yield from rows_in_sample_order(samples, lambda sample: dialogue_row(sample, max_context, ask, phase),
                                        concurrency=in_flight, phase=phase, thread_name="eagle3-answer")


@contextmanager
def borrowed_engine(model, tokenizer, *, in_flight: int, row_tokens: int, answer_tokens: int) -> Iterator[Any]:
    """An Engine over `model` for a `with` block; the model is as it was afterwards.

    Its KV pool holds `in_flight` rows of `row_tokens` (a longer context takes several rows' room
    and waits for it); a context longer than the whole pool cannot be answered (see _generate).
    """
    from trtspec.runtime import Engine
    from trtspec.runtime.config import EngineConfig
    from trtspec.runtime.cores.threads import release_idle_openmp_team
    from trtspec.runtime.forward.prepack import prepacked

    attention = model.config._attn_implementation
    pool = in_flight * row_tokens
    config = EngineConfig(max_batch_size=in_flight, max_queue_size=in_flight, kv_cache_max_tokens=pool,
                          max_seq_len=pool, max_input_len=pool - answer_tokens)
    with prepacked(model):
        # the caller's forwards ran parallel regions in this thread; the engine's loop thread runs
        # the steps, and two OpenMP teams on the same cores slow both (runtime.threads)
        release_idle_openmp_team()
        engine = Engine(model, tokenizer, None, config)
        try:
            yield engine
        finally:
            engine.close()
            model.config._attn_implementation = attention


def _generate(engine, context: list[int], sample: Sample, turn: int, answer_tokens: int):
    from trtspec.runtime.loop.request import InvalidRequestError, ServerBusyError

    try:
        # a seed per sample and turn: sampled answers are reproducible and never repeat one another
        return engine.generate(context, max_new_tokens=answer_tokens,
                               temperature=SAMPLED_TEMPERATURE if sample.sampled else 0.0,
                               seed=(sample.index << 8) + turn if sample.sampled else None)
    except (InvalidRequestError, ServerBusyError) as error:
        where = sample.conversation.where or f"record {sample.conversation.index}"
        raise TrtSpecError(f"{where}: the answer engine refused a {len(context)}-token context ({error.problem})",
                           fix="shorten that record, or raise speculative.eagle3.generate_batch_size "
                               "(the answer engine's KV pool holds that many rows of seq_len + "
                               "answer_tokens)") from None
