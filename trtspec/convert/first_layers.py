"""A first-E-layers copy of a checkpoint: the target cut after decoder layer E, as a draft model.

`write_first_layers(source, dest, num_layers)` writes a checkpoint of the source's embeddings, its
first `num_layers` decoder layers, its final norm and its lm_head (none when the source ties it to
the embeddings), the config with num_hidden_layers cut to match (`first_layers_config`), and every
other file beside the weights (tokenizer, generation config). The copy computes exactly the
source's hidden state after layer E and reads it out through the final norm and lm_head as if it
were the last layer: LayerSkip's early exit as a standalone draft with the target's tokenizer and
no training, which is how the GPU backends draft for mode layerskip (TensorRT-LLM has no
early-exit drafting; they serve it as draft-target, builders/engine_json.layerskip_as_draft_target).

Tensors are copied as stored, shard by shard (safetensors, dtype kept, never a whole model in
memory), so a 70B target's copy costs its first layers' bytes. The architectures are those the cpu
engine runs (runtime/checkpoints/architectures.RUNS); each keeps its decoder layers under
`model.layers.{i}.`, the only names dropped (so are DeepSeek-V3's and GLM-4.5's MTP layers, stored
as `model.layers.{num_hidden_layers}.*`). Anything else is refused in one line.

`first_layers(source, dest, num_layers)` is the cached form (benchmarks, tests): a re-run with the
same source weights and count returns `dest` untouched. Convert's stage (convert/pipeline.py) writes
through the stage idiom instead.
"""

from __future__ import annotations

import json
import re
import shutil
from pathlib import Path
from typing import Any

from trtspec import artifacts
from trtspec.errors import IncompatibleArtifactError, ModelSourceError
from trtspec.models import check_checkpoint

INDEX = "model.safetensors.index.json"
_LAYER = re.compile(r"^model\.layers\.(\d+)\.")
_NOT_COPIED = {"config.json", artifacts.MANIFEST, INDEX}


def cache_dir(name: str, num_layers: int) -> Path:
    """Where the first-layers copy of a cached model lives: ~/.cache/trtspec/models/<name>-first<N>."""
    return artifacts.model_cache_dir(f"{name}-first{num_layers}")


def exit_layer(requested: int | None, config: dict[str, Any]) -> int:
    """E for mode layerskip: speculative.layerskip.exit_layer, else the cpu engine's default
    (runtime/drafters/layerskip.default_exit_layer), checked below the target's layer count."""
    from trtspec.runtime.drafters.layerskip import default_exit_layer

    total = int(config.get("num_hidden_layers") or 0)
    chosen = requested or default_exit_layer(total)
    if not 1 <= chosen < total:
        raise IncompatibleArtifactError(
            f"speculative.layerskip.exit_layer {chosen} must lie in 1..{total - 1} (the target has {total} "
            "decoder layers)", fix="set it below num_hidden_layers, or leave it empty")
    return chosen


def first_layers_config(config: dict[str, Any], num_layers: int) -> dict[str, Any]:
    """The copy's config.json: the source's with `num_layers` decoder layers (and no MTP layers,
    which are not copied). The memory planner sizes the GPU draft from it."""
    out = dict(config, num_hidden_layers=num_layers)
    if isinstance(out.get("layer_types"), list):  # per-layer attention kinds, where the config has them
        out["layer_types"] = out["layer_types"][:num_layers]
    if out.get("num_nextn_predict_layers"):
        out["num_nextn_predict_layers"] = 0
    return out


def write_first_layers(source: Path, dest: Path, num_layers: int) -> dict[str, Any]:
    """Write the copy into the existing directory `dest`; return what was kept."""
    from safetensors import safe_open
    from safetensors.torch import save_file

    from trtspec.runtime.checkpoints.architectures import RUNS

    source, dest = Path(source), Path(dest)
    info = check_checkpoint(source, name=source.name)
    total = int(info.config.get("num_hidden_layers") or 0)
    if not 1 <= num_layers <= total:
        raise ModelSourceError(f"{source}: cannot keep {num_layers} of its {total} decoder layers",
                               fix=f"choose a layer count from 1 to {total}")
    model_type = info.config.get("model_type")
    if model_type not in RUNS:
        raise IncompatibleArtifactError(
            f"{source}: a first-layers copy of model_type {model_type!r} is not written (its decoder layers are "
            "not known to sit under model.layers)", fix=f"use mode draft-target with a draft model; the copy "
            f"covers {', '.join(RUNS.values())}")
    weight_map, kept = {}, 0
    for shard in sorted(source.glob("*.safetensors")):
        with safe_open(str(shard), framework="pt") as handle:
            keep = [name for name in handle.keys() if not (m := _LAYER.match(name)) or int(m.group(1)) < num_layers]
            if keep:
                save_file({name: handle.get_tensor(name) for name in keep}, str(dest / shard.name),
                          metadata=handle.metadata() or {"format": "pt"})
                weight_map.update(dict.fromkeys(keep, shard.name))
                kept += len(keep)
    if not any(name.startswith("model.layers.0.") for name in weight_map):
        raise IncompatibleArtifactError(f"{source}: no tensors under model.layers.0., so its decoder layers are "
                                        "stored elsewhere", fix="use mode draft-target with a draft model")
    if len(set(weight_map.values())) > 1 or (source / INDEX).is_file():
        artifacts.write_json(dest / INDEX, {"metadata": {}, "weight_map": dict(sorted(weight_map.items()))})
    (dest / "config.json").write_text(json.dumps(first_layers_config(info.config, num_layers), indent=2) + "\n")
    for path in sorted(source.iterdir()):  # tokenizer, generation config: whatever is not weights
        if path.is_file() and path.name not in _NOT_COPIED and not path.name.endswith(artifacts.WEIGHT_SUFFIXES):
            shutil.copy2(path, dest / path.name)
    return {"num_layers": num_layers, "of_layers": total, "tensors": kept}


def first_layers(source: str | Path, dest: str | Path, num_layers: int) -> Path:
    """The cached copy: write the first `num_layers` decoder layers of `source` to `dest` unless
    `dest` already holds them (manifest inputs: the source's weights hash and the count)."""
    source, dest = Path(source), Path(dest)
    inputs = {"source_sha256": artifacts.weights_sha256(source), "num_layers": num_layers}
    if artifacts.is_up_to_date(dest, inputs):
        return dest
    with artifacts.atomic_dir(dest) as staging:
        write_first_layers(source, staging, num_layers)
        artifacts.write_manifest(staging, "first-layers-draft", inputs=inputs, source=str(source),
                                 target_sha256=inputs["source_sha256"])
    return dest
