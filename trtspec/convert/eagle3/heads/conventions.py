"""Which target layers a head reads, in the two conventions tools count them in.

  OUTPUT ("output of decoder layer i", 0-based): ModelOpt (forward hooks), SpecForge, SGLang's
         configs, TensorRT-LLM `eagle3_layers_to_capture`. Default {1, N//2 - 1, N - 4}.
  INPUT  ("input of decoder layer i" = HF `hidden_states[i]`): the EAGLE authors' code (hard-coded),
         speculators (top-level `eagle_aux_hidden_state_layer_ids`), vLLM. Default (2, N//2, N - 3).

The two defaults name the same tensors: INPUT k is OUTPUT k - 1. trtspec stores OUTPUT ids (the
canonical head's `eagle_config.eagle_aux_hidden_state_layer_ids`, what the cpu engine and
TensorRT-LLM read) and converts at every boundary; INPUT 0 (the embeddings) has no OUTPUT id and
is refused. Sources: ../shared/reference/heads-and-methods.md section 1f.
"""

from __future__ import annotations

from typing import Literal

Convention = Literal["output", "input"]
OUTPUT: Convention = "output"
INPUT: Convention = "input"

DESCRIBE = {OUTPUT: "output of decoder layer i (ModelOpt, SpecForge, TensorRT-LLM eagle3_layers_to_capture)",
            INPUT: "input of decoder layer i = HF hidden_states[i] (EAGLE code, speculators, vLLM)"}


def default_ids(num_layers: int, convention: Convention) -> list[int]:
    """The default three layers of each convention for a target of `num_layers` layers."""
    output = [1, num_layers // 2 - 1, num_layers - 4]
    return output if convention == OUTPUT else from_output(output, INPUT)


def to_output(ids: list[int], convention: Convention) -> list[int]:
    """Ids counted in `convention` as OUTPUT ids (the canonical ones)."""
    return [int(i) for i in ids] if convention == OUTPUT else [int(i) - 1 for i in ids]


def from_output(ids: list[int], convention: Convention) -> list[int]:
    """Canonical OUTPUT ids counted in `convention`."""
    return [int(i) for i in ids] if convention == OUTPUT else [int(i) + 1 for i in ids]
