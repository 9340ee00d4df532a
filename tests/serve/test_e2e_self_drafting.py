"""lookahead and layerskip served by a real tritonserver: greedy text through Triton, alone and
from concurrent clients, equals the bundle's plain (non-speculative) greedy text in process."""

from __future__ import annotations

import threading

import pytest

pytestmark = [pytest.mark.e2e, pytest.mark.slow]

PROMPTS = ["the quick brown fox jumps over the lazy dog. the quick brown fox",
           "1 2 3 4 5 6 7 8 9 10", "def add(a, b):\n    return a + b\n", "Paris is the capital of"]
MAX_TOKENS = 24


@pytest.mark.parametrize("speculative", [{"mode": "lookahead", "lookahead": {"window": 4, "ngram": 3}},
                                         {"mode": "layerskip", "layerskip": {"exit_layer": 2}}],
                         ids=["lookahead", "layerskip"])
def test_served_greedy_equals_the_plain_baseline(tmp_path, tiny_llama, speculative):
    from tests.serve.conftest import serving_tiny
    from trtspec.runtime import load_engine

    with serving_tiny(tmp_path, tiny_llama, speculative_fields=speculative) as (_, client, engine_dir):
        with load_engine(engine_dir) as engine:
            assert engine.mode == speculative["mode"]
            baseline = {p: engine.generate(p, max_new_tokens=MAX_TOKENS, speculative=False, chat=False).text
                        for p in PROMPTS}
        for stream in (True, False):
            answers = [client.generate(p, max_tokens=MAX_TOKENS, stream=stream) for p in PROMPTS]
            assert [a["text"] for a in answers] == [baseline[p] for p in PROMPTS]
        assert sum(a["total_draft_tokens"] for a in answers) > 0
        # four clients at once: batched in flight, each its own baseline answer
        texts = [None] * len(PROMPTS)

        def ask(i):
            texts[i] = client.generate(PROMPTS[i], max_tokens=MAX_TOKENS)["text"]

        threads = [threading.Thread(target=ask, args=(i,)) for i in range(len(PROMPTS))]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
        assert texts == [baseline[p] for p in PROMPTS]
