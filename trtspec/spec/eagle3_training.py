"""`speculative.eagle3`: how `trtspec convert --mode eagle3` makes its data and trains the head."""

from __future__ import annotations

from typing import Literal

from pydantic import Field

from trtspec.spec.section import Section


class Eagle3Training(Section):
    head: str | None = None
    """An existing EAGLE-3 head to use instead of training one: a directory or a Hugging Face hub
    id (HF_HOME / HF_HUB_OFFLINE honoured), in any layout (the EAGLE authors', SpecForge's, ModelOpt's
    before and after 0.43, speculators'). Checked against the target, written as checkpoints/eagle3.
    With data or prompts set too, the head is fine-tuned on them instead."""
    head_dtype: Literal["float32", "bfloat16"] = "float32"
    """cpu backend: the served head's linear layers in float32, or on the bfloat16 row kernel (half the
    bytes a draft position reads; needs AVX512_BF16, refused in one line where it cannot run). Drafts
    may differ from the float32 head's; verification keeps greedy output the target's. A convert-made
    SmolLM2 head kept its acceptance length in bfloat16 (docs/BENCHMARKS-log.md, "The head's attention
    layout without per-row tensors"). GPU backends ignore it: TensorRT-LLM runs the head in the
    checkpoint's dtype."""
    head_layer_convention: Literal["auto", "output", "input"] = "auto"
    """How the head's layer ids count: auto (from its layout), output (output of decoder layer i:
    ModelOpt, SpecForge, TensorRT-LLM) or input (input of layer i, HF hidden_states[i]: EAGLE code,
    speculators, vLLM). Set it for a head whose converter copied the ids across conventions."""
    prompts: str | None = None
    """JSONL prompt file ({"prompt": ...} per line) the target answers to make training data;
    empty uses the set shipped in the package (or `data` when set)."""
    data: str | None = None
    """Training conversations: a .jsonl/.json file or a directory of them, in ShareGPT
    ({"conversations": [{"from", "value"}]}), OpenAI ({"messages": [{"role", "content"}]}) or
    {"prompt": ...} form, multi-turn included. The target regenerates every assistant turn."""
    generate_url: str | None = None
    """gRPC host:port of a running trtspec/Triton server serving this target: it generates the
    answers instead of the in-process target (on GPUs the fast engine makes the data)."""
    generate_concurrency: int = Field(8, ge=1, le=1024)
    """Requests in flight per process when generating through generate_url."""
    generate_batch_size: int = Field(64, ge=1, le=4096)
    """In process: answers in flight in trtspec's cpu engine (a target on the CPU in float32), else
    conversations per batched transformers generate() call."""
    device: Literal["auto", "cpu", "cuda"] = "auto"
    """Where the target's features and the head's training run; auto picks CUDA when torch sees
    a GPU (under torchrun each process takes cuda:<LOCAL_RANK>)."""
    micro_batch_size: int | None = Field(None, ge=1, le=4096)
    """Rows per forward pass in one process; batch_size (the global batch over all processes) is
    reached by gradient accumulation. Empty: each process's whole share in one pass."""
    num_samples: int = Field(400, ge=1, le=1_000_000)
    """Self-distilled answers to generate from the prompts."""
    answer_tokens: int = Field(128, ge=8, le=8192)
    """New tokens the target generates per training answer."""
    max_steps: int = Field(2000, ge=1)
    """Upper bound on optimizer steps."""
    max_minutes: float = Field(15.0, gt=0, le=10_000)
    """Wall-clock budget for the whole EAGLE-3 stage (answers, features, training, export and
    acceptance report): convert times the first answers, prints its plan in one line, makes fewer
    than num_samples answers where they would take over half of it, and trains for what is left
    (training also stops at max_steps)."""
    learning_rate: float = Field(1e-3, gt=0, lt=1)
    """Peak learning rate."""
    batch_size: int = Field(8, ge=1, le=4096)
    """Sequences per optimizer step, over all processes (kept when their number changes)."""
    seq_len: int = Field(256, ge=16, le=32768)
    """Training sequence length (padded)."""
    draft_vocab_size: int | None = Field(None, ge=16)
    """Reduced draft vocabulary: the most frequent tokens of the target's answers, with a d2t map.
    Empty: the fewest that cover 99% of the answer tokens, in multiples of 256, at least 4096
    (as EAGLE-3 keeps 32 k of Llama-3's 128 k); the target's vocabulary size keeps all of it."""
    checkpoint_every: int = Field(100, ge=1)
    """Save a resumable checkpoint every N steps."""
    seed: int = 0
    """Seed for data order and initialisation."""
    train_dtype: Literal["auto", "bfloat16", "float32"] = "auto"
    """Autocast dtype of a training step (weights and optimizer stay float32). auto: bfloat16 on
    a GPU that supports it and where the CPU has native bfloat16 units (AVX512-BF16, AMX), else
    float32."""
