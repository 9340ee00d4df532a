"""A layer-truncated copy of a Llama checkpoint: an untrained "early-exit" draft for it.

`truncate_llama(source, dest, num_layers)` writes a standard LlamaForCausalLM checkpoint made of
the source's embeddings, its first `num_layers` decoder layers, its final norm and its lm_head
(tied to the embeddings when the source ties them), plus the source's tokenizer files. The copy
computes exactly the source's hidden state after layer `num_layers`, then reads it out through
the final norm and lm_head as if it were the last layer: a self-speculative draft with the
target's tokenizer and no training. Nothing is downloaded; the source must be on disk.

The result is cached: a re-run with the same source weights and `num_layers` returns `dest`
untouched (manifest.json records the inputs; the directory is replaced in one rename).
"""

from __future__ import annotations

import shutil
from pathlib import Path

from trtspec import artifacts
from trtspec.errors import ModelSourceError
from trtspec.models import check_checkpoint

TOKENIZER_FILES = ("tokenizer.json", "tokenizer_config.json", "special_tokens_map.json", "chat_template.jinja",
                   "generation_config.json", "vocab.json", "merges.txt")


def truncated_cache_dir(name: str, num_layers: int) -> Path:
    """Where the truncated copy of a cached model lives: ~/.cache/trtspec/models/<name>-first<N>."""
    return artifacts.model_cache_dir(f"{name}-first{num_layers}")


def truncate_llama(source: str | Path, dest: str | Path, num_layers: int) -> Path:
    """Write the first `num_layers` decoder layers of the Llama checkpoint `source` to `dest`."""
    import torch
    from transformers import AutoModelForCausalLM

    source, dest = Path(source), Path(dest)
    info = check_checkpoint(source, name=source.name)
    total = int(info.config.get("num_hidden_layers", 0))
    if not 1 <= num_layers <= total:
        raise ModelSourceError(f"{source}: cannot keep {num_layers} of its {total} decoder layers",
                               fix=f"choose a layer count from 1 to {total}")
    inputs = {"source_sha256": info.sha256, "num_layers": num_layers}
    if artifacts.is_up_to_date(dest, inputs):
        return dest
    model = AutoModelForCausalLM.from_pretrained(str(source), dtype=torch.float32, use_safetensors=True,
                                                 trust_remote_code=False)
    model.model.layers = model.model.layers[:num_layers]
    model.config.num_hidden_layers = num_layers
    if getattr(model.config, "layer_types", None):  # per-layer attention kinds, where the config has them
        model.config.layer_types = model.config.layer_types[:num_layers]
    with artifacts.atomic_dir(dest) as staging:
        model.save_pretrained(staging, safe_serialization=True)
        for name in TOKENIZER_FILES:
            if (source / name).is_file():
                shutil.copy2(source / name, staging / name)
        artifacts.write_manifest(staging, "truncated-draft", inputs=inputs, source=str(source),
                                 target_sha256=inputs["source_sha256"])
    return dest
