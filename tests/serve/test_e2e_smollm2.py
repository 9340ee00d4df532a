"""SmolLM2-135M-Instruct served through Triton by the cpu engine: the real model answers."""

from __future__ import annotations

import pytest

pytestmark = [pytest.mark.e2e, pytest.mark.slow]

PROMPT = "What is the capital of France?"


def test_smollm2_answer_through_triton_equals_in_process(smollm2, tmp_path, spec_factory):
    from trtspec import repository
    from trtspec.artifacts import Layout
    from trtspec.builders import build
    from trtspec.client.triton import TritonLLMClient
    from trtspec.runtime import load_engine
    from trtspec.serve import server

    spec = spec_factory(tmp_path, smollm2, name="smollm2")
    engine_dir = build(spec).engine_dir
    layout = Layout.from_spec(spec)
    repository.render(engine_dir, spec, layout.repository)
    server.start_local(spec, layout.repository, layout)
    try:
        client = TritonLLMClient(f"127.0.0.1:{spec.serve.grpc_port}",
                                 metrics_url=f"http://127.0.0.1:{spec.serve.metrics_port}/metrics")
        # trtspec's clients apply the chat template client-side (text_input is read as sent)
        from trtspec.client.prompting import renderer

        turn = renderer(spec)(PROMPT)
        served = client.generate(turn, max_tokens=16)
        baseline = client.generate(turn, max_tokens=16, speculative=False)
        client.close()
    finally:
        server.stop_local(layout)
    expected = load_engine(engine_dir).generate(PROMPT, max_new_tokens=16, temperature=0.0).text  # templated
    assert "Paris" in served["text"]
    assert served["text"] == baseline["text"] == expected
    assert served["num_drafts"] > 0
