"""One prompt reader (trtspec.prompts) and one chat rule (trtspec.chat) for convert, runtime and bench."""

from __future__ import annotations

import json

import pytest

from trtspec.chat import prompt_ids
from trtspec.errors import TrtSpecError
from trtspec.prompts import load_prompts, prompt_texts


def test_packaged_prompt_sets_are_disjoint_from_the_held_out_dev_set(dev_prompts):
    train = prompt_texts(None, "train")
    calibration = prompt_texts(None, "calibration")
    held_out = {p["prompt"] for p in dev_prompts}
    assert len(train) >= 300 and len(calibration) >= 32
    assert not held_out & set(train) and not held_out & set(calibration) and not set(train) & set(calibration)


def test_packaged_and_custom_prompts(tmp_path):
    packaged = load_prompts(None, "bench")
    assert len(packaged) >= 20 and {"chat", "code"} <= {p.category for p in packaged}
    path = tmp_path / "p.jsonl"
    path.write_text('{"prompt": "a"}\n\n{"prompt": "b", "category": "x"}\n')
    assert [(p.text, p.category) for p in load_prompts(path)] == [("a", "default"), ("b", "x")]
    assert len(load_prompts(path, limit=1)) == 1
    assert prompt_texts(path, "train") == ["a", "b"]


@pytest.mark.parametrize(("content", "message"), [
    (json.dumps({"prompt": "ok"}) + "\n{not json\n", r"p.jsonl:2: not valid JSON"),
    ('{"prompt": "a"}\n{"text": "b"}\n', r"p.jsonl:2: needs a non-empty string \"prompt\""),
    ("\n", "the prompt file is empty"),
    ('{"prompt": "a"}\n'.encode("utf-16"), "not UTF-8 text"),
    (b"\x89PNG\r\n\x1a\n\x00\x00", "not UTF-8 text"),
])
def test_bad_prompt_files_are_refused_in_one_line(tmp_path, content, message):
    path = tmp_path / "p.jsonl"
    path.write_bytes(content if isinstance(content, bytes) else content.encode())
    with pytest.raises(TrtSpecError, match=message) as error:
        load_prompts(path)
    assert "\n" not in str(error.value)


def test_a_directory_or_missing_file_is_refused(tmp_path):
    with pytest.raises(TrtSpecError, match="is a directory"):
        load_prompts(tmp_path)
    with pytest.raises(TrtSpecError, match="no such prompt file"):
        load_prompts(tmp_path / "missing.jsonl")


def _template_less(tokenizer):
    plain = tokenizer.__class__(tokenizer_object=tokenizer.backend_tokenizer, eos_token=tokenizer.eos_token,
                                bos_token=tokenizer.bos_token, pad_token=tokenizer.pad_token)
    plain.chat_template = None
    return plain


def test_training_data_and_serving_tokenize_a_prompt_alike(tiny_llama):
    """EAGLE-3 training rows start with exactly the ids the engine feeds the target for that prompt."""
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from trtspec.convert.eagle3.data import generate_sequences
    from trtspec.runtime import Engine

    tokenizer = AutoTokenizer.from_pretrained(tiny_llama)
    engine = Engine.from_checkpoints(tiny_llama, mode="none")
    model = AutoModelForCausalLM.from_pretrained(tiny_llama)
    prompt = "What is the capital of France?"
    templated = engine.encode(prompt)
    assert templated == prompt_ids(tokenizer, prompt)
    assert tokenizer.decode(templated).startswith("<|im_start|>user\n")
    [row] = generate_sequences(model, tokenizer, [prompt], num_samples=1, answer_tokens=3)
    assert row[:len(templated)] == templated and len(row) > len(templated)
    # Without a template both use the tokenizer's own default for plain text.
    plain = _template_less(tokenizer)
    engine.tokenizer = plain
    assert engine.encode(prompt) == prompt_ids(plain, prompt) == plain(prompt)["input_ids"]
    [row] = generate_sequences(model, plain, [prompt], num_samples=1, answer_tokens=3)
    assert row[:len(plain(prompt)["input_ids"])] == plain(prompt)["input_ids"]
