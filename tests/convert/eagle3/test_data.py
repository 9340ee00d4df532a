"""EAGLE-3 training data: ShareGPT / OpenAI / prompt records, multi-turn self-distillation, refusals.

`data/sharegpt_tiny.json` holds four ShareGPT conversations: one with a system message and two
turns, one ending on an unanswered user turn, two single-turn.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.convert.conftest import manifest, run_cli, write_spec
from trtspec.chat import conversation_ids, prompt_ids
from trtspec.convert.eagle3.sources import DataSource
from trtspec.errors import TrtSpecError

SHAREGPT = Path(__file__).parent / "data" / "sharegpt_tiny.json"


def _source(path: Path) -> DataSource:
    return DataSource.from_settings(str(path), None).scan()


def test_sharegpt_openai_and_prompt_records_read_alike(tmp_path):
    sharegpt = {"conversations": [{"from": "system", "value": "Be brief."}, {"from": "human", "value": "Hi"},
                                  {"from": "gpt", "value": "Hello!"}, {"from": "human", "value": "Bye"}]}
    openai = {"messages": [{"role": "system", "content": "Be brief."},
                           {"role": "user", "content": [{"type": "text", "text": "Hi"}]},
                           {"role": "assistant", "content": "Hello!"}, {"role": "user", "content": "Bye"}]}
    path = tmp_path / "mixed.jsonl"
    path.write_text("\n".join(json.dumps(r) for r in (sharegpt, openai, {"prompt": "Hi", "category": "x"})) + "\n")
    source = _source(path)
    first, second, third = list(source.conversations())
    expected = ({"role": "system", "content": "Be brief."}, {"role": "user", "content": "Hi"},
                {"role": "assistant", "content": "Hello!"}, {"role": "user", "content": "Bye"})
    assert first.messages == second.messages == expected
    # the target answers after each user turn; the data's answer text is never used
    assert first.answer_points() == [2, 4] and third.answer_points() == [1]
    assert first.prompt_messages(2, 4) == [{"role": "user", "content": "Bye"}]
    assert source.count == 3 and len(source.sha256) == 64
    directory = tmp_path / "dir"
    directory.mkdir()
    (directory / "b.jsonl").write_text(json.dumps({"prompt": "second"}) + "\n")
    (directory / "a.json").write_text(json.dumps([{"prompt": "first"}]))
    (directory / "notes.txt").write_text("not data")
    assert [c.messages[0]["content"] for c in _source(directory).conversations()] == ["first", "second"]


@pytest.mark.parametrize(("name", "content", "message"), [
    ("d.jsonl", '{"prompt": "ok"}\n{"prompt": "ok"\n', r"d.jsonl:2: not valid JSON"),
    ("d.jsonl", '{"prompt": "ok"}\n\n{"text": "x"}\n', r'd.jsonl:3: no "conversations", "messages" or "prompt" \(keys: text\)'),
    ("d.jsonl", '{"conversations": [{"from": "tool", "value": "x"}]}\n', r"d.jsonl:1: conversations\[0\] has from 'tool'"),
    ("d.jsonl", '{"messages": [{"role": "user"}]}\n', r'd.jsonl:1: messages\[0\] needs "role" and "content"'),
    ("d.jsonl", '{"messages": [{"role": "assistant", "content": "hi"}]}\n', "d.jsonl:1: the conversation has no user message"),
    ("d.jsonl", '{"messages": [{"role": "user", "content": [{"type": "image_url"}]}]}\n', "content must be text"),
    ("d.json", '{"prompt": "not an array"}', "a .json data file must hold one array of records"),
    ("d.json", '[{"prompt": "a"}, {"prompt": ""}]', r'd.json\[1\]: "prompt" must be a non-empty string'),
    ("d.jsonl", "", "no training records"),
])
def test_the_first_bad_record_is_refused_in_one_line(tmp_path, name, content, message):
    path = tmp_path / name
    path.write_text(content)
    with pytest.raises(TrtSpecError, match=message) as error:
        _source(path)
    assert "\n" not in str(error.value) and error.value.fix


def test_data_and_prompts_together_or_missing_data_are_refused(tmp_path):
    with pytest.raises(TrtSpecError, match="data and speculative.eagle3.prompts are both set"):
        DataSource.from_settings("a.jsonl", "b.jsonl")
    with pytest.raises(TrtSpecError, match="no such data file or directory"):
        DataSource.from_settings(str(tmp_path / "missing.jsonl"), None)
    with pytest.raises(TrtSpecError, match="holds no .jsonl or .json files"):
        DataSource.from_settings(str(tmp_path), None)


def test_multi_turn_rows_carry_the_targets_own_earlier_answers(tiny_llama, one_torch_thread):
    """A two-turn conversation's row is what the engine would be fed for its second turn (the
    first answer being the target's own, not the data's) followed by the target's second answer."""
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from trtspec.convert.eagle3.data import Sample, generate_rows, iter_samples
    from trtspec.convert.eagle3.sources import Conversation

    tokenizer = AutoTokenizer.from_pretrained(tiny_llama)
    model = AutoModelForCausalLM.from_pretrained(tiny_llama)
    source = _source(SHAREGPT)
    samples = list(iter_samples(source, 5))
    assert [s.index for s in samples] == [0, 1, 2, 3, 4] and [s.sampled for s in samples] == [False] * 4 + [True]
    rows = {index: row.ids for index, row in generate_rows(model, tokenizer, samples[:1], answer_tokens=6,
                                                           max_context=10_000)}
    system, first, _, second, _ = samples[0].conversation.messages
    # the first turn alone, generated the same way
    [(_, alone_row)] = generate_rows(model, tokenizer, [Sample(0, Conversation(0, (system, first)), False)],
                                     answer_tokens=6, max_context=10_000)
    first_context = conversation_ids(tokenizer, [system, first], add_generation_prompt=True)
    alone = alone_row.ids
    assert alone_row.answer_start == len(first_context)  # what the draft vocabulary is counted over
    first_answer = tokenizer.decode(alone[len(first_context):], skip_special_tokens=True)
    context = conversation_ids(tokenizer, [system, first, {"role": "assistant", "content": first_answer}, second],
                               add_generation_prompt=True)
    assert rows[0][:len(context)] == context and len(rows[0]) > len(context)
    assert rows[0][:len(first_context)] == first_context
    # a context already at max_context tokens: the later turn is not generated
    [(_, short)] = generate_rows(model, tokenizer, samples[:1], answer_tokens=6, max_context=len(first_context))
    assert short.ids == alone
    # one-turn records keep the one rule of trtspec.chat: prompt_ids is the row's start
    [(_, single)] = generate_rows(model, tokenizer, [samples[1]], answer_tokens=4, max_context=10_000)
    assert single.ids[:len(prompt_ids(tokenizer, "def add(a, b):"))] == prompt_ids(tokenizer, "def add(a, b):")
    assert single.answer_start == len(prompt_ids(tokenizer, "def add(a, b):"))


@pytest.mark.slow
def test_sharegpt_fixture_trains_the_tiny_head_end_to_end(tiny_llama, tmp_path, eval_prompts_file):
    spec = write_spec(tmp_path, tiny_llama, speculative={
        "mode": "eagle3", "eagle3": {"data": str(SHAREGPT), "num_samples": 6, "answer_tokens": 8, "max_steps": 3,
                                      "batch_size": 2, "seq_len": 96, "checkpoint_every": 2, "draft_vocab_size": 128}})
    result = run_cli("-c", str(spec), "--eval-prompts", str(eval_prompts_file), "--eval-tokens", "4", "--json")
    assert result.exit_code == 0, result.output
    data = manifest(tmp_path / "work" / "checkpoints" / "eagle3")
    report = data["report"]
    assert report["data"]["source"] == str(SHAREGPT) and report["data"]["records"] == 4
    assert report["data"]["sequences"] == 6 and report["data"]["generated_by"] == "in-process target (trtspec cpu engine, 64 in flight)"
    assert report["training"]["steps"] == 3 and report["export"] and report["acceptance"]["prompts"] == 2
    assert len(data["inputs"]["data_sha256"]) == 64
    # the rows file holds the regenerated conversations, in sample order
    rows = [json.loads(line) for line in (tmp_path / "work" / "checkpoints" / ".eagle3-work" /
                                          "sequences.jsonl").read_text().splitlines()]
    assert [row["i"] for row in rows] == list(range(6))
    # the same conversations in OpenAI form read as the same messages
    openai = tmp_path / "openai.jsonl"
    with openai.open("w") as handle:
        for record in json.loads(SHAREGPT.read_text()):
            handle.write(json.dumps({"messages": [{"role": {"human": "user", "gpt": "assistant"}.get(t["from"], t["from"]),
                                                   "content": t["value"]} for t in record["conversations"]]}) + "\n")
    assert [c.messages for c in _source(openai).conversations()] == [c.messages for c in _source(SHAREGPT).conversations()]


def test_a_relative_data_path_in_a_spec_file_is_read_beside_the_spec(tmp_path, monkeypatch):
    from trtspec.spec.loading import load_spec

    (tmp_path / "project").mkdir()
    (tmp_path / "project" / "trtspec.yaml").write_text("speculative:\n  mode: eagle3\n  eagle3: {data: convs.jsonl}\n")
    monkeypatch.chdir(tmp_path)
    spec = load_spec("project/trtspec.yaml")
    assert Path(spec.speculative.eagle3.data).resolve() == tmp_path / "project" / "convs.jsonl"
    # a flag stays relative to the current directory
    assert load_spec("project/trtspec.yaml", {"speculative.eagle3.data": "x.jsonl"}).speculative.eagle3.data == "x.jsonl"
