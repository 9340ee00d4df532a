"""The memory planner against published shapes and deployments.

The config.json files in configs/ are hand-written copies of the public shapes of
meta-llama/Llama-3.1-8B, Llama-3.1-70B and Llama-3.2-1B (hidden size, layers, heads, KV heads,
head size, vocabulary, tied embeddings). Each expected figure below names its source.
"""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path

import pytest

from trtspec.builders.planner import ModelShape, PlanError, PlanSettings, plan_memory, require_fit

CONFIGS = Path(__file__).parent / "configs"


def shape(name: str) -> ModelShape:
    return ModelShape.from_config(json.loads((CONFIGS / f"{name}.json").read_text()))


LLAMA_8B, LLAMA_70B, LLAMA_1B = shape("llama-3.1-8b"), shape("llama-3.1-70b"), shape("llama-3.2-1b")
LLAMA_405B = shape("llama-3.1-405b")


@pytest.mark.parametrize("model, published", [
    # Hugging Face model pages (safetensors parameter counts): Llama-3.1-8B "8.03B params",
    # Llama-3.1-70B "70.6B params", Llama-3.2-1B "1.24B params", Llama-3.1-405B "406B params".
    (LLAMA_8B, 8.03e9), (LLAMA_70B, 70.6e9), (LLAMA_1B, 1.24e9), (LLAMA_405B, 406e9),
])
def test_parameter_counts_match_the_published_ones(model, published):
    assert model.params == pytest.approx(published, rel=0.005)


def test_kv_cache_of_70b_matches_the_published_per_token_formula():
    # spheron.network/blog/kv-cache-optimization-guide (and gpuaas.com/blog/what-is-vram-llm-workloads,
    # quoting NVIDIA): Llama 3.1 70B in BF16 needs ~1.3 GB of KV cache for one 4,096-token
    # sequence and ~42.9 GB for one 131,072-token sequence (2 x 80 layers x 8 KV heads x 128 x 2 bytes).
    plan = plan_memory(LLAMA_70B, PlanSettings(gpu="h200", max_batch_size=1, max_seq_len=4096))
    per_token = plan.components[0].kv_bytes_per_token
    assert per_token * 4096 / 1e9 == pytest.approx(1.3, abs=0.05)
    assert per_token * 131072 / 1e9 == pytest.approx(42.9, abs=0.1)
    # FP8 KV halves it; tensor parallelism splits the 8 KV heads.
    fp8 = plan_memory(LLAMA_70B, PlanSettings(gpu="h200", fp8_kv_cache=True, fp8_weights=True))
    assert fp8.components[0].kv_bytes_per_token * 2 == per_token
    tp2 = plan_memory(LLAMA_70B, PlanSettings(gpu="h100", tp_size=2))
    assert tp2.components[0].kv_bytes_per_token * 2 == per_token


def test_70b_bf16_does_not_fit_one_h100_and_the_planner_suggests_tp2():
    # kubernetes.recipes/recipes/ai/llama-70b-model-size-gpu-requirements: 70B in FP16/BF16 is
    # ~140 GB of weights; "For H100 (80GB), use 2x GPUs with tensor parallelism".
    plan = plan_memory(LLAMA_70B, PlanSettings(gpu="h100"))
    assert plan.components[0].weight_bytes / 1e9 == pytest.approx(141.1, abs=0.5)
    assert not plan.fits and "exceed" in plan.problem
    assert plan.suggestion.startswith("set build.tp_size: 2")
    assert plan_memory(LLAMA_70B, PlanSettings(gpu="h100", tp_size=2)).fits
    with pytest.raises(PlanError, match=r"does not fit on 1 x NVIDIA H100.*build.tp_size: 2"):
        require_fit(plan)


def test_70b_bf16_on_one_h200_leaves_almost_no_room_for_kv():
    # gpuaas.com/blog/what-is-vram-llm-workloads: "A 70B model at BF16 needs ~140 GB VRAM for
    # weights alone, which fills one H200 SXM (141 GB HBM3e) with almost no headroom to spare".
    plan = plan_memory(LLAMA_70B, PlanSettings(gpu="h200", max_batch_size=32, max_seq_len=2048))
    assert not plan.fits
    assert 1 <= plan.full_length_sequences < 16
    assert plan.suggestion == f"set build.max_batch_size: {plan.full_length_sequences} (the largest that fits)"
    assert plan_memory(LLAMA_70B, replace(plan.settings, max_batch_size=plan.full_length_sequences)).fits


def test_70b_fp8_fits_one_h100_at_small_batch_and_refuses_a_large_one():
    # kubernetes.recipes (as above): "FP8 halves to ~70GB (1x H100)".
    small = plan_memory(LLAMA_70B, PlanSettings(gpu="h100", fp8_weights=True, max_batch_size=1, max_seq_len=4096))
    assert small.fits
    assert 70e9 < small.weights_bytes < 75e9   # FP8 layers + 16-bit embedding and lm_head
    big = plan_memory(LLAMA_70B, PlanSettings(gpu="h100", fp8_weights=True, max_batch_size=64, max_seq_len=8192))
    assert not big.fits and "KV cache for 64 full-length sequences" in big.problem
    assert f"max_batch_size: {big.full_length_sequences}" in big.suggestion


def test_70b_fp8_with_a_1b_draft_fits_one_h200():
    # NVIDIA/TensorRT-LLM examples/draft_target_model/README.md (reference §1.5): a Llama 3.2 1B
    # draft with a Llama 3.1 70B target ("2.x throughput in BS1, 1.x throughput in BS16"), built
    # with max_seq_len 4800 and max_draft_len 10; and the NVIDIA blog "Boost Llama 3.3 70B
    # Inference Throughput 3x with NVIDIA TensorRT-LLM Speculative Decoding" (70B target + 1B
    # draft, FP8, measured on H200).
    settings = PlanSettings(gpu="h200", fp8_weights=True, max_batch_size=16, max_seq_len=4800, max_draft_len=10)
    plan = plan_memory(LLAMA_70B, settings, LLAMA_1B)
    assert plan.fits, plan.problem
    assert [c.role for c in plan.components] == ["target", "draft"]
    draft = plan.components[1]
    assert draft.kv_bytes_per_token == 2 * 16 * 8 * 64 * 2  # the draft's own paged KV cache
    assert plan.blocks_per_sequence == -(-(4800 + 10) // 32)  # + max_draft_len, as trtllm-build adds
    assert plan.full_length_sequences >= 16


def test_8b_with_an_eagle3_head_on_h100_counts_the_head():
    head = ModelShape.eagle3_head(LLAMA_8B, {"num_hidden_layers": 1, "draft_vocab_size": 32000})
    # fc (3h x h) + one layer over a 2h input + a 32k-token lm_head; no embedding of its own.
    assert head.embedding_params == 0 and head.lm_head_params == 32000 * 4096
    assert 0.40e9 < head.params < 0.45e9
    plan = plan_memory(LLAMA_8B, PlanSettings(gpu="h100", max_draft_len=4), head, "EAGLE-3 head")
    assert plan.fits and plan.components[1].kv_bytes_per_token == 2 * 1 * 8 * 128 * 2


def test_reported_rows_name_every_part():
    plan = plan_memory(LLAMA_8B, PlanSettings(gpu="h100"), LLAMA_1B)
    items = [item for item, _ in plan.rows()]
    for needle in ("target weights", "draft weights", "activations", "runtime reserve", "target KV cache",
                   "draft KV cache", "KV budget", "KV budget left after a full batch", "full-length sequences",
                   "verdict"):
        assert any(needle in item for item in items), needle
    # binary figures say so, and the GPU is named as nvidia-smi names it
    values = dict(plan.rows())
    assert values["GPU"].startswith("1 x NVIDIA H100 80GB HBM3, 79.65 GiB each")
    assert all(v.endswith(" GiB") for k, v in values.items() if k not in ("GPU", "verdict", "full-length sequences that fit"))
    assert dict(plan_memory(LLAMA_1B, PlanSettings(gpu="h200")).rows())["GPU"].startswith("1 x NVIDIA H200, 140.40 GiB")


def test_headroom_is_what_the_kv_budget_leaves_after_a_full_batch():
    # The old figure was free memory minus KV required: 82.6 "GB" of headroom on an 80 GB H100.
    for plan in (plan_memory(LLAMA_8B, PlanSettings(gpu="h100"), LLAMA_1B),
                 plan_memory(LLAMA_70B, PlanSettings(gpu="h100", fp8_weights=True, max_batch_size=64,
                                                     max_seq_len=8192))):
        assert plan.headroom_bytes == plan.kv_budget_bytes - plan.kv_required_bytes
        assert plan.headroom_bytes < plan.kv_budget_bytes < plan.usable_bytes
        assert (plan.headroom_bytes >= 0) == plan.fits


def _within(value: float, published: float, rel: float = 0.10) -> bool:
    return abs(value - published) <= rel * published


def test_published_deployment_70b_fp8_on_one_h200():
    # kubernetes.recipes/recipes/ai/llama-70b-model-size-gpu-requirements: "FP8 halves to ~70GB";
    # canitrun.dev/models/llama-3.1-70b: 2.68 GB of (16-bit) KV cache for one 8k-token sequence.
    plan = plan_memory(LLAMA_70B, PlanSettings(gpu="h200", fp8_weights=True, max_batch_size=16, max_seq_len=8192))
    assert plan.fits, plan.problem
    assert _within(plan.weights_bytes / 1e9, 70.0)
    assert _within(plan.components[0].kv_bytes_per_token * 8192 / 1e9, 2.68)


def test_published_deployment_70b_with_a_1b_draft():
    # The draft of NVIDIA/TensorRT-LLM examples/draft_target_model/README.md (Llama 3.2 1B for a
    # Llama 3.1 70B target, max_seq_len 4800, max_draft_len 10): "1.24B params" (Hugging Face), so
    # 2.48 GB in BF16; the 70B target FP8 as above. Both fit one H200 at batch 16.
    bf16_draft = plan_memory(LLAMA_70B, PlanSettings(gpu="h200", max_batch_size=1, max_seq_len=4800), LLAMA_1B)
    assert _within(bf16_draft.components[1].weight_bytes / 1e9, 2.48)
    plan = plan_memory(LLAMA_70B, PlanSettings(gpu="h200", fp8_weights=True, max_batch_size=16, max_seq_len=4800,
                                               max_draft_len=10), LLAMA_1B)
    assert plan.fits and _within(plan.components[0].weight_bytes / 1e9, 70.0)


def test_published_deployment_405b_fp8_on_8_h100():
    # kubernetes.recipes (as above): Llama 3.1 405B "FP8 (GB) 405", i.e. 50.6 GB on each of 8 GPUs;
    # huggingface.co/nvidia/Llama-3.1-405B-Instruct-FP8: only the linear operators of the transformer
    # blocks are FP8 (the planner keeps embedding and lm_head in 16 bits, as that checkpoint does).
    plan = plan_memory(LLAMA_405B, PlanSettings(gpu="h100", tp_size=8, fp8_weights=True, fp8_kv_cache=True,
                                                max_batch_size=16, max_seq_len=8192))
    assert plan.fits, plan.problem
    assert _within(plan.weights_bytes / 1e9, 405 / 8)
    # 126 layers x 8 KV heads x 128 x (K, V) in FP8, one KV head per GPU at tp 8
    assert plan.components[0].kv_bytes_per_token == 2 * 126 * 1 * 128 * 1
    assert not plan_memory(LLAMA_405B, PlanSettings(gpu="h100", tp_size=4, fp8_weights=True)).fits


def test_tp_size_must_divide_the_attention_heads():
    with pytest.raises(PlanError, match="tp_size 3 does not divide the target's 64 attention heads"):
        plan_memory(LLAMA_70B, PlanSettings(tp_size=3))


def test_pipeline_parallel_splits_layers_and_their_kv_cache():
    one = plan_memory(LLAMA_70B, PlanSettings(gpu="h100", fp8_weights=True))
    two = plan_memory(LLAMA_70B, PlanSettings(gpu="h100", fp8_weights=True, pp_size=2))
    assert two.components[0].kv_bytes_per_token * 2 == one.components[0].kv_bytes_per_token
    # decoder layers halve; the embedding and lm_head sit on different stages
    vocab_bytes = 2 * LLAMA_70B.vocab_size * LLAMA_70B.hidden_size
    assert two.components[0].weight_bytes == pytest.approx((one.components[0].weight_bytes - vocab_bytes) / 2
                                                           + vocab_bytes / 2, rel=1e-3)
