"""model.dtype bfloat16 on the cpu engine: every linear layer on the bfloat16 row kernel
(trtspec.runtime.kernels.rowdot), the rest in float32. What float32 promises within itself holds within
bfloat16: speculative greedy equals plain greedy, requests together equal requests alone, and a
bundle's runtime dtype reaches the kernels. (The kernel itself: test_rt_rowdot.py; stacked
projections on it: test_rt_fused_linears.py; a forward alone and batched: test_rt_batch_invariance.py.) Other dtypes, and CPUs without AVX512_BF16, get a
one-line error naming the fix."""

from __future__ import annotations

import json
import shutil

import pytest
import torch

from tests.runtime.conftest import TINY_PROMPTS
from trtspec.errors import IncompatibleArtifactError
from trtspec.runtime.kernels import rowdot

needs_bfloat16 = pytest.mark.skipif(rowdot.bfloat16_unavailable() is not None,
                                    reason=f"bfloat16 row kernel unavailable: {rowdot.bfloat16_unavailable()}")


@pytest.fixture(scope="module")
def bf16_engine(tiny_llama):
    from trtspec.runtime import Engine

    if rowdot.bfloat16_unavailable() is not None:
        pytest.skip(rowdot.bfloat16_unavailable())
    engine = Engine.from_checkpoints(tiny_llama, mode="ngram", max_draft_len=4, ngram_min=1, ngram_max=3,
                                     dtype="bfloat16")
    yield engine
    engine.close()


def _linears(model) -> list:
    return [m for m in model.modules() if type(m).__name__ == "PackedLinear"]


@needs_bfloat16
def test_every_linear_layer_runs_on_the_bfloat16_kernel(bf16_engine):
    linears = _linears(bf16_engine.target)
    assert linears and {layer.kernel for layer in linears} == {"rowdot-bf16"}
    assert all(layer.rowdot_weight.data.dtype == torch.bfloat16 for layer in linears)
    assert all(p.dtype == torch.float32 for p in bf16_engine.target.parameters())  # norms, embeddings: float32


@needs_bfloat16
@pytest.mark.parametrize("prompt", TINY_PROMPTS)
def test_bfloat16_speculative_greedy_equals_its_plain_greedy(bf16_engine, prompt):
    plain = bf16_engine.generate(prompt, max_new_tokens=40, speculative=False)
    spec = bf16_engine.generate(prompt, max_new_tokens=40)
    assert spec.token_ids == plain.token_ids
    assert spec.finish_reason == plain.finish_reason


@needs_bfloat16
@pytest.mark.parametrize("mode", ["draft-target", "eagle3"])
def test_a_drafter_runs_on_the_bfloat16_kernel_too_and_stays_lossless(mode, tiny_llama, tiny_llama_draft,
                                                                        modelopt_eagle3):
    """The draft model's (or EAGLE-3 head's) linear layers in the target's dtype, and greedy with
    its drafts equal to greedy without."""
    from trtspec.runtime import Engine

    draft_dir = tiny_llama_draft if mode == "draft-target" else modelopt_eagle3[1]
    with Engine.from_checkpoints(tiny_llama, mode=mode, draft_dir=draft_dir, max_draft_len=4,
                                 dtype="bfloat16") as engine:
        drafter_model = engine.drafter.model if mode == "draft-target" else engine.drafter.head
        assert {layer.kernel for layer in _linears(drafter_model)} == {"rowdot-bf16"}
        for prompt in TINY_PROMPTS[:2]:
            plain = engine.generate(prompt, max_new_tokens=24, speculative=False)
            spec = engine.generate(prompt, max_new_tokens=24)
            assert spec.token_ids == plain.token_ids
            assert spec.stats.num_drafts > 0


@needs_bfloat16
def test_bfloat16_requests_together_equal_requests_alone(bf16_engine):
    from concurrent.futures import ThreadPoolExecutor

    alone = [bf16_engine.generate(p, max_new_tokens=24).token_ids for p in TINY_PROMPTS]
    with ThreadPoolExecutor(4) as pool:
        together = list(pool.map(lambda p: bf16_engine.generate(p, max_new_tokens=24).token_ids, TINY_PROMPTS))
    assert together == alone


@needs_bfloat16
def test_bfloat16_logits_are_float32_logits_within_bfloat16_rounding(bf16_engine, tiny_llama):
    """The same model in float32 gives logits a bfloat16 input rounding away (relative error
    ~2^-8 a product), not equal ones: the setting really changes the arithmetic."""
    from trtspec.runtime import Engine

    ids = torch.tensor([TINY_PROMPTS[3]])
    with Engine.from_checkpoints(tiny_llama, mode="none") as exact, torch.inference_mode():
        low = bf16_engine.target(input_ids=ids).logits
        high = exact.target(input_ids=ids).logits
    assert not torch.equal(low, high)
    torch.testing.assert_close(low, high, rtol=0.05, atol=0.05 * float(high.abs().max()))


@needs_bfloat16
def test_an_engine_bundle_with_runtime_dtype_bfloat16_loads_on_the_bfloat16_kernel(tmp_path, tiny_llama):
    from trtspec.runtime import load_engine

    shutil.copytree(tiny_llama, tmp_path / "target")
    (tmp_path / "engine.json").write_text(json.dumps({
        "format": "trtspec-engine/1", "trtspec_version": "0.1.0", "name": "tiny-bf16", "backend": "cpu",
        "mode": "none", "build_config": {"max_input_len": 64, "max_seq_len": 128},
        "target": {"path": "target", "sha256": "x", "source": "tiny"}, "draft": None,
        "runtime": {"dtype": "bfloat16"}}))
    with load_engine(tmp_path) as engine:
        assert {layer.kernel for layer in _linears(engine.target)} == {"rowdot-bf16"}
        assert len(engine.generate(TINY_PROMPTS[0], max_new_tokens=5).token_ids) == 5


def test_float16_is_refused_with_the_fix(tiny_llama):
    from trtspec.runtime import Engine

    with pytest.raises(IncompatibleArtifactError, match="float16") as caught:
        Engine.from_checkpoints(tiny_llama, mode="none", dtype="float16")
    assert "float32 or bfloat16" in caught.value.fix and "\n" not in caught.value.problem


def test_without_the_bfloat16_kernel_bfloat16_is_refused_with_the_fix(tiny_llama, monkeypatch):
    """A CPU without AVX512_BF16 (here: the kernel reported missing) or prepack turned off: the
    engine does not quietly decode in float32 instead of the dtype the spec asked for."""
    from trtspec.runtime import Engine

    monkeypatch.setattr(rowdot, "bfloat16_unavailable", lambda: "the CPU lacks AVX512_BF16")
    with pytest.raises(IncompatibleArtifactError, match="AVX512_BF16") as caught:
        Engine.from_checkpoints(tiny_llama, mode="none", dtype="bfloat16")
    assert "float32" in caught.value.fix
    monkeypatch.undo()
    with pytest.raises(IncompatibleArtifactError, match="prepack is off"):
        Engine.from_checkpoints(tiny_llama, mode="none", dtype="bfloat16", prepack=False)
