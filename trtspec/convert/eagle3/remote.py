"""Self-distilled rows made by a running server (`--generate-url`): on GPUs the fast engine makes the data.

The server is a trtspec deployment (or any Triton server with the LLM-API model) serving the same
target; trtspec.client.triton streams each answer over gRPC, `concurrency` requests in flight
(eagle3.in_flight: a sample's turns in order, samples concurrently, rows in sample order).

What the served model is sent, by the text_input semantics of its kind:
  - trtspec's cpu model (it has a `speculative` input) applies the target's chat template to
    text_input as one user turn, so a one-turn conversation is sent as its user text. It cannot
    take a rendered multi-turn or system-prompted conversation: those are refused in one line.
  - the LLM-API model (TensorRT-LLM's `llmapi`) passes text_input to the LLM as is, so it is sent
    the conversation rendered by the chat template (trtspec.chat.conversation_text).
The row is the context ids (trtspec.chat.conversation_ids, exactly as in-process generation makes
them) followed by the answer text tokenized without special tokens, plus the end-of-sequence id
when the server stopped there (finish_reason "stop").
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from typing import Any

from trtspec.chat import Message, conversation_ids, conversation_text
from trtspec.convert.eagle3.data import SAMPLED_TEMPERATURE, Row, Sample
from trtspec.convert.eagle3.in_flight import dialogue_row, rows_in_sample_order
from trtspec.convert.progress import Phase
from trtspec.errors import ServerError


def generate_rows_remote(url: str, tokenizer, samples: Iterable[Sample], *, answer_tokens: int, max_context: int,
                         concurrency: int = 8, phase: Phase | None = None,
                         model: str = "tensorrt_llm") -> Iterator[tuple[int, Row]]:
    """(sample index, row) for every sample, in order, answered by the server at `url` (gRPC host:port)."""
    from trtspec.client.triton import TritonLLMClient

    client = TritonLLMClient(url, model)

    def ask(sample: Sample, messages: list[Message], turn: int) -> tuple[list[int], list[int], str]:
        # text_input is read as sent on both paths (the stock llmapi model and trtspec's cpu
        # model): the conversation goes rendered through the chat template, as training reads it
        prompt = conversation_text(tokenizer, messages, add_generation_prompt=True)
        result = _request(client, prompt, sample, answer_tokens)
        ids = list(tokenizer(result["text"], add_special_tokens=False)["input_ids"])
        if result.get("finish_reason") == "stop" and tokenizer.eos_token_id is not None:
            ids.append(tokenizer.eos_token_id)
        return conversation_ids(tokenizer, messages, add_generation_prompt=True), ids, result["text"]

    try:
        yield from rows_in_sample_order(samples, lambda sample: dialogue_row(sample, max_context, ask, phase),
                                        concurrency=concurrency, phase=phase)
    finally:
        client.close()


def _request(client, prompt: str, sample: Sample, answer_tokens: int) -> dict[str, Any]:
    try:
        return client.generate(prompt, max_tokens=answer_tokens,
                               temperature=SAMPLED_TEMPERATURE if sample.sampled else 0.0,
                               seed=sample.index if sample.sampled else None, perf_metrics=False)
    except ServerError as error:
        raise ServerError(f"generating answer {sample.index} through {client.url}: {error.problem}",
                          fix="check that the server serves this target (`trtspec deploy status`)") from None
