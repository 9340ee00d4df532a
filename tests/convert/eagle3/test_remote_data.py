"""Self-distilled rows made through a running server (`--generate-url`): a real tritonserver on
loopback serving the tiny target's cpu engine, called by trtspec.client.triton with several requests in
flight. Its greedy answers must be the in-process target's greedy answers, row for row."""

from __future__ import annotations

import json

import pytest

from tests.convert.conftest import manifest, run_cli, write_spec
from trtspec.chat import prompt_ids

pytestmark = [pytest.mark.slow, pytest.mark.e2e]

PROMPTS = ["What is the capital of France?", "def add(a, b):", "the quick brown fox", "1 2 3 4 5",
           "speculative decoding drafts tokens"]


@pytest.fixture(scope="module")
def server(tmp_path_factory, tiny_llama):
    """gRPC host:port of a tritonserver serving the tiny target (cpu backend, no speculation)."""
    from tests.serve.conftest import make_spec
    from trtspec import repository
    from trtspec.artifacts import Layout
    from trtspec.builders import build
    from trtspec.serve import server as triton

    root = tmp_path_factory.mktemp("generate-server")
    spec = make_spec(root, tiny_llama, mode="none", serve={"instance_count": 1})
    layout = Layout.from_spec(spec)
    repository.render(build(spec).engine_dir, spec, layout.repository)
    triton.start_local(spec, layout.repository, layout)
    try:
        yield f"127.0.0.1:{spec.serve.grpc_port}"
    finally:
        triton.stop_local(layout)


@pytest.fixture(scope="module")
def prompts_file(tmp_path_factory):
    path = tmp_path_factory.mktemp("generate-data") / "prompts.jsonl"
    path.write_text("".join(json.dumps({"prompt": p}) + "\n" for p in PROMPTS))
    return path


def test_server_answers_are_the_in_process_targets_greedy_answers(server, tiny_llama, prompts_file, one_torch_thread):
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from trtspec.convert.eagle3.data import generate_rows, iter_samples
    from trtspec.convert.eagle3.remote import generate_rows_remote
    from trtspec.convert.eagle3.sources import DataSource

    tokenizer = AutoTokenizer.from_pretrained(tiny_llama)
    source = DataSource.from_settings(str(prompts_file), None).scan()
    samples = list(iter_samples(source, len(PROMPTS)))
    remote = list(generate_rows_remote(server, tokenizer, samples, answer_tokens=10, max_context=1000, concurrency=3))
    local = list(generate_rows(AutoModelForCausalLM.from_pretrained(tiny_llama), tokenizer, samples,
                               answer_tokens=10, max_context=1000))
    assert [index for index, _ in remote] == list(range(len(PROMPTS)))  # in sample order
    for prompt, (_, by_server), (_, in_process) in zip(PROMPTS, remote, local, strict=True):
        context = prompt_ids(tokenizer, prompt)
        assert by_server.ids[:len(context)] == in_process.ids[:len(context)] == context
        assert by_server.answer_start == in_process.answer_start == len(context)
        served, local_answer = (tokenizer.decode(row.ids[len(context):], skip_special_tokens=True)
                                for row in (by_server, in_process))
        assert served == local_answer and served
        assert (by_server.ids[-1] == tokenizer.eos_token_id) == (in_process.ids[-1] == tokenizer.eos_token_id)


def test_cli_trains_on_answers_generated_by_the_server(server, tiny_llama, prompts_file, tmp_path, eval_prompts_file):
    spec = write_spec(tmp_path, tiny_llama, speculative={
        "mode": "eagle3", "eagle3": {"prompts": str(prompts_file), "num_samples": 7, "answer_tokens": 8,
                                      "max_steps": 2, "batch_size": 2, "seq_len": 64, "checkpoint_every": 2}})
    result = run_cli("-c", str(spec), "--generate-url", server, "--generate-concurrency", "2",
                     "--eval-prompts", str(eval_prompts_file), "--eval-tokens", "4", "--json")
    assert result.exit_code == 0, result.output
    report = manifest(tmp_path / "work" / "checkpoints" / "eagle3")["report"]
    assert report["data"]["generated_by"] == server and report["data"]["sequences"] == 7
    assert report["training"]["steps"] == 2


def test_the_cpu_server_answers_a_system_prompted_conversation_sent_rendered(server, tiny_llama, tmp_path):
    # text_input means the same on both paths (the stock llmapi model's reading): the client renders
    # the conversation through the chat template, so the cpu server takes multi-turn data too
    from transformers import AutoTokenizer

    from trtspec.chat import conversation_ids
    from trtspec.convert.eagle3.data import iter_samples
    from trtspec.convert.eagle3.remote import generate_rows_remote
    from trtspec.convert.eagle3.sources import DataSource

    messages = [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Hi"}]
    path = tmp_path / "chat.jsonl"
    path.write_text(json.dumps({"messages": messages}) + "\n")
    tokenizer = AutoTokenizer.from_pretrained(tiny_llama)
    samples = iter_samples(DataSource.from_settings(str(path), None).scan(), 1)
    ((_, row),) = list(generate_rows_remote(server, tokenizer, samples, answer_tokens=4, max_context=100))
    context = conversation_ids(tokenizer, messages, add_generation_prompt=True)
    assert row.ids[:len(context)] == context and row.answer_start == len(context) < len(row.ids)
