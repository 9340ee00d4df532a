"""The memory planner on mixture-of-experts checkpoints with MTP modules (issue 62, item 4).

configs/deepseek-r1.json and configs/glm-4.5.json are hand-written copies of the public shapes of
deepseek-ai/DeepSeek-R1 (= DeepSeek-V3's) and zai-org/GLM-4.5 (their config.json fields the
planner reads). Each expected figure names its source.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from trtspec.builders.planner import ModelShape, PlanSettings, plan_memory

CONFIGS = Path(__file__).parent / "configs"


def config(name: str) -> dict:
    return json.loads((CONFIGS / f"{name}.json").read_text())


@pytest.mark.parametrize("name, published", [
    # DeepSeek-V3 technical report (arXiv 2412.19437), abstract: "671B total parameters"; GLM-4.5
    # report (arXiv 2508.06471), abstract: "355B total parameters" -- both without the MTP module.
    ("deepseek-r1", 671e9), ("glm-4.5", 355e9),
])
def test_parameter_counts_match_the_published_ones(name, published):
    assert ModelShape.from_config(config(name)).params == pytest.approx(published, rel=0.015)


def test_the_mtp_module_adds_one_moe_layer_and_its_projection():
    plain = ModelShape.from_config(config("deepseek-r1"))
    with_mtp = ModelShape.from_config(config("deepseek-r1"), extra_layers=1)
    # the Hugging Face checkpoint's "685B" is 671B of main model and 14B of MTP module (model card);
    # that module's copies of the embedding and output head (2 x 129280 x 7168 = 1.85B) are the
    # target's own once loaded, so the module adds about 12.1B on the GPU
    assert (with_mtp.params - plain.params) / 1e9 == pytest.approx(14 - 1.85, abs=1.0)
    assert with_mtp.moe_layers == plain.moe_layers + 1


def test_mla_caches_one_latent_per_token_and_layer_on_every_rank():
    shape = ModelShape.from_config(config("deepseek-r1"))
    tp1 = plan_memory(shape, PlanSettings(gpu="h200", max_batch_size=1, max_seq_len=4096, fp8_weights=True))
    tp8 = plan_memory(shape, PlanSettings(gpu="h200", tp_size=8, max_batch_size=1, max_seq_len=4096,
                                          fp8_weights=True))
    # kv_lora_rank 512 + qk_rope_head_dim 64 elements, 61 layers, bf16: 70,272 bytes a token (DeepSeek-V2
    # report's "KV cache of 4.5 groups of head dim" compression, here as the latent itself)
    assert tp1.components[0].kv_bytes_per_token == 61 * (512 + 64) * 2
    assert tp8.components[0].kv_bytes_per_token == tp1.components[0].kv_bytes_per_token


def test_fp8_deepseek_r1_fits_8_h200_and_not_8_h100():
    """NVIDIA's and SGLang's DeepSeek-R1 FP8 deployments run it on one node of 8 x H200; 8 x H100
    (80 GB) need two nodes: 671 GB of FP8 weights are 84 GB a GPU at tensor parallel 8."""
    shape = ModelShape.from_config(config("deepseek-r1"), extra_layers=1)
    settings = dict(tp_size=8, max_batch_size=8, max_seq_len=8192, max_draft_len=1, fp8_weights=True)
    h200 = plan_memory(shape, PlanSettings(gpu="h200", **settings))
    h100 = plan_memory(shape, PlanSettings(gpu="h100", **settings))
    assert h200.fits, h200.problem
    assert not h100.fits
    assert h200.components[0].weight_bytes / 2**30 == pytest.approx(685e9 / 8 / 2**30, rel=0.05)


def test_medusa_heads_are_counted_in_the_target_engine(tmp_path):
    """TensorRT-LLM's Medusa engine holds the heads beside the target: per head its ResBlocks
    (hidden x hidden + bias) and its own lm_head (vocab x hidden). Llama-3.1-8B with 4 one-layer
    heads: 4 x (4096^2 + 4096 + 128256 x 4096) = 2.17B parameters more."""
    import yaml

    from trtspec.builders import plan_inputs
    from trtspec.spec.loading import load_spec

    (tmp_path / "model").mkdir()
    (tmp_path / "model" / "config.json").write_text((CONFIGS / "llama-3.1-8b.json").read_text())

    def plan(mode: str, **medusa):
        spec = {"model": {"source": str(tmp_path / "model"), "name": "m"},
                "speculative": {"mode": mode, **({"medusa": medusa} if medusa else {})},
                "build": {"backend": "trtllm-engine", "gpu": "h100"}}
        (tmp_path / "trtspec.yaml").write_text(yaml.safe_dump(spec))
        return plan_inputs(load_spec(str(tmp_path / "trtspec.yaml")))

    plain = plan("none").components[0].params
    assert plan("medusa").components[0].params - plain == 4 * (4096 * 4096 + 4096 + 128256 * 4096)
    assert plan("medusa", num_heads=2, num_layers=2).components[0].params - plain == \
        2 * (2 * (4096 * 4096 + 4096) + 128256 * 4096)
