"""Block-FP8 checkpoints as DeepSeek-V3/R1 are released (trtspec.runtime.checkpoints.block_fp8).

A tiny seeded DeepSeek-V3 with its MTP module, stored in that layout (trtspec.testing.tiny.
write_block_fp8), loads with every weight equal, bit for bit, to a straightforward dequantization
written here (a loop over blocks: the block's e4m3 values times its scale), target and MTP module,
at DeepSeek's 128 x 128 blocks (each tiny weight is one short block) and at 16 x 16 (many blocks,
short ones at the bottom and right edges). What the cpu engine cannot load is one line. mode mtp
on such a checkpoint: tests/runtime/drafters/test_rt_mtp.py (its `deepseek_v3-block-fp8` case).
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
import torch

BLOCKS = [(128, 128), (16, 16)]


def reference_dequantize(weight, scale_inv, block):
    """Each block of the float8_e4m3fn weight times its scale: the blocks one by one."""
    out = torch.empty(weight.shape, dtype=torch.float32)
    for i in range(scale_inv.shape[0]):
        for j in range(scale_inv.shape[1]):
            rows, cols = slice(i * block[0], (i + 1) * block[0]), slice(j * block[1], (j + 1) * block[1])
            out[rows, cols] = weight[rows, cols].to(torch.float32) * scale_inv[i, j]
    return out


def write_reference(fp8_dir: Path, dest: Path) -> Path:
    """`fp8_dir` as an unquantized float32 single-file checkpoint: each FP8 weight dequantized by
    reference_dequantize, the rest upcast, no quantization_config."""
    from safetensors.torch import load_file, save_file

    shutil.copytree(fp8_dir, dest, ignore=shutil.ignore_patterns("*.safetensors", "*.safetensors.index.json"))
    config = json.loads((fp8_dir / "config.json").read_text())
    block = tuple(config.pop("quantization_config")["weight_block_size"])
    raw = {}
    for file in sorted(fp8_dir.glob("*.safetensors")):
        raw.update(load_file(str(file)))
    state = {key: reference_dequantize(t, raw[f"{key}_scale_inv"], block) if t.dtype == torch.float8_e4m3fn
             else t.to(torch.float32) for key, t in raw.items() if not key.endswith("_scale_inv")}
    save_file(state, str(dest / "model.safetensors"), metadata={"format": "pt"})
    (dest / "config.json").write_text(json.dumps(config, indent=2))
    return dest


@pytest.fixture(scope="module")
def fp8_checkpoints(tiny_deepseek_mtp, tmp_path_factory):
    """{block: (the block-FP8 copy, its reference float32 dequantization)}"""
    from trtspec.testing.tiny import write_block_fp8

    made = {}
    for block in BLOCKS:
        where = tmp_path_factory.mktemp(f"fp8-{block[0]}")
        fp8 = write_block_fp8(tiny_deepseek_mtp, where / "fp8", block=block)
        made[block] = (fp8, write_reference(fp8, where / "reference"))
    return made


def _tensors(path: Path) -> dict:
    from safetensors.torch import load_file

    return {k: v for file in sorted(path.glob("*.safetensors")) for k, v in load_file(str(file)).items()}


def test_the_writer_stores_deepseeks_layout(tiny_deepseek_mtp, fp8_checkpoints):
    fp8, _ = fp8_checkpoints[(16, 16)]
    config = json.loads((fp8 / "config.json").read_text())
    assert config["quantization_config"] == {"activation_scheme": "dynamic", "fmt": "e4m3", "quant_method": "fp8",
                                             "weight_block_size": [16, 16]}
    stored, original = _tensors(fp8), _tensors(tiny_deepseek_mtp)
    weight_map = json.loads((fp8 / "model.safetensors.index.json").read_text())["weight_map"]
    assert set(weight_map) == set(stored) and weight_map["model.layers.4.eh_proj.weight"].startswith("model-00002")
    # DeepSeek's Linears in e4m3 with float32 scales, a short block at the edge: kv_a_proj_with_mqa is
    # 24 x 64 (kv_lora_rank 16 + rope 8 rows), 2 x 4 blocks of 16, the second row of blocks 8 rows high
    for layer in (0, 1, 4):  # dense, MoE, the MTP module's block
        for name in ("self_attn.q_a_proj", "self_attn.kv_a_proj_with_mqa", "self_attn.kv_b_proj", "self_attn.o_proj"):
            assert stored[f"model.layers.{layer}.{name}.weight"].dtype == torch.float8_e4m3fn
    assert stored["model.layers.0.self_attn.kv_a_proj_with_mqa.weight_scale_inv"].shape == (2, 4)
    assert stored["model.layers.0.self_attn.kv_a_proj_with_mqa.weight_scale_inv"].dtype == torch.float32
    for name in ("mlp.experts.3.down_proj", "mlp.shared_experts.up_proj"):
        assert stored[f"model.layers.4.{name}.weight"].dtype == torch.float8_e4m3fn
    # left unquantized as DeepSeek leaves them: BF16, the router's bias float32
    for key in ("model.embed_tokens.weight", "lm_head.weight", "model.norm.weight", "model.layers.1.mlp.gate.weight",
                "model.layers.4.eh_proj.weight", "model.layers.4.shared_head.head.weight", "model.layers.4.enorm.weight",
                "model.layers.1.self_attn.kv_a_layernorm.weight"):
        assert stored[key].dtype == torch.bfloat16 and f"{key}_scale_inv" not in stored, key
    assert stored["model.layers.1.mlp.gate.e_score_correction_bias"].dtype == torch.float32
    # each block's largest value maps to 448, and the dequantized weight is the seeded one within
    # e4m3's 3-bit mantissa (relative error under 2**-4 per value, far smaller in the norm)
    weight = stored["model.layers.0.self_attn.kv_a_proj_with_mqa.weight"]
    scale = stored["model.layers.0.self_attn.kv_a_proj_with_mqa.weight_scale_inv"]
    assert weight[16:24, 48:64].float().abs().max() == 448.0
    seeded = original["model.layers.0.self_attn.kv_a_proj_with_mqa.weight"]
    error = (reference_dequantize(weight, scale, (16, 16)) - seeded).norm() / seeded.norm()
    assert 0 < error < 0.04


@pytest.mark.parametrize("block", BLOCKS, ids=lambda b: f"{b[0]}x{b[1]}")
def test_loaded_weights_equal_the_reference_dequantization_bit_for_bit(block, fp8_checkpoints):
    from trtspec.runtime.checkpoints.parts import load_causal_lm
    from trtspec.runtime.drafters.mtp import read_mtp_weights

    fp8, reference = fp8_checkpoints[block]
    loaded, expected = load_causal_lm(fp8), load_causal_lm(reference)  # the reference: transformers' own load
    assert loaded.dtype == torch.float32 and loaded.config._name_or_path == str(fp8)
    ours, theirs = loaded.state_dict(), expected.state_dict()
    assert list(ours) == list(theirs)
    unequal = [key for key in ours if not torch.equal(ours[key], theirs[key])]
    assert not unequal, unequal[:5]
    # the experts arrive stacked as transformers holds them, each dequantized with its own scales
    assert ours["model.layers.1.mlp.experts.gate_up_proj"].shape == (4, 64, 64)
    mtp, mtp_expected = read_mtp_weights(fp8, 4), read_mtp_weights(reference, 4)
    assert set(mtp) == set(mtp_expected) and not any(key.endswith("_scale_inv") for key in mtp)
    assert all(torch.equal(mtp[key], mtp_expected[key]) for key in mtp)
    assert mtp["self_attn.kv_b_proj.weight"].dtype == torch.float32


def _variant(tmp_path: Path, source: Path, *, quant: dict | None = None, drop: str | None = None) -> Path:
    from safetensors.torch import load_file, save_file

    dest = tmp_path / "variant"
    shutil.copytree(source, dest)
    if quant is not None:
        config = json.loads((dest / "config.json").read_text())
        config["quantization_config"].update(quant)
        (dest / "config.json").write_text(json.dumps(config))
    if drop is not None:
        for file in dest.glob("*.safetensors"):
            tensors = load_file(str(file))
            if tensors.pop(drop, None) is not None:
                save_file(tensors, str(file), metadata={"format": "pt"})
    return dest


@pytest.mark.parametrize("change, error, says", [
    # GLM-4.5-FP8 is stored as compressed-tensors (per-channel scales), which the cpu engine does not read
    ({"quant": {"quant_method": "compressed-tensors"}}, "IncompatibleArtifactError",
     "quant_method 'compressed-tensors' is not a format the cpu engine loads"),
    ({"quant": {"fmt": "e5m2"}}, "IncompatibleArtifactError", "FP8 format 'e5m2' is not e4m3"),
    ({"quant": {"activation_scheme": "static"}}, "IncompatibleArtifactError", "activation_scheme 'static'"),
    ({"drop": "model.layers.2.self_attn.o_proj.weight_scale_inv"}, "ModelSourceError",
     "model.layers.2.self_attn.o_proj.weight is FP8 and its scales model.layers.2.self_attn.o_proj.weight_scale_inv "
     "are missing"),
    ({"quant": {"weight_block_size": [32, 32]}}, "ModelSourceError", "_scale_inv has shape"),
], ids=["quant-method", "fmt", "static-activations", "missing-scale", "wrong-block"])
def test_what_the_cpu_engine_cannot_load_is_one_line(change, error, says, tmp_path, fp8_checkpoints):
    from trtspec import errors
    from trtspec.runtime.checkpoints.parts import load_causal_lm

    path = _variant(tmp_path, fp8_checkpoints[(16, 16)][0], **change)
    with pytest.raises(getattr(errors, error)) as refused:
        load_causal_lm(path)
    message = str(refused.value)
    assert says in message and "\n" not in message and refused.value.fix, message


def test_a_missing_scale_in_the_mtp_module_is_one_line(tmp_path, fp8_checkpoints):
    from trtspec.errors import ModelSourceError
    from trtspec.runtime.drafters.mtp import read_mtp_weights

    path = _variant(tmp_path, fp8_checkpoints[(16, 16)][0], drop="model.layers.4.mlp.experts.1.up_proj.weight_scale_inv")
    with pytest.raises(ModelSourceError, match=r"\(MTP module, model\.layers\.4\.\*\): mlp\.experts\.1\.up_proj\.weight "
                                               r"is FP8 and its scales .* are missing"):
        read_mtp_weights(path, 4)


@pytest.mark.parametrize("dry_run", [True, False], ids=["dry-run", "run"])
def test_fp8_ptq_of_a_stored_fp8_target_is_one_line(dry_run, in_tmp, fp8_checkpoints):
    """`convert --fp8` would quantize DeepSeek's own FP8 weights a second time: refused before any
    calibration, in one line, with no FP8 checkpoint written."""
    from click.testing import CliRunner

    from tests.convert.conftest import write_spec
    from trtspec.cli import main

    fp8, _ = fp8_checkpoints[BLOCKS[-1]]
    spec = write_spec(in_tmp, fp8)
    result = CliRunner().invoke(main, ["convert", "-c", str(spec), "--fp8", *(["--dry-run"] if dry_run else [])])
    errors = [line for line in result.stderr.splitlines() if line.startswith("error:")]
    assert result.exit_code != 0 and len(errors) == 1, result.stderr
    assert "stored quantized already (config.json quantization_config, quant_method 'fp8')" in errors[0]
    assert "without --fp8" in errors[0]
    assert not (in_tmp / "work" / "checkpoints" / "target-fp8").exists()
