"""Tiny seeded random Llama checkpoints: real transformers models, small enough for unit tests.

`make_tiny_llama(path, seed=...)` writes config.json (with `architectures` set, as ModelOpt's
exporters need), safetensors weights and a tokenizer that shares SmolLM2's vocabulary layout
only in size: a byte-level tokenizer built offline from a fixed word list, so text round-trips
and two models built with the same vocab_size share token ids. `make_tiny_causal_lm` writes the
other architectures the cpu engine runs (DeepSeek-V3 and GLM-4.5 with an MTP module on request);
`write_block_fp8` stores a copy as DeepSeek's FP8 checkpoints are released.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

TINY_DEFAULTS: dict[str, Any] = {
    "vocab_size": 512,
    "hidden_size": 64,
    "intermediate_size": 128,
    "num_hidden_layers": 4,
    "num_attention_heads": 4,
    "num_key_value_heads": 2,
    "max_position_embeddings": 1024,
    "rms_norm_eps": 1e-6,
    "tie_word_embeddings": False,
}


def make_tokenizer(vocab_size: int):
    """A byte-level BPE tokenizer with exactly `vocab_size` tokens, trained on a fixed text."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast

    corpus = [
        "the quick brown fox jumps over the lazy dog. " * 4,
        "speculative decoding drafts tokens and the target verifies them in one pass. " * 4,
        "What is the capital of France? The capital of France is Paris. " * 4,
        "def add(a, b):\n    return a + b\n" * 4,
        "1 2 3 4 5 6 7 8 9 10 11 12 13 14 15 16 17 18 19 20 " * 4,
    ]
    tokenizer = Tokenizer(models.BPE(unk_token=None))
    tokenizer.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tokenizer.decoder = decoders.ByteLevel()
    special = ["<|endoftext|>", "<|im_start|>", "<|im_end|>"]
    trainer = trainers.BpeTrainer(vocab_size=vocab_size, special_tokens=special, show_progress=False,
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet())
    tokenizer.train_from_iterator(corpus, trainer=trainer)
    fast = PreTrainedTokenizerFast(tokenizer_object=tokenizer, eos_token="<|im_end|>", bos_token="<|im_start|>",
                                   pad_token="<|endoftext|>", unk_token="<|endoftext|>")
    fast.chat_template = ("{% for m in messages %}<|im_start|>{{ m['role'] }}\n{{ m['content'] }}<|im_end|>\n"
                          "{% endfor %}{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}")
    return fast


def make_tiny_llama(path: str | Path, *, seed: int = 0, **overrides: Any) -> Path:
    """Write a seeded random LlamaForCausalLM checkpoint (+ tokenizer) to `path`; return it."""
    import torch
    from transformers import LlamaConfig, LlamaForCausalLM

    path = Path(path)
    settings = {**TINY_DEFAULTS, **overrides}
    tokenizer = make_tokenizer(settings["vocab_size"])
    config = LlamaConfig(**settings, bos_token_id=tokenizer.bos_token_id, eos_token_id=tokenizer.eos_token_id,
                         pad_token_id=tokenizer.pad_token_id)
    config.architectures = ["LlamaForCausalLM"]
    torch.manual_seed(seed)
    model = LlamaForCausalLM(config).eval()
    # Random init gives near-uniform logits; sharpen them so greedy paths are decisive and drafts
    # from a related model actually agree sometimes.
    with torch.no_grad():
        model.lm_head.weight.mul_(8.0)
    model.save_pretrained(path, safe_serialization=True)
    tokenizer.save_pretrained(path)
    return path


def make_tiny_eagle3(target: str | Path, *, seed: int = 0):
    """The tiny target converted by ModelOpt into an EAGLE-3 model with a random head sized for it.

    The head's random weights come from `seed` (ModelOpt draws them from torch's global generator,
    whose state would otherwise depend on what ran before in the process, e.g. the tests' order);
    the caller's generator state is left as it was.

    Keeps the training rope in the export (no YaRN injection), runs eagerly (no torch.compile)
    and reads the auxiliary layers `trtspec convert` picks (on 4 layers {0, 2, 3}: the last one
    too, whose output HF reports only after the final norm); the caller exports it with
    export_speculative_decoding.
    """
    import copy

    import modelopt.torch.speculative as mtsp
    import torch
    from modelopt.torch.speculative.config import EAGLE3_DEFAULT_CFG
    from transformers import AutoModelForCausalLM

    from trtspec.convert.eagle3.train import aux_layer_ids

    model = AutoModelForCausalLM.from_pretrained(target, dtype=torch.float32)
    config = copy.deepcopy(EAGLE3_DEFAULT_CFG["config"])
    config["eagle_architecture_config"].update({
        "hidden_size": 64, "intermediate_size": 128, "num_attention_heads": 4, "num_key_value_heads": 2,
        "head_dim": 16, "torch_dtype": "float32", "max_position_embeddings": 1024,
        "eagle_aux_hidden_state_layer_ids": aux_layer_ids(model.config.num_hidden_layers)})
    config["eagle_export_rope_scaling"] = {}
    config["eagle_use_torch_compile"] = False
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        mtsp.convert(model, [("eagle", config)])
    return model.eval()


# model_type -> (transformers config class, model class, settings beyond TINY_DEFAULTS): one tiny
# checkpoint per architecture the tests cover (trtspec.runtime.checkpoints.architectures lists what runs)
TINY_ARCHITECTURES: dict[str, tuple[str, str, dict[str, Any]]] = {
    "llama": ("LlamaConfig", "LlamaForCausalLM", {}),
    "mistral": ("MistralConfig", "MistralForCausalLM", {"sliding_window": None}),
    "qwen2": ("Qwen2Config", "Qwen2ForCausalLM", {}),
    "qwen3": ("Qwen3Config", "Qwen3ForCausalLM", {"head_dim": 16}),
    "gemma3_text": ("Gemma3TextConfig", "Gemma3ForCausalLM", {"head_dim": 16, "sliding_window": 4096}),
    "phi3": ("Phi3Config", "Phi3ForCausalLM", {"sliding_window": None, "pad_token_id": None}),
    # multi-head latent attention and MoE: keys of 8 + 8, values of 16
    "deepseek_v3": ("DeepseekV3Config", "DeepseekV3ForCausalLM", {
        "kv_lora_rank": 16, "q_lora_rank": 32, "qk_nope_head_dim": 8, "qk_rope_head_dim": 8, "v_head_dim": 16,
        "n_routed_experts": 4, "num_experts_per_tok": 2, "moe_intermediate_size": 32, "first_k_dense_replace": 1,
        "n_group": 1, "topk_group": 1, "num_key_value_heads": 4}),
    # GLM-4.5: MoE after two dense layers, rotary on half of each head (partial_rotary_factor 0.5), q/k/v
    # biases (first_k_dense_replace 2: seed 0's greedy path then varies; with 1 it repeats one token)
    "glm4_moe": ("Glm4MoeConfig", "Glm4MoeForCausalLM", {
        "head_dim": 16, "partial_rotary_factor": 0.5, "attention_bias": True, "n_routed_experts": 4,
        "num_experts_per_tok": 2, "moe_intermediate_size": 32, "first_k_dense_replace": 2, "n_group": 1,
        "topk_group": 1, "n_shared_experts": 1}),
}


def make_tiny_causal_lm(path: str | Path, model_type: str, *, seed: int = 0, mtp: bool = False,
                        **overrides: Any) -> Path:
    """Write a seeded random checkpoint of `model_type` (a TINY_ARCHITECTURES key) with a tokenizer;
    `mtp`: with one multi-token-prediction module appended as DeepSeek lays it out (add_mtp_weights)."""
    import torch
    import transformers

    config_name, model_name, settings = TINY_ARCHITECTURES[model_type]
    path = Path(path)
    settings = {**TINY_DEFAULTS, **settings, **overrides}
    tokenizer = make_tokenizer(settings["vocab_size"])
    ids = {"bos_token_id": tokenizer.bos_token_id, "eos_token_id": tokenizer.eos_token_id,
           "pad_token_id": tokenizer.pad_token_id}
    config = getattr(transformers, config_name)(**{**ids, **settings})
    config.architectures = [model_name]
    torch.manual_seed(seed)
    model = getattr(transformers, model_name)(config).eval()
    with torch.no_grad():
        model.lm_head.weight.mul_(8.0)  # decisive greedy paths, as make_tiny_llama's
    model.save_pretrained(path, safe_serialization=True)
    tokenizer.save_pretrained(path)
    if mtp:
        add_mtp_weights(path, seed=seed + 1)
    return path


def add_mtp_weights(path: str | Path, *, seed: int = 1) -> Path:
    """Append one seeded MTP module to the checkpoint at `path`, laid out as DeepSeek-V3's (and
    GLM-4.5's) checkpoints lay it out, and set `num_nextn_predict_layers: 1` in config.json.

    The module is `model.layers.{num_hidden_layers}.*` [DeepSeek-V3 README_WEIGHTS.md]: a full
    decoder block of the architecture (`self_attn.*`, `mlp.*` (MoE, in the checkpoint's
    per-expert layout), `input_layernorm`, `post_attention_layernorm`), `enorm`, `hnorm`,
    `eh_proj` [hidden, 2 x hidden], `shared_head.norm`, and copies of the shared `embed_tokens` and
    `shared_head.head` (= lm_head), as the released checkpoints carry them. The three norms get
    distinct seeded weights (not ones), so that a reader that swaps them computes other numbers.
    transformers' loader ignores these keys (_keys_to_ignore_on_load_unexpected)."""
    import json
    import tempfile

    import torch
    import transformers
    from safetensors.torch import load_file, save_file

    path = Path(path)
    config_dict = json.loads((path / "config.json").read_text())
    layers = config_dict["num_hidden_layers"]
    weights = path / "model.safetensors"
    if not weights.is_file():
        raise FileNotFoundError(f"{weights}: add_mtp_weights writes into a single-file checkpoint")
    config = transformers.AutoConfig.from_pretrained(path)
    config.num_hidden_layers = layers + 1
    prefix = f"model.layers.{layers}."
    with torch.random.fork_rng(devices=[]), tempfile.TemporaryDirectory() as scratch:
        torch.manual_seed(seed)
        # layer `layers` of a one-layer-deeper model, as the architecture's own save_pretrained writes it
        transformers.AutoModelForCausalLM.from_config(config).save_pretrained(scratch, safe_serialization=True)
        block = {k: v for k, v in load_file(str(Path(scratch) / "model.safetensors")).items() if k.startswith(prefix)}
        hidden = config.hidden_size
        extra = {name: 1.0 + 0.2 * torch.randn(hidden) for name in ("enorm", "hnorm", "shared_head.norm")}
        extra["eh_proj"] = torch.randn(hidden, 2 * hidden) / (2 * hidden) ** 0.5
    state = load_file(str(weights))
    state.update(block)
    state.update({f"{prefix}{name}.weight": tensor.contiguous() for name, tensor in extra.items()})
    state[f"{prefix}embed_tokens.weight"] = state["model.embed_tokens.weight"].clone()
    state[f"{prefix}shared_head.head.weight"] = state["lm_head.weight"].clone()
    save_file(state, str(weights), metadata={"format": "pt"})
    config_dict["num_nextn_predict_layers"] = 1
    (path / "config.json").write_text(json.dumps(config_dict, indent=2) + "\n")
    return path


# The Linears DeepSeek's checkpoints store in FP8 (inference/model.py: every `Linear`; its router
# `Gate`, head, embedding and norms stay BF16, the router's bias float32; in the MTP module eh_proj
# and shared_head too: trtspec.runtime.checkpoints.block_fp8 cites the sources).
_FP8_LINEAR = re.compile(r"^model\.layers\.\d+\.(self_attn|mlp)\.(.+\.)?(q_proj|q_a_proj|q_b_proj|kv_a_proj_with_mqa"
                         r"|kv_b_proj|k_proj|v_proj|o_proj|gate_proj|up_proj|down_proj)\.weight$")
E4M3_MAX = 448.0


def quantize_block_fp8(weight, block: tuple[int, int] = (128, 128)):
    """(float8_e4m3fn weight, float32 scale_inv [ceil(rows / b0), ceil(cols / b1)]) as DeepSeek
    quantizes: a short edge block zero-padded to the full block, scale = block amax / 448, the
    padding dropped after [DeepSeek-V3 README_WEIGHTS.md]."""
    import torch

    rows, cols = weight.shape
    grid = (-(-rows // block[0]), -(-cols // block[1]))
    padded = torch.zeros(grid[0] * block[0], grid[1] * block[1])
    padded[:rows, :cols] = weight.float()
    blocks = padded.view(grid[0], block[0], grid[1], block[1])
    scale = blocks.abs().amax(dim=(1, 3)).clamp(min=1e-12) / E4M3_MAX
    quantized = (blocks / scale[:, None, :, None]).clamp(-E4M3_MAX, E4M3_MAX).to(torch.float8_e4m3fn)
    return quantized.view(padded.shape)[:rows, :cols].contiguous(), scale.contiguous()


def write_block_fp8(source: str | Path, dest: str | Path, *, block: tuple[int, int] = (128, 128)) -> Path:
    """Copy the single-file checkpoint at `source` to `dest` stored as DeepSeek-V3/R1 are released:
    `quantization_config` {quant_method fp8, fmt e4m3, activation_scheme dynamic, weight_block_size},
    each of DeepSeek's Linears (_FP8_LINEAR, the MTP module's block too) in float8_e4m3fn beside
    its float32 `weight_scale_inv`, the rest BF16 (the router's bias float32), in two shards (the
    main layers; embeddings, head, final norm and the MTP module) with model.safetensors.index.json."""
    import json
    import shutil

    import torch
    from safetensors.torch import load_file, save_file

    source, dest = Path(source), Path(dest)
    shutil.copytree(source, dest, ignore=shutil.ignore_patterns("*.safetensors", "*.safetensors.index.json"))
    config = json.loads((source / "config.json").read_text())
    layers = config["num_hidden_layers"]
    shards: dict[str, dict[str, Any]] = {"model-00001-of-00002.safetensors": {}, "model-00002-of-00002.safetensors": {}}
    for key, tensor in load_file(str(source / "model.safetensors")).items():
        main = key.startswith("model.layers.") and int(key.split(".")[2]) < layers
        shard = shards["model-00001-of-00002.safetensors" if main else "model-00002-of-00002.safetensors"]
        if _FP8_LINEAR.match(key):
            shard[key], shard[f"{key}_scale_inv"] = quantize_block_fp8(tensor, block)
        else:
            shard[key] = tensor.float() if key.endswith("e_score_correction_bias") else tensor.to(torch.bfloat16)
    for name, tensors in shards.items():
        save_file(tensors, str(dest / name), metadata={"format": "pt"})
    weight_map = {key: name for name, tensors in shards.items() for key in tensors}
    (dest / "model.safetensors.index.json").write_text(json.dumps({"metadata": {}, "weight_map": weight_map}, indent=2))
    config["quantization_config"] = {"activation_scheme": "dynamic", "fmt": "e4m3", "quant_method": "fp8",
                                     "weight_block_size": list(block)}
    (dest / "config.json").write_text(json.dumps(config, indent=2) + "\n")
    return dest
