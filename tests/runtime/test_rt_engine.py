"""The engine end to end on tiny seeded models: greedy equality, streaming, stops, stats, errors."""

from __future__ import annotations

import pytest

from tests.runtime.conftest import TINY_PROMPTS
from trtspec.runtime.loop.request import InvalidRequestError


@pytest.mark.parametrize("prompt", TINY_PROMPTS)
def test_ngram_greedy_equals_plain_greedy(ngram_engine, prompt):
    plain = ngram_engine.generate(prompt, max_new_tokens=48, speculative=False)
    spec = ngram_engine.generate(prompt, max_new_tokens=48)
    assert spec.token_ids == plain.token_ids
    assert plain.stats.num_drafts == 0 and plain.stats.num_target_passes == 47
    assert spec.finish_reason == plain.finish_reason


def test_ngram_drafts_are_verified_and_counted(ngram_engine):
    result = ngram_engine.generate(TINY_PROMPTS[0], max_new_tokens=48)
    stats = result.stats
    assert stats.num_drafts > 0
    assert stats.num_accepted_tokens > 0, "a repeating prompt must get some drafts accepted"
    # every target pass commits exactly 1 + accepted tokens; the prefill commits the first token
    assert stats.num_target_passes + stats.num_accepted_tokens + 1 >= len(result.token_ids)
    assert sum(stats.accepted_per_position) == stats.num_accepted_tokens
    assert stats.acceptance_rate == pytest.approx(stats.num_accepted_tokens / stats.num_draft_tokens)
    assert stats.mean_acceptance_length == pytest.approx(1 + stats.num_accepted_tokens / stats.num_drafts)
    assert stats.to_dict()["mean_acceptance_length"] == stats.mean_acceptance_length


def test_streaming_concatenates_to_the_result(ngram_engine):
    whole = ngram_engine.generate(TINY_PROMPTS[0], max_new_tokens=30)
    chunks = list(ngram_engine.generate(TINY_PROMPTS[0], max_new_tokens=30, stream=True))
    assert [c.finish_reason for c in chunks[:-1]] == [None] * (len(chunks) - 1)
    assert chunks[-1].finish_reason == "length"
    assert sum((c.token_ids for c in chunks), []) == whole.token_ids
    assert "".join(c.text for c in chunks) == whole.text
    assert any(len(c.token_ids) > 1 for c in chunks), "speculation should commit several tokens per step"


def _echo_prompt(engine):
    """A prompt that contains the model's own continuation of it, so n-gram drafts copy it."""
    head = TINY_PROMPTS[0]
    continuation = engine.generate(head, max_new_tokens=24, speculative=False).token_ids
    return head + continuation + head


def _token_inside_a_multi_token_step(engine, prompt):
    """A token whose first occurrence in the output was committed inside a multi-token step."""
    seen = []
    for chunk in engine.generate(prompt, max_new_tokens=40, stream=True):
        for index, token in enumerate(chunk.token_ids):
            if index < len(chunk.token_ids) - 1 and token not in seen:
                return token, len(seen)
            seen.append(token)
    pytest.fail("no multi-token step happened")


def test_eos_inside_an_accepted_draft_stops_there(ngram_engine):
    prompt = _echo_prompt(ngram_engine)
    token, position = _token_inside_a_multi_token_step(ngram_engine, prompt)
    saved = ngram_engine.eos_ids
    ngram_engine.eos_ids = {token}
    try:
        result = ngram_engine.generate(prompt, max_new_tokens=40)
    finally:
        ngram_engine.eos_ids = saved
    assert result.finish_reason == "stop"
    assert len(result.token_ids) == position and token not in result.token_ids


def test_stop_string_inside_an_accepted_draft(ngram_engine):
    prompt = _echo_prompt(ngram_engine)
    token, _ = _token_inside_a_multi_token_step(ngram_engine, prompt)
    full = ngram_engine.generate(prompt, max_new_tokens=40)
    stop_text = ngram_engine.tokenizer.decode([token])
    if not stop_text.strip() or stop_text not in full.text:
        pytest.skip("the chosen token decodes to nothing searchable")
    result = ngram_engine.generate(prompt, max_new_tokens=40, stop=[stop_text])
    assert result.finish_reason == "stop"
    assert result.text == full.text[: full.text.index(stop_text)]
    assert stop_text in ngram_engine.tokenizer.decode(result.token_ids)
    assert len(result.token_ids) < len(full.token_ids)


def test_max_new_tokens_cuts_inside_a_draft(ngram_engine):
    full = ngram_engine.generate(TINY_PROMPTS[0], max_new_tokens=40)
    for n in (1, 2, 7, 13):
        cut = ngram_engine.generate(TINY_PROMPTS[0], max_new_tokens=n)
        assert cut.token_ids == full.token_ids[:n] and cut.finish_reason == "length"


def test_text_prompt_uses_the_chat_template(ngram_engine):
    ids = ngram_engine.encode("hello there")
    assert ids[0] == ngram_engine.tokenizer.convert_tokens_to_ids("<|im_start|>")
    result = ngram_engine.generate("hello there", max_new_tokens=8)
    assert len(result.token_ids) <= 8 and isinstance(result.text, str)


def test_cumulative_stats_add_up(ngram_engine):
    before = ngram_engine.cumulative_stats()
    a = ngram_engine.generate(TINY_PROMPTS[1], max_new_tokens=20)
    b = ngram_engine.generate(TINY_PROMPTS[0], max_new_tokens=20)
    after = ngram_engine.cumulative_stats()
    assert after.num_drafts - before.num_drafts == a.stats.num_drafts + b.stats.num_drafts
    assert after.num_output_tokens - before.num_output_tokens == len(a.token_ids) + len(b.token_ids)


def test_concurrent_requests_match_sequential(ngram_engine):
    from concurrent.futures import ThreadPoolExecutor

    expected = [ngram_engine.generate(p, max_new_tokens=24).token_ids for p in TINY_PROMPTS]
    with ThreadPoolExecutor(4) as pool:
        got = list(pool.map(lambda p: ngram_engine.generate(p, max_new_tokens=24).token_ids, TINY_PROMPTS))
    assert got == expected


@pytest.mark.parametrize("kwargs, message", [
    ({"max_new_tokens": 0}, "max_new_tokens"),
    ({"temperature": -0.5}, "temperature"),
    ({"top_p": 0.0}, "top_p"),
    ({"top_p": 1.5}, "top_p"),
    ({"top_k": -1}, "top_k"),
])
def test_invalid_arguments_are_one_line_errors(ngram_engine, kwargs, message):
    with pytest.raises(InvalidRequestError, match=message) as caught:
        ngram_engine.generate([1, 2, 3], **kwargs)
    assert "\n" not in str(caught.value)


def test_prompt_longer_than_max_input_len(ngram_engine):
    with pytest.raises(InvalidRequestError, match="max_input_len"):
        ngram_engine.generate([7] * (ngram_engine.max_input_len + 1), max_new_tokens=1)


def test_load_engine_bundle(tmp_path, tiny_llama):
    import json
    import shutil

    from trtspec.runtime import load_engine

    shutil.copytree(tiny_llama, tmp_path / "target")
    (tmp_path / "engine.json").write_text(json.dumps({
        "format": "trtspec-engine/1", "trtspec_version": "0.1.0", "name": "tiny-ngram-cpu", "backend": "cpu",
        "mode": "ngram", "build_config": {"max_input_len": 64, "max_seq_len": 128, "max_draft_len": 3},
        "target": {"path": "target", "sha256": "x", "source": "tiny"}, "draft": None,
        "runtime": {"dtype": "float32", "ngram_min": 2, "ngram_max": 2, "dynamic_draft": False,
                    "confidence_threshold": 0.0, "acceptance_floor": 0.0, "eagle_choices": None,
                    "draft_len_schedule": [[4, 0], [1, 3]], "kv_cache_max_tokens": 1024}}))
    engine = load_engine(tmp_path, max_queue_size=5)
    assert (engine.mode, engine.max_draft_len, engine.max_input_len) == ("ngram", 3, 64)
    assert engine.config.draft_len_schedule == ((1, 3), (4, 0)) and engine.config.kv_cache_max_tokens == 1024
    assert engine.config.max_queue_size == 5
    assert engine.drafter.ngram_min == 2
    result = engine.generate(TINY_PROMPTS[0], max_new_tokens=200)
    assert result.finish_reason == "length" and len(TINY_PROMPTS[0]) + len(result.token_ids) == 128


def test_variants_share_weights_and_close_detaches_their_hooks(tiny_llama, modelopt_eagle3):
    """Engines over one target (bench and tune variants) each hook the layers their drafter
    reads; close() removes exactly those hooks, so building many variants leaves none behind."""
    import dataclasses

    from trtspec.runtime import Engine

    engine = Engine.from_checkpoints(tiny_llama, mode="eagle3", draft_dir=modelopt_eagle3[1], max_draft_len=4)
    layers = engine.target.get_decoder().layers

    def hooks():
        return sum(len(layer._forward_hooks) for layer in layers)

    alone = hooks()
    assert alone == len(engine.drafter.aux_layer_ids)
    variants = [engine.variant(max_draft_len=k) for k in (1, 2, 3)]
    assert hooks() == 4 * alone
    assert variants[0].target is engine.target and variants[0].drafter is engine.drafter
    assert variants[1].config == dataclasses.replace(engine.config, max_draft_len=2)
    reference = engine.generate(TINY_PROMPTS[0], max_new_tokens=12).token_ids
    for variant in variants:
        assert variant.generate(TINY_PROMPTS[0], max_new_tokens=12).token_ids == reference
        variant.close()
        variant.close()  # idempotent
    assert hooks() == alone
    engine.close()
    assert hooks() == 0


def test_engine_config_is_frozen_and_checks_its_options():
    import dataclasses

    from trtspec.runtime.config import EngineConfig

    config = EngineConfig.from_options(mode="eagle3", max_draft_len=3, eagle_choices=[[0], [0, 0]])
    assert config.eagle_choices == ((0,), (0, 0)) and config.label == "eagle3"
    with pytest.raises(dataclasses.FrozenInstanceError):
        config.max_draft_len = 5
    with pytest.raises(TypeError, match="max_draft_length"):
        EngineConfig.from_options(max_draft_length=3)
