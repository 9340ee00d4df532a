"""Fixtures for build tests: an EAGLE-3 head in ModelOpt's export format, a real ModelOpt FP8
checkpoint of the tiny target, workspaces with convert's checkpoint layout, and golden files.

Golden files live in tests/golden/builders/. Regenerate them after an intended change with
`TRTSPEC_UPDATE_GOLDEN=1 python -m pytest tests/builders -q` and review the diff.
"""

from __future__ import annotations

import json
import os
import re
import shutil
from pathlib import Path
from typing import Any

import pytest
import yaml

GOLDEN_DIR = Path(__file__).resolve().parents[1] / "golden" / "builders"
UPDATE_ENV = "TRTSPEC_UPDATE_GOLDEN"


def make_eagle3_head(path: Path, target_dir: Path, *, seed: int = 0, target_sha256: str | None = None) -> Path:
    """A seeded random one-layer EAGLE-3 head laid out exactly as ModelOpt's
    export_speculative_decoding writes it (config.json + model.safetensors + manifest.json)."""
    import torch
    from safetensors.torch import save_file

    from trtspec import artifacts

    target = json.loads((target_dir / "config.json").read_text())
    h, heads, kv = target["hidden_size"], target["num_attention_heads"], target["num_key_value_heads"]
    d, inter, vocab = h // heads, target["intermediate_size"], target["vocab_size"]
    g = torch.Generator().manual_seed(seed)

    def rand(*shape):
        return (torch.randn(*shape, generator=g) * 0.02).contiguous()

    tensors = {
        "fc.weight": rand(h, 3 * h), "norm.weight": torch.ones(h), "lm_head.weight": rand(vocab, h),
        "layers.0.hidden_norm.weight": torch.ones(h), "layers.0.input_layernorm.weight": torch.ones(h),
        "layers.0.post_attention_layernorm.weight": torch.ones(h),
        "layers.0.self_attn.q_proj.weight": rand(heads * d, 2 * h),
        "layers.0.self_attn.k_proj.weight": rand(kv * d, 2 * h),
        "layers.0.self_attn.v_proj.weight": rand(kv * d, 2 * h),
        "layers.0.self_attn.o_proj.weight": rand(h, heads * d),
        "layers.0.mlp.gate_proj.weight": rand(inter, h), "layers.0.mlp.up_proj.weight": rand(inter, h),
        "layers.0.mlp.down_proj.weight": rand(h, inter),
    }
    path.mkdir(parents=True, exist_ok=True)
    save_file(tensors, str(path / "model.safetensors"))
    layers = target["num_hidden_layers"]
    from trtspec.convert.eagle3.train import aux_layer_ids  # the target layers convert trains the head on

    config = {"architectures": ["LlamaForCausalLMEagle3"], "model_type": "llama", "hidden_size": h,
              "num_attention_heads": heads, "num_key_value_heads": kv, "head_dim": d, "intermediate_size": inter,
              "vocab_size": vocab, "draft_vocab_size": vocab, "num_hidden_layers": 1,
              "max_position_embeddings": target.get("max_position_embeddings", 1024),
              "rms_norm_eps": target.get("rms_norm_eps", 1e-6), "rope_theta": 10000.0, "torch_dtype": "float32",
              "eagle_config": {"eagle_aux_hidden_state_layer_ids": aux_layer_ids(layers),
                               "use_aux_hidden_state": True, "use_input_layernorm_in_first_layer": True,
                               "use_last_layernorm": True}}
    (path / "config.json").write_text(json.dumps(config, indent=2))
    artifacts.write_manifest(path, "eagle3", source=str(target_dir), weights_sha256=artifacts.weights_sha256(path),
                             target_sha256=target_sha256 or artifacts.weights_sha256(target_dir), inputs={})
    return path


@pytest.fixture(scope="session")
def gpu_target(tmp_path_factory) -> Path:
    """The tiny target with 8 layers: TensorRT-LLM captures EAGLE-3 layers (1, n/2 - 1, n - 4) by
    default only from 6 layers up, and convert's layers for 8 are the same (1, 3, 4)."""
    from trtspec.testing.tiny import make_tiny_llama

    return make_tiny_llama(tmp_path_factory.mktemp("tiny-target-8"), seed=0, num_hidden_layers=8)


@pytest.fixture(scope="session")
def fp8_target(tmp_path_factory, tiny_llama) -> Path:
    """The tiny target quantized for real with ModelOpt FP8 PTQ and its unified HF export."""
    return _fp8_export(tmp_path_factory, tiny_llama)


@pytest.fixture(scope="session")
def gpu_fp8_target(tmp_path_factory, gpu_target) -> Path:
    """gpu_target quantized the same way."""
    return _fp8_export(tmp_path_factory, gpu_target)


def _fp8_export(tmp_path_factory, tiny_llama: Path) -> Path:
    import copy

    import modelopt.torch.quantization as mtq
    import torch
    from modelopt.torch.export import export_hf_checkpoint
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from trtspec import artifacts

    out = tmp_path_factory.mktemp("tiny-target-fp8")
    model = AutoModelForCausalLM.from_pretrained(tiny_llama, dtype=torch.float32)
    tokenizer = AutoTokenizer.from_pretrained(tiny_llama)
    batch = torch.tensor([tokenizer("The capital of France is Paris.")["input_ids"]])

    def forward_loop(quant_model) -> None:
        with torch.no_grad():
            quant_model(batch)

    mtq.quantize(model, copy.deepcopy(mtq.FP8_DEFAULT_CFG), forward_loop=forward_loop)
    export_hf_checkpoint(model, export_dir=out)
    tokenizer.save_pretrained(out)
    artifacts.write_manifest(out, "target-fp8", source=str(tiny_llama), weights_sha256=artifacts.weights_sha256(out),
                             source_sha256=artifacts.weights_sha256(tiny_llama), inputs={})
    return out


def write_workspace(root: Path, target: Path, *, draft: Path | None = None, eagle3: bool = False,
                    fp8_target: Path | None = None, **sections: Any) -> Path:
    """trtspec.yaml in `root` (model `tiny` from `target`), plus convert-style checkpoints."""
    spec: dict[str, Any] = {"model": {"source": str(target), "name": "tiny"}}
    if draft is not None:
        spec["speculative"] = {"draft": str(draft)}
    for section, values in sections.items():
        spec.setdefault(section, {}).update(values)
    (root / "trtspec.yaml").write_text(yaml.safe_dump(spec, sort_keys=False))
    checkpoints = root / "work" / "checkpoints"
    if eagle3:
        make_eagle3_head(checkpoints / "eagle3", target)
    if fp8_target is not None:
        shutil.copytree(fp8_target, checkpoints / "target-fp8")
    return root / "trtspec.yaml"


def normalize(text: str, replacements: dict[str, str]) -> str:
    """Stable text for golden files: machine paths and weight hashes replaced by placeholders."""
    for old, new in sorted(replacements.items(), key=lambda item: -len(item[0])):
        text = text.replace(old, new)
    return re.sub(r"\b[0-9a-f]{64}\b", "<sha256>", text)


def assert_golden(name: str, text: str) -> None:
    """Compare `text` with tests/golden/builders/<name>; write it instead when TRTSPEC_UPDATE_GOLDEN=1."""
    path = GOLDEN_DIR / name
    if os.environ.get(UPDATE_ENV) == "1":
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
        return
    if not path.exists():
        pytest.fail(f"golden file {path} is missing; create it with {UPDATE_ENV}=1 and review it")
    assert text == path.read_text(), f"{name} differs from its golden file; if intended, regenerate with {UPDATE_ENV}=1"
