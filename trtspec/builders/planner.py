"""GPU memory planner: will this spec fit, and if not, what would?

Pure arithmetic over a model's config.json shape (layers, hidden size, heads, KV heads, head
size, vocabulary), the dtypes (FP8 weights, asked for or stored so: a block-FP8 checkpoint counts
1 byte a weight plus its float32 scales; FP8 KV cache), the engine limits (max_batch_size,
max_seq_len, max_draft_len, max_num_tokens, tokens_per_block), tp/pp and the GPU. Per GPU:

    usable   = device memory - runtime reserve (CUDA context, workspaces, CUDA graphs)
    free     = usable - weights - activations
    kv budget= free * free_gpu_memory_fraction        (how TensorRT-LLM sizes its paged KV pool)
    needed   = max_batch_size * blocks per full-length sequence * block bytes (target + draft)
    headroom = kv budget - needed                      (negative: the full batch does not fit)
    fits     = free > 0 and needed <= kv budget

A full-length sequence is max_seq_len (+ max_draft_len for speculative engines, as
tensorrt_llm/builder.py adds) tokens rounded up to whole KV blocks. Activations are an estimate of
one layer's live buffers for max_num_tokens tokens plus FP32 logits for every verified position;
TensorRT reuses activation memory across layers, so one layer's worth is the right order.
Figures are bytes; the table `trtspec plan` prints shows them in GiB (2**30 bytes), the unit
nvidia-smi's MiB totals are in. Nothing here touches a GPU or imports torch.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass, field
from typing import Any

from trtspec.builders.gpus import GIB, Gpu, get_gpu
from trtspec.errors import TrtSpecError

ACT_BYTES = 2          # bf16/fp16 activations on the GPU backends
LOGITS_BYTES = 4       # TensorRT-LLM keeps generation logits in float32
TP_CANDIDATES = (1, 2, 4, 8)


class PlanError(TrtSpecError):
    """The spec's engines do not fit on the planned GPUs; the message carries the numbers and a fix."""


@dataclass(frozen=True)
class ModelShape:
    """The parts of a Llama-style config.json that decide memory."""

    num_layers: int
    hidden_size: int
    intermediate_size: int
    vocab_size: int
    num_heads: int
    num_kv_heads: int
    head_dim: int
    tie_word_embeddings: bool = False
    has_embedding: bool = True      # an EAGLE-3 head borrows the target's embedding
    attn_input_mult: int = 1        # an EAGLE-3 layer attends over [embedding, hidden] (2x hidden)
    extra_params: int = 0           # e.g. the EAGLE-3 fc that fuses three target hidden states
    # Mixture of experts (DeepSeek-V3/R1, GLM-4.5): `moe_layers` of the layers (the last ones) hold
    # `experts` routed and `shared_experts` always-on experts of `moe_intermediate_size` each, and a router.
    moe_layers: int = 0
    experts: int = 0
    shared_experts: int = 0
    moe_intermediate_size: int = 0
    experts_per_token: int = 0      # routed experts each token runs
    # Multi-head latent attention (DeepSeek-V3/R1): (q_lora_rank, kv_lora_rank, qk_nope_head_dim,
    # qk_rope_head_dim, v_head_dim); the cache holds one latent of kv_lora_rank + qk_rope_head_dim per
    # token and layer (TensorRT-LLM's MLA cache), whole on every tensor-parallel rank.
    mla: tuple[int, int, int, int, int] | None = None
    # The checkpoint itself stores its layers' Linears in block FP8 (DeepSeek-V3/R1 as released:
    # quantization_config quant_method fp8, weight_block_size [128, 128]): 1 byte a weight and one
    # float32 scale a block, whether or not the spec asks for FP8 (TensorRT-LLM loads them as stored)
    fp8_block: tuple[int, int] | None = None

    @classmethod
    def from_config(cls, config: dict[str, Any], extra_layers: int = 0) -> ModelShape:
        """`extra_layers`: decoder layers loaded beyond num_hidden_layers (MTP modules, each one
        more MoE layer plus its eh_proj and norms)."""
        heads = config["num_attention_heads"]
        hidden = config["hidden_size"]
        layers = config["num_hidden_layers"] + extra_layers
        experts = int(config.get("n_routed_experts") or config.get("num_experts") or 0)
        moe = {}
        if experts:
            dense = int(config.get("first_k_dense_replace") or 0)
            moe = {"moe_layers": layers - dense, "experts": experts,
                   "shared_experts": int(config.get("n_shared_experts") or 0),
                   "moe_intermediate_size": int(config["moe_intermediate_size"]),
                   "experts_per_token": int(config.get("num_experts_per_tok") or 0)}
        mla = None
        if config.get("kv_lora_rank"):
            mla = (int(config.get("q_lora_rank") or 0), int(config["kv_lora_rank"]), int(config["qk_nope_head_dim"]),
                   int(config["qk_rope_head_dim"]), int(config["v_head_dim"]))
        return cls(num_layers=layers, hidden_size=hidden,
                   intermediate_size=config["intermediate_size"], vocab_size=config["vocab_size"],
                   num_heads=heads, num_kv_heads=config.get("num_key_value_heads") or heads,
                   head_dim=config.get("head_dim") or hidden // heads,
                   tie_word_embeddings=bool(config.get("tie_word_embeddings", False)),
                   extra_params=extra_layers * 2 * hidden * hidden, mla=mla, fp8_block=checkpoint_fp8_block(config),
                   **moe)

    @classmethod
    def eagle3_head(cls, target: ModelShape, head_config: dict[str, Any] | None = None) -> ModelShape:
        """An EAGLE-3 head: one decoder layer over 2x hidden input, fc(3h -> h), its own lm_head."""
        cfg = head_config or {}
        hidden = target.hidden_size
        return cls(num_layers=cfg.get("num_hidden_layers", 1), hidden_size=hidden,
                   intermediate_size=cfg.get("intermediate_size", target.intermediate_size),
                   vocab_size=cfg.get("draft_vocab_size") or cfg.get("vocab_size") or target.vocab_size,
                   num_heads=cfg.get("num_attention_heads", target.num_heads),
                   num_kv_heads=cfg.get("num_key_value_heads", target.num_kv_heads),
                   head_dim=cfg.get("head_dim", target.head_dim), has_embedding=False,
                   attn_input_mult=2, extra_params=3 * hidden * hidden)

    @property
    def layer_linear_params(self) -> int:
        """Weights of the matmuls in all decoder layers (what FP8 quantizes)."""
        h, d, heads = self.hidden_size, self.head_dim, self.num_heads
        if self.mla is not None:
            q_lora, kv_lora, nope, rope, v = self.mla
            query = h * q_lora + q_lora * heads * (nope + rope) if q_lora else h * heads * (nope + rope)
            attn = query + h * (kv_lora + rope) + kv_lora * heads * (nope + v) + heads * v * h
        else:
            attn = self.attn_input_mult * h * d * (heads + 2 * self.num_kv_heads) + heads * d * h
        dense_mlp = 3 * h * self.intermediate_size
        moe_mlp = 3 * h * self.moe_intermediate_size * (self.experts + self.shared_experts) + h * self.experts
        dense_layers = self.num_layers - self.moe_layers
        return self.num_layers * attn + dense_layers * dense_mlp + self.moe_layers * moe_mlp + self.extra_params

    @property
    def kv_width(self) -> int:
        """Cached elements per token and layer, before tensor parallelism: keys and values of
        every KV head, or MLA's one latent."""
        if self.mla is not None:
            return self.mla[1] + self.mla[3]
        return 2 * self.num_kv_heads * self.head_dim

    @property
    def embedding_params(self) -> int:
        return self.vocab_size * self.hidden_size if self.has_embedding else 0

    @property
    def lm_head_params(self) -> int:
        return 0 if (self.tie_word_embeddings and self.has_embedding) else self.vocab_size * self.hidden_size

    @property
    def norm_params(self) -> int:
        return (2 * self.num_layers + 1 + (0 if self.has_embedding else 1)) * self.hidden_size

    @property
    def params(self) -> int:
        return self.layer_linear_params + self.embedding_params + self.lm_head_params + self.norm_params


def checkpoint_fp8_block(config: dict[str, Any]) -> tuple[int, int] | None:
    """The weight block of a block-FP8 config.json (quant_method fp8; transformers' default
    [128, 128] where weight_block_size is absent), else None."""
    quant = config.get("quantization_config") or {}
    if quant.get("quant_method") != "fp8":
        return None
    block = quant.get("weight_block_size") or (128, 128)
    return int(block[0]), int(block[1])


@dataclass(frozen=True)
class PlanSettings:
    gpu: str = "h100"
    tp_size: int = 1
    pp_size: int = 1
    max_batch_size: int = 8
    max_seq_len: int = 2048
    max_num_tokens: int = 8192
    max_draft_len: int = 0           # 0 for mode none
    tokens_per_block: int = 32
    fp8_weights: bool = False
    fp8_kv_cache: bool = False
    weight_bytes: int = 2            # bf16/fp16 weights when not FP8
    free_gpu_memory_fraction: float = 0.9

    @classmethod
    def from_spec(cls, spec: Any) -> PlanSettings:
        from trtspec.builders.engine_json import engine_max_draft_len

        b, q = spec.build, spec.quantization
        return cls(gpu=b.gpu, tp_size=b.tp_size, pp_size=b.pp_size, max_batch_size=b.max_batch_size,
                   max_seq_len=b.max_seq_len, max_num_tokens=b.max_num_tokens,
                   max_draft_len=engine_max_draft_len(spec), tokens_per_block=b.tokens_per_block,
                   fp8_weights=q.fp8, fp8_kv_cache=q.fp8_kv_cache,
                   free_gpu_memory_fraction=b.free_gpu_memory_fraction)


@dataclass
class ComponentPlan:
    """One model on the GPU: the target, or its draft / EAGLE-3 head."""

    role: str
    params: int
    weight_bytes: int               # per GPU
    kv_bytes_per_token: int         # per GPU
    kv_bytes_per_sequence: int      # per GPU, one full-length sequence in whole blocks
    activation_bytes: int           # per GPU


@dataclass
class Plan:
    settings: PlanSettings
    gpu_name: str
    usable_bytes: int
    reserved_bytes: int
    components: list[ComponentPlan] = field(default_factory=list)
    blocks_per_sequence: int = 0
    weights_bytes: int = 0
    activation_bytes: int = 0
    kv_budget_bytes: int = 0
    kv_required_bytes: int = 0
    headroom_bytes: int = 0
    full_length_sequences: int = 0
    fits: bool = False
    problem: str | None = None
    suggestion: str | None = None

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    def rows(self) -> list[tuple[str, str]]:
        """(item, per-GPU figure) rows for the table `trtspec plan` prints."""
        s = self.settings
        rows = [("GPU", f"{s.tp_size * s.pp_size} x {self.gpu_name}, {_gib(self.usable_bytes + self.reserved_bytes)} "
                        f"each (tp {s.tp_size}, pp {s.pp_size})")]
        for c in self.components:
            rows.append((f"{c.role} weights ({c.params / 1e9:.2f} B params)", _gib(c.weight_bytes)))
        rows += [("activations + logits (estimate)", _gib(self.activation_bytes)),
                 ("runtime reserve (CUDA context, workspaces)", _gib(self.reserved_bytes))]
        for c in self.components:
            rows.append((f"{c.role} KV cache: {self.blocks_per_sequence} blocks x {s.tokens_per_block} tokens "
                         f"per sequence, x {s.max_batch_size}",
                         _gib(c.kv_bytes_per_sequence * s.max_batch_size)))
        rows += [(f"KV budget ({s.free_gpu_memory_fraction:.0%} of free memory)", _gib(self.kv_budget_bytes)),
                 ("KV budget left after a full batch", _gib(self.headroom_bytes)),
                 ("full-length sequences that fit", str(self.full_length_sequences)),
                 ("verdict", "fits" if self.fits else f"does not fit: {self.problem}")]
        return rows


def _gib(value: int) -> str:
    return f"{value / GIB:,.2f} GiB"



def _component(role: str, shape: ModelShape, s: PlanSettings, blocks: int, quantized: bool) -> ComponentPlan:
    world_layers = s.pp_size
    quantized = quantized or shape.fp8_block is not None
    linear_bytes = 1 if quantized else s.weight_bytes
    # a block-FP8 checkpoint's scales: one float32 per block of its Linears (about 1/4096 of their bytes)
    scales = math.ceil(shape.layer_linear_params / math.prod(shape.fp8_block)) * 4 if shape.fp8_block else 0
    # Embedding and lm_head stay in 16 bits under ModelOpt FP8 (lm_head is excluded by default).
    vocab_params = shape.embedding_params + shape.lm_head_params
    if s.pp_size > 1:  # the embedding lives on the first stage, the lm_head on the last
        vocab_params = max(shape.embedding_params, shape.lm_head_params)
    weights = ((shape.layer_linear_params * linear_bytes + scales) // (s.tp_size * s.pp_size)
               + vocab_params * s.weight_bytes // s.tp_size + shape.norm_params * s.weight_bytes)
    layers_per_gpu = math.ceil(shape.num_layers / world_layers)
    if shape.mla is not None:  # the latent is not split by heads: every rank caches all of it
        width = shape.kv_width
    else:
        width = 2 * max(1, math.ceil(shape.num_kv_heads / s.tp_size)) * shape.head_dim
    kv_token = layers_per_gpu * width * (1 if s.fp8_kv_cache else 2)
    tokens = max(s.max_num_tokens, s.max_batch_size * (s.max_draft_len + 1))
    h = shape.hidden_size
    live_mlp = (shape.moe_intermediate_size * (shape.experts_per_token + shape.shared_experts) if shape.experts
                else shape.intermediate_size)
    per_token = (4 * h + (shape.num_heads + 2 * shape.num_kv_heads) * shape.head_dim // s.tp_size
                 + 2 * live_mlp // s.tp_size)
    logits = s.max_batch_size * (s.max_draft_len + 1) * shape.vocab_size // s.tp_size * LOGITS_BYTES
    return ComponentPlan(role=role, params=shape.params, weight_bytes=weights, kv_bytes_per_token=kv_token,
                         kv_bytes_per_sequence=kv_token * blocks * s.tokens_per_block,
                         activation_bytes=tokens * per_token * ACT_BYTES + logits)


def plan_memory(target: ModelShape, settings: PlanSettings, draft: ModelShape | None = None,
                draft_role: str = "draft", gpu: Gpu | None = None) -> Plan:
    """The per-GPU memory plan. `draft` is a draft model or an EAGLE-3 head (None for ngram/none)."""
    s = settings
    gpu = gpu or get_gpu(s.gpu)
    extra = s.max_draft_len  # speculative engines hold max_draft_len more tokens per sequence
    blocks = math.ceil((s.max_seq_len + extra) / s.tokens_per_block)
    components = [_component("target", target, s, blocks, s.fp8_weights)]
    if draft is not None:
        components.append(_component(draft_role, draft, s, blocks, s.fp8_weights))
    plan = Plan(settings=s, gpu_name=gpu.name, usable_bytes=gpu.usable_bytes, reserved_bytes=gpu.reserved_bytes,
                components=components, blocks_per_sequence=blocks)
    plan.weights_bytes = sum(c.weight_bytes for c in components)
    plan.activation_bytes = sum(c.activation_bytes for c in components)
    free = gpu.usable_bytes - plan.weights_bytes - plan.activation_bytes
    if target.num_heads % s.tp_size:
        raise PlanError(f"build.tp_size {s.tp_size} does not divide the target's {target.num_heads} attention heads",
                        fix="use a tp_size that divides it (1, 2, 4 or 8 for Llama models)")
    per_sequence = sum(c.kv_bytes_per_sequence for c in components)
    plan.kv_budget_bytes = int(max(free, 0) * s.free_gpu_memory_fraction)
    plan.kv_required_bytes = per_sequence * s.max_batch_size
    plan.headroom_bytes = plan.kv_budget_bytes - plan.kv_required_bytes
    plan.full_length_sequences = plan.kv_budget_bytes // per_sequence if per_sequence else 0
    if free <= 0:
        plan.problem = (f"weights {_gib(plan.weights_bytes)} + activations {_gib(plan.activation_bytes)} exceed the "
                        f"{_gib(gpu.usable_bytes)} usable per GPU")
    elif plan.kv_required_bytes > plan.kv_budget_bytes:
        plan.problem = (f"KV cache for {s.max_batch_size} full-length sequences of {s.max_seq_len} tokens needs "
                        f"{_gib(plan.kv_required_bytes)}, the budget is {_gib(plan.kv_budget_bytes)} "
                        f"({plan.full_length_sequences} fit)")
    plan.fits = plan.problem is None
    if not plan.fits:
        plan.suggestion = _suggest(target, s, draft, draft_role, gpu, plan)
    return plan


def _suggest(target: ModelShape, s: PlanSettings, draft: ModelShape | None, draft_role: str, gpu: Gpu,
             plan: Plan) -> str:
    from dataclasses import replace

    if plan.full_length_sequences >= 1:
        return f"set build.max_batch_size: {plan.full_length_sequences} (the largest that fits)"
    for tp in TP_CANDIDATES:
        if tp <= s.tp_size or target.num_heads % tp:
            continue
        if plan_memory(target, replace(s, tp_size=tp), draft, draft_role, gpu).fits:
            return f"set build.tp_size: {tp} (the smallest tensor-parallel size that fits)"
    if not s.fp8_weights and target.fp8_block is None:
        return "quantize with --fp8, shorten build.max_seq_len, or plan for a larger GPU (build.gpu: h200)"
    return "shorten build.max_seq_len or plan for more or larger GPUs"


def require_fit(plan: Plan) -> None:
    """Raise PlanError with the numbers and the suggestion when the plan does not fit."""
    if not plan.fits:
        s = plan.settings
        raise PlanError(f"the plan does not fit on {s.tp_size * s.pp_size} x {plan.gpu_name}: {plan.problem}",
                        fix=plan.suggestion)
