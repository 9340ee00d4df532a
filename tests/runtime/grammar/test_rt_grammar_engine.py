"""Structured output under speculation: every mode's constrained output equals the engine's own
constrained output without speculation, token for token (greedy), alone and 8 at a time, and is
valid for the schema; so is tool_choice auto's structural tag (free text, or whole tool calls)."""

from __future__ import annotations

import json
import threading

import pytest

SCHEMA = {"type": "object", "additionalProperties": False, "required": ["color", "ok", "n", "name"],
          "properties": {"color": {"enum": ["red", "green", "blue"]}, "ok": {"type": "boolean"},
                         "n": {"type": "integer", "minimum": 0, "maximum": 999},
                         "name": {"type": "string", "maxLength": 8}}}
# the arguments of a tool call, wrapped as the OpenAI endpoint constrains them (trtspec.serve.openai_tools)
TOOL_SCHEMA = {"type": "object", "additionalProperties": False, "required": ["name", "arguments"],
               "properties": {"name": {"const": "get_weather"},
                              "arguments": {"type": "object", "additionalProperties": False, "required": ["city", "days"],
                                            "properties": {"city": {"enum": ["Paris", "Oslo"]},
                                                           "days": {"type": "integer", "minimum": 1, "maximum": 7}}}}}
PROMPTS = ["What is the capital of France?", "the quick brown fox", "def add(a, b):", "1 2 3 4 5 6"]
WEATHER = {"name": "get_weather", "parameters": TOOL_SCHEMA["properties"]["arguments"]}


def _check(result, schema):
    """The output parses and has the schema's required keys with allowed values."""
    assert result.finish_reason == "stop", result.text  # EOS came where the grammar was complete
    value = json.loads(result.text)  # strict: no raw control characters in strings (compile._bounded_strings)
    assert set(value) == set(schema["required"])
    return value


MODES = {
    "ngram": lambda t, d, e: dict(mode="ngram", ngram_min=1, ngram_max=3),
    "suffix": lambda t, d, e: dict(mode="suffix"),
    "lookahead": lambda t, d, e: dict(mode="lookahead", lookahead=[4, 3, 4]),
    "layerskip": lambda t, d, e: dict(mode="layerskip", exit_layer=2),
    "draft-target": lambda t, d, e: dict(mode="draft-target", draft_dir=d),
    "eagle3-chain": lambda t, d, e: dict(mode="eagle3", draft_dir=e),
    "eagle3-static-tree": lambda t, d, e: dict(mode="eagle3", draft_dir=e, eagle_choices=[
        [0], [1], [2], [0, 0], [0, 1], [1, 0], [0, 0, 0], [0, 1, 0], [0, 0, 0, 0]]),
    "eagle3-dynamic-tree": lambda t, d, e: dict(mode="eagle3", draft_dir=e, tree=[2, 3, 5]),
}


@pytest.fixture(scope="module", params=[*MODES, "medusa", "mtp"])
def engine(request, tiny_llama, tiny_llama_draft, modelopt_eagle3, tmp_path_factory):
    from trtspec.runtime import Engine

    target = tiny_llama
    if request.param == "medusa":
        from trtspec.testing.tiny_medusa import make_tiny_medusa

        options = dict(mode="medusa", draft_dir=make_tiny_medusa(tiny_llama, tmp_path_factory.mktemp("medusa"),
                                                                  num_heads=3))
    elif request.param == "mtp":  # the checkpoint's own MTP module: a tiny seeded DeepSeek-V3
        target, options = request.getfixturevalue("tiny_deepseek_mtp"), dict(mode="mtp")
    else:
        options = MODES[request.param](tiny_llama, tiny_llama_draft, modelopt_eagle3[1])
    # a schedule that always drafts: the cost model might turn drafting off for this cheap target
    schedule = [[1, 4], [8, 4]] if "tree" not in options else None
    with Engine.from_checkpoints(target, max_draft_len=4, draft_len_schedule=schedule, **options) as engine:
        yield engine


def test_constrained_greedy_equals_plain_constrained_greedy(engine):
    from trtspec.runtime.grammar.compile import GrammarSpec

    drafts = 0
    for schema, prompt in ((SCHEMA, PROMPTS[0]), (TOOL_SCHEMA, PROMPTS[1]), (SCHEMA, PROMPTS[2])):
        grammar = GrammarSpec.json_schema(schema)
        plain = engine.generate(prompt, max_new_tokens=64, grammar=grammar, speculative=False)
        spec = engine.generate(prompt, max_new_tokens=64, grammar=grammar)
        assert spec.token_ids == plain.token_ids, (engine.mode, prompt, plain.text, spec.text)
        _check(plain, schema)
        drafts += spec.stats.num_drafts + spec.stats.num_grammar_cut_tokens
    # a random draft's tokens are mostly refused by the grammar (cut); either way something was drafted
    assert drafts > 0, "nothing was drafted: the test compared plain decoding with itself"


def test_auto_tool_choice_greedy_equals_plain_constrained_greedy(engine):
    """tool_choice auto (trtspec.serve.openai_tools.auto_tag): the tiny random model answers in text
    (it never writes `{"name": `); and with the tag's trigger set to the second token the model
    writes unconstrained, the same grammar shape makes it call the tool: its first token, the
    trigger, the call's forced opening, arguments valid for the schema, then end-of-sequence."""
    from trtspec.runtime.grammar.compile import GrammarSpec
    from trtspec.serve.openai_tools import auto_tag

    drafts = 0
    auto = GrammarSpec.structural_tag(auto_tag([WEATHER], parallel=True))
    unconstrained = engine.generate(PROMPTS[3], max_new_tokens=24, speculative=False)
    plain = engine.generate(PROMPTS[3], max_new_tokens=24, grammar=auto, speculative=False)
    spec = engine.generate(PROMPTS[3], max_new_tokens=24, grammar=auto)
    assert spec.token_ids == plain.token_ids, (engine.mode, plain.text, spec.text)
    if max(unconstrained.token_ids) >= len(engine.tokenizer):  # the tiny DeepSeek (mtp): rows past its 398 tokens
        pytest.skip("the random model's free text holds ids its tokenizer has no token for, which every grammar masks")
    assert plain.token_ids == unconstrained.token_ids  # text that never opens a call is left alone
    drafts += spec.stats.num_drafts + spec.stats.num_grammar_cut_tokens

    tag = auto_tag([WEATHER], parallel=False)
    trigger = engine.tokenizer.decode(unconstrained.token_ids[1:2])
    tag["format"]["triggers"] = [trigger]
    tag["format"]["tags"][0]["begin"] = begin = trigger + tag["format"]["tags"][0]["begin"]
    calling = GrammarSpec.structural_tag(tag)
    plain = engine.generate(PROMPTS[3], max_new_tokens=96, grammar=calling, speculative=False)
    spec = engine.generate(PROMPTS[3], max_new_tokens=96, grammar=calling)
    assert spec.token_ids == plain.token_ids, (engine.mode, plain.text, spec.text)
    assert plain.token_ids[0] == unconstrained.token_ids[0] and begin in plain.text, plain.text
    arguments, end = json.JSONDecoder().raw_decode(plain.text, plain.text.index(begin) + len(begin))
    assert arguments["city"] in ("Paris", "Oslo") and 1 <= arguments["days"] <= 7
    assert plain.text[end:] == "}" and plain.finish_reason == "stop"  # one call (stop_after_first), then EOS
    drafts += spec.stats.num_drafts + spec.stats.num_grammar_cut_tokens
    assert drafts > 0, "nothing was drafted: the test compared plain decoding with itself"


def test_sampled_constrained_answers_follow_the_schema(engine):
    """Sampling (temperature 1, seeded) under the grammar: every answer that ends is valid for the
    schema (its distribution: test_rt_grammar_units' chi-square), speculative and not."""
    from trtspec.runtime.grammar.compile import GrammarSpec

    grammar = GrammarSpec.json_schema(SCHEMA)
    for seed, speculative in ((1, True), (2, True), (1, False)):
        result = engine.generate(PROMPTS[3], max_new_tokens=64, grammar=grammar, temperature=1.0, seed=seed,
                                 speculative=speculative)
        if result.finish_reason == "stop":
            value = _check(result, SCHEMA)
            assert value["color"] in ("red", "green", "blue") and 0 <= value["n"] <= 999 and len(value["name"]) <= 8
        else:  # cut by max_new_tokens: still a prefix the grammar allowed, so no stray token
            assert result.text.startswith('{"color": "')


def test_eight_at_once_equal_one_at_a_time(engine):
    """8 requests in flight, grammars mixed (schema, tool call, any object, none): each equals its
    own non-speculative output."""
    from trtspec.runtime.grammar.compile import GrammarSpec

    grammars = [GrammarSpec.json_schema(SCHEMA), GrammarSpec.json_schema(TOOL_SCHEMA), GrammarSpec.json_object(), None]
    jobs = [(PROMPTS[i % 4], grammars[i % 4] if i < 4 else grammars[(i + 1) % 4]) for i in range(8)]
    expected = [engine.generate(p, max_new_tokens=48, grammar=g, speculative=False).token_ids for p, g in jobs]
    results: list = [None] * len(jobs)
    barrier = threading.Barrier(len(jobs))

    def run(index: int) -> None:
        prompt, grammar = jobs[index]
        barrier.wait()
        results[index] = engine.generate(prompt, max_new_tokens=48, grammar=grammar)

    threads = [threading.Thread(target=run, args=(i,)) for i in range(len(jobs))]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=600)
    assert [r.token_ids for r in results] == expected, engine.mode
    for (_, grammar), result in zip(jobs, results, strict=True):
        if grammar is not None and result.finish_reason == "stop":
            json.loads(result.text)


def test_grammar_cuts_drafts_and_still_accepts_some(tiny_llama):
    """n-gram drafts copied from a prompt full of JSON-breaking text are cut where the grammar
    refuses them; what the grammar allows is still verified and accepted."""
    from trtspec.runtime import Engine
    from trtspec.runtime.grammar.compile import GrammarSpec

    prompt = 'Answer {"color": "red", "ok": true, "n": 12, "name": "fox"} or the quick brown fox'
    with Engine.from_checkpoints(tiny_llama, mode="ngram", max_draft_len=4, ngram_min=1, ngram_max=3,
                                 draft_len_schedule=[[1, 4]]) as engine:
        seen = []
        original = engine.scheduler.submit

        def keep(request):
            sequence = original(request)
            seen.append(sequence)
            return sequence

        engine.scheduler.submit = keep
        result = engine.generate(prompt, max_new_tokens=64, grammar=GrammarSpec.json_schema(SCHEMA), chat=False)
        plain = engine.generate(prompt, max_new_tokens=64, grammar=GrammarSpec.json_schema(SCHEMA), chat=False,
                                speculative=False)
    assert result.token_ids == plain.token_ids
    assert seen[0].grammar.cut_tokens == result.stats.num_grammar_cut_tokens > 0
    assert result.stats.num_accepted_tokens > 0


def test_a_schema_that_cannot_compile_is_refused_in_one_line(ngram_engine):
    from trtspec.runtime.grammar.compile import GrammarError, GrammarSpec

    with pytest.raises(GrammarError, match="cannot be compiled") as caught:
        ngram_engine.generate("hi", max_new_tokens=4, grammar=GrammarSpec.json_schema({"type": "objectx"}))
    assert "\n" not in str(caught.value)
    with pytest.raises(GrammarError, match="Lookbehind"):
        ngram_engine.generate("hi", max_new_tokens=4,
                              grammar=GrammarSpec.json_schema({"type": "string", "pattern": "(?<=a)b"}))
    # the engine keeps serving
    assert ngram_engine.generate("hi", max_new_tokens=4).finish_reason in ("stop", "length")
