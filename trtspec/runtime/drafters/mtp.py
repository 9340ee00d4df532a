"""Multi-token prediction (MTP): the target's own MTP module drafts for it (DeepSeek-V3/R1, GLM-4.5).

The weights sit inside the target checkpoint, which transformers drops on load
(`_keys_to_ignore_on_load_unexpected`), so they are read here from its safetensors: module k is
`model.layers.{num_hidden_layers + k}.*` [DeepSeek-V3 README_WEIGHTS.md]: `enorm`, `hnorm`,
`eh_proj` [hidden, 2 x hidden], `shared_head.norm`, optional `shared_head.head` and
`embed_tokens` (copies of the target's lm_head and embeddings: the target's own are used, as
TensorRT-LLM and transformers' MtpModel do), and a full decoder block of the architecture
(MoE, its experts stored one by one and stacked here as transformers' module holds them).

The function, as TensorRT-LLM's DeepseekV3MTP computes it
(tensorrt_llm/_torch/models/modeling_deepseekv3.py, DeepseekV3MTP.forward; transformers'
MtpLayer the same): at position i, with the target's final hidden state H_i (after its final
norm) and the next token t_{i+1},
    h_i = shared_head.norm(block(eh_proj(cat(enorm(embed(t_{i+1})), hnorm(H_i)))))
    logits_i = lm_head(h_i), a guess at t_{i+2}.
The embedding comes first in the concatenation (the paper writes the other order; the released
weights follow the code). Chains longer than one token reuse the module, feeding the drafted token
with the module's own h at the previous position, as TensorRT-LLM's MTP Eagle path does with a
one-module checkpoint (MTPEagleWorker in tensorrt_llm/_torch/speculative/mtp.py).

Everything else is the EAGLE-3 drafter's (trtspec.runtime.drafters.eagle3), whose structure is
the same (position i pairs token i + 1 with a hidden row of position i): the target's hidden rows
arrive through on_verified (the last decoder layer's output, hooked; `fc` here is the target's
final norm, which turns it into H), the batched catch-up and chain drafting, the module's own
paged KV cache (one layer) holding committed positions only. Greedy and sampled drafts verify
losslessly as every model drafter's.

A block-FP8 checkpoint (DeepSeek-V3/R1 as released) stores the module's Linears in e4m3 with
per-block scales, as the target's: read_mtp_weights dequantizes them to float32 the same way
(trtspec.runtime.checkpoints.block_fp8), so module and target share one set of numerics.

Only the first module is used: the released checkpoints carry one, and TensorRT-LLM reuses a
single module for every draft position; `speculative.mtp.num_layers` above 1 is refused here.
"""

from __future__ import annotations

import copy
import json
import re
from pathlib import Path
from typing import Any

from trtspec.errors import IncompatibleArtifactError, ModelSourceError
from trtspec.runtime.drafters.eagle3 import Eagle3Drafter

_EXPERT = re.compile(r"^mlp\.experts\.(\d+)\.(gate|up|down)_proj\.weight$")


def mtp_layer_count(config: dict[str, Any]) -> int:
    """The MTP modules a checkpoint's config.json says it carries."""
    return int(config.get("num_nextn_predict_layers") or config.get("num_mtp_layers") or 0)


def mtp_weights_missing(path: str | Path) -> str | None:
    """Why the checkpoint at `path` cannot draft with its MTP module (one phrase), or None. Reads
    config.json and the safetensors key names only (the index's weight_map, or the file headers)."""
    from safetensors import safe_open

    path = Path(path)
    config = json.loads((path / "config.json").read_text())
    count, key = mtp_layer_count(config), f"model.layers.{config.get('num_hidden_layers')}.eh_proj.weight"
    index_file = path / "model.safetensors.index.json"
    if index_file.is_file():
        present = key in json.loads(index_file.read_text())["weight_map"]
    else:
        present = False
        for file in sorted(path.glob("*.safetensors")):
            with safe_open(str(file), framework="pt") as tensors:
                present = present or key in tensors.keys()  # noqa: SIM118 (safe_open is not a mapping)
    if count and present:
        return None
    return (f"{path}: mode mtp needs the checkpoint's MTP weights ({key.removesuffix('.eh_proj.weight')}.eh_proj "
            f"and the rest), and it has none (num_nextn_predict_layers {count})")


MISSING_FIX = "use a checkpoint that ships its MTP layers (DeepSeek-V3/R1, GLM-4.5), or another mode"


def read_mtp_weights(path: str | Path, index: int) -> dict[str, Any]:
    """The tensors of `model.layers.{index}.*` in the checkpoint at `path`, the prefix stripped.
    Reads only the shards that hold them (model.safetensors.index.json), and only those keys. In a
    block-FP8 checkpoint (DeepSeek-V3/R1 as released) each FP8 weight comes back dequantized to
    float32 and its `weight_scale_inv` consumed, as the target's loader does (checkpoints/block_fp8.py)."""
    from safetensors import safe_open

    from trtspec.runtime.checkpoints.block_fp8 import block_size, dequantize_state

    path = Path(path)
    block = block_size(json.loads((path / "config.json").read_text()), str(path))
    prefix = f"model.layers.{index}."
    index_file = path / "model.safetensors.index.json"
    if index_file.is_file():
        weight_map = json.loads(index_file.read_text())["weight_map"]
        files = sorted({path / shard for key, shard in weight_map.items() if key.startswith(prefix)})
    else:
        files = sorted(path.glob("*.safetensors"))
    state = {}
    for file in files:
        with safe_open(str(file), framework="pt") as tensors:
            for key in tensors.keys():  # noqa: SIM118 (safe_open is not a mapping)
                if key.startswith(prefix):
                    state[key[len(prefix):]] = tensors.get_tensor(key)
    return state if block is None else dequantize_state(state, block, f"{path} (MTP module, {prefix}*)")


def stack_experts(state: dict[str, Any], wanted: set[str]) -> dict[str, Any]:
    """Per-expert `mlp.experts.{e}.{gate,up,down}_proj.weight` (the checkpoints' layout) stacked
    into `mlp.experts.gate_up_proj` [E, 2 x inter, hidden] (gate rows first, as the module's
    forward chunks them) and `mlp.experts.down_proj` [E, hidden, inter], where the block's own
    state dict (`wanted`) holds them stacked (transformers 5); else unchanged."""
    import torch

    if "mlp.experts.gate_up_proj" not in wanted:
        return state
    experts: dict[int, dict[str, Any]] = {}
    rest = {}
    for key, tensor in state.items():
        match = _EXPERT.match(key)
        if match:
            experts.setdefault(int(match.group(1)), {})[match.group(2)] = tensor
        else:
            rest[key] = tensor
    order = sorted(experts)
    rest["mlp.experts.gate_up_proj"] = torch.stack([torch.cat([experts[e]["gate"], experts[e]["up"]]) for e in order])
    rest["mlp.experts.down_proj"] = torch.stack([experts[e]["down"] for e in order])
    return rest


def build_mtp_module(target: Any, path: str | Path, num_layers: int | None = None):
    """The target's first MTP module as torch modules (weights loaded strictly), or one
    IncompatibleArtifactError line where the checkpoint has none or more are asked for."""
    import torch
    from torch import nn

    path = Path(path)
    config_dict = json.loads((path / "config.json").read_text())
    layers = int(config_dict["num_hidden_layers"])
    available = mtp_layer_count(config_dict)
    wanted = available if num_layers is None else num_layers
    missing = mtp_weights_missing(path)
    if missing:
        raise IncompatibleArtifactError(missing, fix=MISSING_FIX)
    if not 1 <= wanted <= min(available, 1):
        raise IncompatibleArtifactError(
            f"speculative.mtp.num_layers {wanted}: the cpu engine drafts with one MTP module, reused for every "
            f"draft position (TensorRT-LLM's MTP Eagle path); the checkpoint has {available}",
            fix="set speculative.mtp.num_layers to 1, or leave it empty")
    state = read_mtp_weights(path, layers)
    decoder = (target.get_decoder() or target.model)
    config = copy.deepcopy(target.config)
    if isinstance(getattr(config, "layer_types", None), list):  # index-keyed fields cover the new index too
        config.layer_types = [*config.layer_types, config.layer_types[-1]]
    with torch.device("meta"):  # built as layer `layers` (MoE or dense by the config's rule), then filled
        block = type(decoder.layers[-1])(config, layers)
    for module in block.modules():  # its attention is the one layer of the module's own KV pool
        if hasattr(module, "layer_idx"):
            module.layer_idx = 0
    hidden = config.hidden_size
    norm = type(decoder.norm)
    module = nn.Module()
    module.block = block
    module.enorm = norm(hidden, eps=config.rms_norm_eps)
    module.hnorm = norm(hidden, eps=config.rms_norm_eps)
    module.shared_norm = norm(hidden, eps=config.rms_norm_eps)
    module.eh_proj = nn.Linear(2 * hidden, hidden, bias=False)
    own = {f"block.{k}": v for k, v in stack_experts(
        {k: v for k, v in state.items() if k.split(".")[0] in ("self_attn", "mlp", "input_layernorm",
                                                               "post_attention_layernorm")},
        set(block.state_dict())).items()}
    own.update({"enorm.weight": state["enorm.weight"], "hnorm.weight": state["hnorm.weight"],
                "shared_norm.weight": state["shared_head.norm.weight"], "eh_proj.weight": state["eh_proj.weight"]})
    module.to_empty(device="cpu")
    module.load_state_dict({k: v.float() for k, v in own.items()}, strict=True)
    module.float().eval()
    # the one config object the block's modules read (its attention implementation is set on it)
    # shapes the module's own KV pool: one layer
    config.num_hidden_layers = 1
    module.config = config
    return module


class MtpDrafter(Eagle3Drafter):
    kind = "mtp"

    def __init__(self, target: Any, module: Any):
        from trtspec.runtime.forward.attention import use_paged_attention

        use_paged_attention(module.config)
        decoder = target.get_decoder() or target.model
        self.head = module
        module.fc = decoder.norm           # the hidden rows: H = the target's final norm over its last layer
        module.lm_head = target.lm_head    # the shared head
        module.rotary_emb = decoder.rotary_emb
        module.d2t = None                  # the target's vocabulary
        self.embed_tokens = target.get_input_embeddings()
        self.kv_config = module.config
        # hidden_states index of the last decoder layer's output (engine.py hooks layers[index - 1])
        self.aux_layer_ids = (len(decoder.layers),)

    def forward(self, feeds):
        """The MTP module over a packed batch; per feed (logits of its last num_logits rows, h of
        every row, which a chain feeds back with the drafted token). Each feed's cache grows by its
        tokens."""
        import torch

        from trtspec.runtime.forward.batch import _mask_placeholder

        module = self.head
        layout, embeds, hidden, positions = self.packed(feeds)  # hidden: [1, T, hidden]
        h = module.eh_proj(torch.cat([module.enorm(embeds), module.hnorm(hidden)], dim=-1))
        h = module.block(h, attention_mask=_mask_placeholder(), position_ids=positions,
                         position_embeddings=module.rotary_emb(h, positions), trtspec_layout=layout)
        h = module.shared_norm(h[0] if isinstance(h, tuple) else h)
        return self.outputs(feeds, h, module.lm_head)


def target_dir(target: Any) -> Path:
    """Where the target was loaded from (transformers records it in config._name_or_path)."""
    where = getattr(target.config, "_name_or_path", None) or getattr(target.config, "name_or_path", None)
    if not where or not (Path(where) / "config.json").is_file():
        raise ModelSourceError("mode mtp reads the MTP weights from the target's checkpoint directory, and the "
                               f"loaded target does not say where it is ({where!r})",
                               fix="load the target from a local checkpoint directory")
    return Path(where)


def make(parts: Any) -> MtpDrafter:
    """The mode's factory (trtspec.modes row `mtp`)."""
    module = build_mtp_module(parts.target, target_dir(parts.target), parts.options.get("mtp_layers"))
    drafter = MtpDrafter(parts.target, module)
    parts.prepack(module)
    return drafter
