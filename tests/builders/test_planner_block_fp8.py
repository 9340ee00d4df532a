"""The memory planner counts a checkpoint stored in block FP8 (DeepSeek-V3/R1 as released) at its
stored size: 1 byte a Linear weight plus one float32 scale a 128 x 128 block, whether or not the
spec asks trtspec to quantize (quantization.fp8), as TensorRT-LLM loads such a checkpoint as stored.

configs/deepseek-r1.json is the public shape of deepseek-ai/DeepSeek-R1; its released config.json
also carries the quantization_config below [deepseek-ai/DeepSeek-V3 README_WEIGHTS.md, "FP8
Configuration"].
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from trtspec.builders.planner import ModelShape, PlanSettings, plan_memory

CONFIG = json.loads((Path(__file__).parent / "configs" / "deepseek-r1.json").read_text())
RELEASED = {**CONFIG, "quantization_config": {"activation_scheme": "dynamic", "fmt": "e4m3", "quant_method": "fp8",
                                              "weight_block_size": [128, 128]}}
SETTINGS = dict(tp_size=8, max_batch_size=8, max_seq_len=8192, max_draft_len=1)


def test_a_block_fp8_checkpoint_counts_one_byte_a_weight_and_its_scales_without_quantization_fp8():
    stored = ModelShape.from_config(RELEASED, extra_layers=1)
    bf16 = ModelShape.from_config(CONFIG, extra_layers=1)
    assert stored.fp8_block == (128, 128) and bf16.fp8_block is None
    as_stored = plan_memory(stored, PlanSettings(gpu="h200", **SETTINGS))  # quantization.fp8 not asked
    asked = plan_memory(bf16, PlanSettings(gpu="h200", fp8_weights=True, **SETTINGS))
    unquantized = plan_memory(bf16, PlanSettings(gpu="h200", **SETTINGS))
    # the scales: one float32 a 128 x 128 block of the ~680B Linear weights, about 166 MB, per GPU an eighth
    linear = stored.layer_linear_params
    scales = as_stored.components[0].weight_bytes - asked.components[0].weight_bytes
    assert scales == pytest.approx(linear / 128**2 * 4 / 8, rel=1e-3)
    assert as_stored.fits, as_stored.problem  # as NVIDIA's and SGLang's one-node 8 x H200 deployments
    assert not unquantized.fits and not plan_memory(stored, PlanSettings(gpu="h100", **SETTINGS)).fits
    # what the Hugging Face repository holds: 163 shards, "685B" parameters, about 688.6 GB of tensors
    # (simpx/model-inspect's table of deepseek-ai/DeepSeek-V3: 688,574,839,360 bytes); the planner
    # counts the MTP module's copies of the embedding and head once (2 x 1.85 GB in 16 bits fewer)
    assert as_stored.components[0].weight_bytes * 8 == pytest.approx(688.57e9 - 2 * 1.853e9, rel=0.005)


def test_another_quant_method_is_not_taken_for_block_fp8():
    assert ModelShape.from_config({**CONFIG, "quantization_config": {"quant_method": "compressed-tensors"}}
                                  ).fp8_block is None
