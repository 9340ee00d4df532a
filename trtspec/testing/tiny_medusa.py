"""Tiny seeded Medusa heads for a tiny target, written in the layouts users bring (tests only).

`make_tiny_medusa(target, path, layout=...)` writes the heads as FasterDecoding saves them
(medusa_lm_head.safetensors or .pt + config.json) or as a ModelOpt-converted model holds them
(ModelOpt's own `mtsp.convert(model, [("medusa", ...)])`, its state dict saved: medusa_heads.*
beside the target's weights). `trained=True` trains them first with trtspec's trainer for a fixed
number of steps on the target's greedy answers to a few prompts (the same heads every run), so
drafts are accepted often enough to exercise the tree; otherwise they are seeded random.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

LAYOUTS = ("faster-decoding", "faster-decoding-pt", "modelopt")
TRAIN_PROMPTS = ("the quick brown fox", "What is the capital of France?", "def add(a, b):", "1 2 3 4 5",
                 "speculative decoding drafts tokens")


def tiny_heads(target: str | Path, *, num_heads: int = 3, num_layers: int = 1, seed: int = 0,
               trained: bool = True, steps: int = 150) -> dict[str, Any]:
    """Canonical tensors of heads for `target` (trained for `steps`, or seeded random)."""
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from trtspec.convert.medusa import train

    model = AutoModelForCausalLM.from_pretrained(str(target), dtype=torch.float32).eval()
    weight = model.get_output_embeddings().weight
    if not trained:
        generator = torch.Generator().manual_seed(seed)
        tensors = train.init_heads(weight, num_heads, num_layers)
        for key, tensor in tensors.items():  # untied projections too: the per-head path runs
            tensors[key] = tensor + torch.randn(tensor.shape, generator=generator) * 0.1
        return tensors
    tokenizer = AutoTokenizer.from_pretrained(str(target))
    rows = train.target_answers(model, tokenizer, list(TRAIN_PROMPTS), answer_tokens=32, in_flight=4)
    data = train.features(model, rows, num_heads)
    tensors, _ = train.train_heads(data, weight, num_heads=num_heads, num_layers=num_layers, seconds=0,
                                   seed=seed, steps=steps)
    return tensors


def make_tiny_medusa(target: str | Path, path: str | Path, *, layout: str = "faster-decoding",
                     tensors: dict[str, Any] | None = None, **options: Any) -> Path:
    """Write heads for `target` into `path` in `layout` (one of LAYOUTS); return `path`."""
    import torch
    from safetensors.torch import save_file

    path = Path(path)
    path.mkdir(parents=True, exist_ok=True)
    tensors = tensors if tensors is not None else tiny_heads(target, **options)
    heads = 1 + max(int(k.split(".")[0]) for k in tensors)
    layers = max(int(k.split(".")[1]) for k in tensors)
    if layout == "modelopt":
        import modelopt.torch.speculative as mtsp
        from transformers import AutoModelForCausalLM

        model = AutoModelForCausalLM.from_pretrained(str(target), dtype=torch.float32)
        mtsp.convert(model, [("medusa", {"medusa_num_heads": heads, "medusa_num_layers": layers})])
        medusa_heads: Any = model.medusa_heads  # the ModuleList ModelOpt's convert added
        medusa_heads.load_state_dict(tensors, strict=True)
        save_file({k: v.contiguous().clone() for k, v in model.state_dict().items()}, str(path / "model.safetensors"))
        (path / "config.json").write_text(json.dumps({**model.config.to_dict(), "medusa": model.config.medusa}))
        return path
    config = {"medusa_num_heads": heads, "medusa_num_layers": layers, "base_model_name_or_path": str(target)}
    (path / "config.json").write_text(json.dumps(config))
    if layout == "faster-decoding-pt":
        torch.save({k: v.clone() for k, v in tensors.items()}, str(path / "medusa_lm_head.pt"))
    elif layout == "faster-decoding":
        save_file({k: v.contiguous() for k, v in tensors.items()}, str(path / "medusa_lm_head.safetensors"))
    else:
        raise ValueError(f"layout {layout!r} is not one of {LAYOUTS}")
    return path
