"""Training answers made by trtspec's cpu engine in flight (convert/eagle3/engine_answers.py):
the same rows as transformers' generate, whatever the number in flight, and the borrowed target
handed back as it came (plain nn.Linear layers, SDPA attention, the same logits)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from trtspec.errors import TrtSpecError

SHAREGPT = Path(__file__).parent / "data" / "sharegpt_tiny.json"
PROMPTS = ["What is the capital of France?", "def add(a, b):", "the quick brown fox", "1 2 3 4 5",
           "speculative decoding drafts tokens"]


def _samples(path: Path, count: int):
    from trtspec.convert.eagle3.data import iter_samples
    from trtspec.convert.eagle3.sources import DataSource

    return list(iter_samples(DataSource.from_settings(str(path), None).scan(), count))


@pytest.fixture(scope="module")
def prompts_file(tmp_path_factory) -> Path:
    path = tmp_path_factory.mktemp("engine-answers") / "prompts.jsonl"
    path.write_text("".join(json.dumps({"prompt": p}) + "\n" for p in PROMPTS))
    return path


@pytest.fixture(scope="module")
def target(tiny_llama):
    from transformers import AutoModelForCausalLM, AutoTokenizer

    return AutoModelForCausalLM.from_pretrained(tiny_llama).eval(), AutoTokenizer.from_pretrained(tiny_llama)


def test_greedy_rows_are_transformers_rows_and_sampled_rows_do_not_depend_on_the_batch(target, prompts_file,
                                                                                      one_torch_thread):
    from trtspec.convert.eagle3.data import generate_rows
    from trtspec.convert.eagle3.engine_answers import generate_rows_engine

    model, tokenizer = target
    samples = _samples(prompts_file, 2 * len(PROMPTS))  # the second pass over the prompts is sampled
    by_engine = list(generate_rows_engine(model, tokenizer, samples, answer_tokens=12, max_context=1000, in_flight=4))
    assert [index for index, _ in by_engine] == list(range(len(samples)))  # in sample order
    # transformers one at a time (no padding): the target's own greedy answers
    by_generate = list(generate_rows(model, tokenizer, samples[:len(PROMPTS)], answer_tokens=12, max_context=1000,
                                     batch_size=1))
    for (_, engine_row), (_, generate_row) in zip(by_engine, by_generate, strict=False):
        assert engine_row == generate_row
    # sampled answers: seeded per sample, so the same alone as with 3 others in flight ...
    alone = list(generate_rows_engine(model, tokenizer, samples[len(PROMPTS):], answer_tokens=12, max_context=1000,
                                      in_flight=1))
    assert alone == by_engine[len(PROMPTS):]
    # ... and not the greedy answers again
    assert [row.ids for _, row in alone] != [row.ids for _, row in by_engine[:len(PROMPTS)]]


def test_multi_turn_rows_are_transformers_rows(target, one_torch_thread):
    from trtspec.convert.eagle3.data import generate_rows
    from trtspec.convert.eagle3.engine_answers import generate_rows_engine

    model, tokenizer = target
    samples = _samples(SHAREGPT, 4)
    assert len(samples[0].conversation.answer_points()) == 2  # the system-prompted two-turn record
    by_engine = list(generate_rows_engine(model, tokenizer, samples, answer_tokens=6, max_context=10_000, in_flight=3))
    by_generate = list(generate_rows(model, tokenizer, samples, answer_tokens=6, max_context=10_000, batch_size=1))
    assert by_engine == by_generate


def test_the_borrowed_target_is_handed_back_as_it_came(target, prompts_file, one_torch_thread):
    import torch

    from trtspec.convert.eagle3.engine_answers import generate_rows_engine

    model, tokenizer = target
    ids = torch.tensor([tokenizer("the quick brown fox")["input_ids"]])
    attention = model.config._attn_implementation
    with torch.no_grad():
        before = model(input_ids=ids).logits
    linears = {name for name, module in model.named_modules() if type(module) is torch.nn.Linear}
    list(generate_rows_engine(model, tokenizer, _samples(prompts_file, 2), answer_tokens=4, max_context=100,
                              in_flight=2))
    assert {name for name, module in model.named_modules() if type(module) is torch.nn.Linear} == linears
    assert not [name for name, module in model.named_modules() if "Packed" in type(module).__name__]
    assert model.config._attn_implementation == attention
    assert not model._forward_hooks and not any(module._forward_hooks for module in model.modules())
    with torch.no_grad():
        assert torch.equal(model(input_ids=ids).logits, before)


def test_a_context_longer_than_the_pool_is_refused_in_one_line(target, tmp_path, one_torch_thread):
    from trtspec.convert.eagle3.engine_answers import generate_rows_engine

    model, tokenizer = target
    path = tmp_path / "long.jsonl"
    path.write_text(json.dumps({"prompt": " ".join(["word"] * 400)}) + "\n")
    with pytest.raises(TrtSpecError, match=r"long.jsonl:1: the answer engine refused a \d+-token context") as error:
        list(generate_rows_engine(model, tokenizer, _samples(path, 1), answer_tokens=4, max_context=16, in_flight=2))
    assert "\n" not in str(error.value) and "generate_batch_size" in error.value.fix


def test_convert_reports_who_made_the_answers(target):
    from types import SimpleNamespace

    import torch

    from trtspec.convert.eagle3.prepare import answers_made_by

    model, _ = target
    settings = SimpleNamespace(generate_url=None, generate_batch_size=64)
    assert answers_made_by(settings, model) == "in-process target (trtspec cpu engine, 64 in flight)"
    assert answers_made_by(SimpleNamespace(generate_url="h:1", generate_batch_size=64), model) == "h:1"
    # the engine computes in float32 only: a bfloat16 target keeps transformers' generate
    bfloat16 = torch.nn.Linear(4, 4).to(torch.bfloat16)
    assert answers_made_by(settings, bfloat16) == "in-process target (transformers generate, batches of 64)"
