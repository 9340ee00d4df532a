"""Draft-target pairing: compatibility checks before anything else, then the draft checkpoint.

A draft model proposes token ids that the target verifies, so both must speak the same token
space. Checked, in order, each refused with the mismatch named:
  1. the draft is smaller than the target (parameter count from the safetensors headers);
  2. `vocab_size` in both config.json files (the embedding rows, not the tokenizer's length:
     TensorRT-LLM PR #3615, Llama-3 1B/8B with tokenizer 128000 vs model 128256);
  3. identical token ids on the probe texts below;
  4. identical special tokens (bos, eos, unk, pad: text and id).
"""

from __future__ import annotations

import json
import struct
from pathlib import Path
from typing import Any

from trtspec.errors import IncompatibleArtifactError

PROBE_TEXTS = (
    "The quick brown fox jumps over the lazy dog.",
    "def fib(n):\n    return n if n < 2 else fib(n - 1) + fib(n - 2)\n",
    "Prices rose 3.5% in 2024; see https://example.com/report?id=42 for details.",
    "Ünïcödé, emoji 🙂, 日本語 and  double  spaces\ttabs",
    "What is the capital of France? The capital of France is Paris.",
)
SPECIAL_TOKENS = ("bos_token", "eos_token", "unk_token", "pad_token")


def parameter_count(checkpoint: Path) -> int:
    """Number of parameters in a checkpoint's safetensors files, read from their headers only."""
    total = 0
    for path in sorted(Path(checkpoint).glob("*.safetensors")):
        with open(path, "rb") as handle:
            header = json.loads(handle.read(struct.unpack("<Q", handle.read(8))[0]))
        for name, entry in header.items():
            if name != "__metadata__":
                count = 1
                for dim in entry["shape"]:
                    count *= dim
                total += count
    return total


def check_pair(target_dir: Path, draft_dir: Path) -> dict[str, Any]:
    """Raise IncompatibleArtifactError naming the first mismatch; return what was compared."""
    from transformers import AutoTokenizer

    target_params, draft_params = parameter_count(target_dir), parameter_count(draft_dir)
    if draft_params >= target_params:
        raise IncompatibleArtifactError(
            f"draft {draft_dir} has {draft_params:,} parameters, not fewer than the target's {target_params:,}",
            fix="use a smaller draft model (same tokenizer) or speculative.mode: eagle3")
    target_vocab = json.loads((Path(target_dir) / "config.json").read_text()).get("vocab_size")
    draft_vocab = json.loads((Path(draft_dir) / "config.json").read_text()).get("vocab_size")
    if target_vocab != draft_vocab:
        raise IncompatibleArtifactError(
            f"vocab_size mismatch in config.json: target {target_vocab}, draft {draft_vocab}",
            fix="pick a draft from the same model family with the same (padded) vocabulary")
    target_tok, draft_tok = AutoTokenizer.from_pretrained(target_dir), AutoTokenizer.from_pretrained(draft_dir)
    for text in PROBE_TEXTS:
        target_ids, draft_ids = target_tok(text)["input_ids"], draft_tok(text)["input_ids"]
        if target_ids != draft_ids:
            at = next((i for i, (a, b) in enumerate(zip(target_ids, draft_ids, strict=False)) if a != b),
                      min(len(target_ids), len(draft_ids)))
            raise IncompatibleArtifactError(
                f"token ids differ on probe text {text[:30]!r} at position {at} "
                f"(target {target_ids[at:at + 3]}, draft {draft_ids[at:at + 3]})",
                fix="draft and target must share one tokenizer")
    for name in SPECIAL_TOKENS:
        target_special = (getattr(target_tok, name), getattr(target_tok, f"{name}_id"))
        draft_special = (getattr(draft_tok, name), getattr(draft_tok, f"{name}_id"))
        if target_special != draft_special:
            raise IncompatibleArtifactError(
                f"special token {name} differs: target {target_special}, draft {draft_special}",
                fix="draft and target must share one tokenizer and its special tokens")
    return {"target_parameters": target_params, "draft_parameters": draft_params, "vocab_size": target_vocab,
            "probe_texts": len(PROBE_TEXTS), "special_tokens": list(SPECIAL_TOKENS)}
