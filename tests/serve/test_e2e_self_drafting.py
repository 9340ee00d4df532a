"""lookahead, layerskip, mtp (a tiny DeepSeek-V3 with its MTP module), medusa (tiny heads in
FasterDecoding's layout, imported by convert) and suffix (tree drafts from the request's and the
earlier responses' suffix tries) served by a real
tritonserver: greedy text through Triton, alone and from concurrent clients, equals the bundle's
plain (non-speculative) greedy text in process."""

from __future__ import annotations

import threading

import pytest

pytestmark = [pytest.mark.e2e, pytest.mark.slow]

PROMPTS = ["the quick brown fox jumps over the lazy dog. the quick brown fox",
           "1 2 3 4 5 6 7 8 9 10", "def add(a, b):\n    return a + b\n", "Paris is the capital of"]
MAX_TOKENS = 24


@pytest.mark.parametrize("speculative", [{"mode": "lookahead", "lookahead": {"window": 4, "ngram": 3}},
                                         {"mode": "layerskip", "layerskip": {"exit_layer": 2}},
                                         {"mode": "mtp"}, {"mode": "medusa"},
                                         {"mode": "suffix", "suffix": {"tree": True, "factor": 2.0}}],
                         ids=["lookahead", "layerskip", "mtp", "medusa", "suffix"])
def test_served_greedy_equals_the_plain_baseline(tmp_path, tiny_llama, speculative):
    from tests.serve.conftest import serving_tiny
    from trtspec.runtime import load_engine
    from trtspec.testing.tiny import make_tiny_causal_lm

    target = tiny_llama
    if speculative["mode"] == "mtp":  # MLA + MoE, the MTP module appended as DeepSeek lays it out
        target = make_tiny_causal_lm(tmp_path / "deepseek", "deepseek_v3", mtp=True)
    if speculative["mode"] == "medusa":  # heads trained on the target's answers, imported as convert does
        from tests.serve.conftest import make_spec
        from trtspec.convert.pipeline import run_convert
        from trtspec.testing.tiny_medusa import make_tiny_medusa

        heads = make_tiny_medusa(target, tmp_path / "heads", num_heads=3)
        speculative = {"mode": "medusa", "medusa": {"heads": str(heads)}}
        run_convert(make_spec(tmp_path, target, speculative=speculative))
    with serving_tiny(tmp_path, target, speculative_fields=speculative) as (_, client, engine_dir):
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
