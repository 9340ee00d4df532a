"""Acceptance with and without a grammar: SmolLM2, n-gram speculation, prompts that ask for JSON.

Per prompt, four runs of --max-tokens greedy tokens on one engine (mode ngram): speculative and
plain, each without a grammar and with the prompt's JSON schema (trtspec.runtime.grammar). Reported:
acceptance rate and mean acceptance length with and without the grammar, the draft tokens the
grammar cut before verification, tokens/s of each run, and whether the constrained speculative
answer equals the constrained plain one token for token (it must) and parses as JSON.

    .venv/bin/python -m benchmarks grammar --max-tokens 96 --json
"""

from __future__ import annotations

import argparse
import json
import time

from benchmarks.common import smollm2

PERSON = {"type": "object", "additionalProperties": False, "required": ["name", "age", "city", "hobbies"],
          "properties": {"name": {"type": "string", "maxLength": 40}, "age": {"type": "integer"},
                         "city": {"type": "string", "maxLength": 40},
                         "hobbies": {"type": "array", "items": {"type": "string", "maxLength": 30}, "maxItems": 3}}}
WEATHER_CALL = {"type": "object", "additionalProperties": False, "required": ["name", "arguments"],
                "properties": {"name": {"const": "get_weather"},
                               "arguments": {"type": "object", "additionalProperties": False,
                                             "required": ["city", "unit"],
                                             "properties": {"city": {"type": "string", "maxLength": 40},
                                                            "unit": {"enum": ["celsius", "fahrenheit"]}}}}}
BOOK = {"type": "object", "additionalProperties": False, "required": ["title", "author", "year", "genres"],
        "properties": {"title": {"type": "string", "maxLength": 60}, "author": {"type": "string", "maxLength": 40},
                       "year": {"type": "integer"},
                       "genres": {"type": "array", "items": {"type": "string", "maxLength": 20}, "maxItems": 3}}}
CASES = [
    ("Describe a person who lives in Paris as JSON with the keys name, age, city and hobbies.", PERSON),
    ("Alice is 31, lives in Oslo and likes skiing and chess. Write her as JSON with name, age, city, hobbies.",
     PERSON),
    ("Call the weather tool for Berlin in celsius. Answer with JSON: {\"name\": \"get_weather\", "
     "\"arguments\": {\"city\": ..., \"unit\": ...}}", WEATHER_CALL),
    ("What is the weather in Tokyo? Use get_weather with the city and unit fahrenheit, as a JSON tool call.",
     WEATHER_CALL),
    ("Give the book 1984 by George Orwell (1949) as JSON with title, author, year and genres.", BOOK),
    ("Write one famous novel as JSON: title, author, year, genres.", BOOK),
]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--max-tokens", type=int, default=96)
    parser.add_argument("--max-draft-len", type=int, default=4)
    parser.add_argument("--json", action="store_true", help="one JSON object on the last line")
    args = parser.parse_args()
    from trtspec.runtime import Engine
    from trtspec.runtime.grammar.compile import GrammarSpec
    from trtspec.runtime.loop.stats import GenerationStats

    runs = {(g, s): {"stats": GenerationStats(), "tokens": 0, "seconds": 0.0}
            for g in (False, True) for s in (True, False)}
    equal, valid = 0, 0
    with Engine.from_checkpoints(smollm2(), mode="ngram", max_draft_len=args.max_draft_len) as engine:
        engine.generate(CASES[0][0], max_new_tokens=8)  # warm-up
        for prompt, schema in CASES:
            answers = {}
            for (constrained, speculative), run in runs.items():
                start = time.perf_counter()
                result = engine.generate(prompt, max_new_tokens=args.max_tokens, speculative=speculative,
                                         grammar=GrammarSpec.json_schema(schema) if constrained else None)
                run["seconds"] += time.perf_counter() - start
                run["tokens"] += len(result.token_ids)
                run["stats"].merge(result.stats)
                answers[constrained, speculative] = result
            equal += answers[True, True].token_ids == answers[True, False].token_ids
            try:
                json.loads(answers[True, True].text)
                valid += 1
            except ValueError:
                pass
    result = {"prompts": len(CASES), "max_tokens": args.max_tokens, "max_draft_len": args.max_draft_len,
              "constrained_speculative_equals_plain": equal, "constrained_answers_parse": valid}
    for (constrained, speculative), run in runs.items():
        stats = run["stats"]
        key = f"{'grammar' if constrained else 'free'}_{'ngram' if speculative else 'plain'}"
        result[key] = {"tokens": run["tokens"], "tokens_per_s": run["tokens"] / run["seconds"],
                       "drafts": stats.num_drafts, "acceptance_rate": stats.acceptance_rate,
                       "mean_acceptance_length": stats.mean_acceptance_length,
                       "grammar_cut_draft_tokens": stats.num_grammar_cut_tokens}
    for key in ("free_ngram", "grammar_ngram"):
        row = result[key]
        base = result[key.replace("ngram", "plain")]
        print(f"{key:14} acceptance rate {row['acceptance_rate']:.2f}, mean acceptance length "
              f"{row['mean_acceptance_length']:.2f} over {row['drafts']} drafts, {row['grammar_cut_draft_tokens']} "
              f"draft tokens cut by the grammar; {row['tokens_per_s']:.1f} tokens/s, "
              f"{row['tokens_per_s'] / base['tokens_per_s']:.2f}x plain ({base['tokens_per_s']:.1f})")
    print(f"constrained speculative == constrained plain on {equal} of {len(CASES)} prompts; "
          f"{valid} of {len(CASES)} constrained answers parse as JSON")
    if args.json:
        print(json.dumps(result))


if __name__ == "__main__":
    main()
