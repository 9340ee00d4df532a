"""The backends as one table: a row per `build.backend`, naming what each stage uses for it.

A row says whether the backend targets a GPU release (then `build` reads the release's contract,
plans memory and refuses what does not fit), which class carries out `trtspec build`'s steps for
it (trtspec.builders.steps) and which function renders its model repository (trtspec.repository).
Names are "module:attribute", resolved only when a stage runs, so this module imports nothing
heavy. What each backend does with each mode is the mode table's business (trtspec.modes).

Adding a backend: a steps class in builders/steps.py, a renderer in repository/, one row here
and its column in trtspec.modes; the spec's `build.backend` choices read this table.
"""

from __future__ import annotations

import importlib
from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class BackendRow:
    name: str
    summary: str
    gpu: bool        # targets a TensorRT-LLM release in a GPU container (contract, memory plan)
    steps: str       # "module:class": build()'s steps for this backend (builders/steps.py)
    renderer: str    # "module:function": the model repository (render(engine, spec, path, staging, engine_dir))


_S, _R = "trtspec.builders.steps", "trtspec.repository"
BACKENDS: dict[str, BackendRow] = {row.name: row for row in (
    BackendRow("cpu", "the embedded cpu engine behind trtspec's Triton Python model", False,
               f"{_S}:CpuSteps", f"{_R}.cpu:render"),
    BackendRow("trtllm", "TensorRT-LLM's LLM API (PyTorch backend) behind the stock llmapi model", True,
               f"{_S}:LlmApiSteps", f"{_R}.trtllm:render"),
    BackendRow("trtllm-engine", "TensorRT engines from trtllm-build behind the stock ensemble", True,
               f"{_S}:EngineSteps", f"{_R}.trtllm_engine:render"),
)}

NAMES: tuple[str, ...] = tuple(BACKENDS)
GPU: tuple[str, ...] = tuple(name for name, row in BACKENDS.items() if row.gpu)


def row(backend: str) -> BackendRow:
    return BACKENDS[backend]


def resolve(name: str) -> Any:
    """The attribute a row names ("module:attribute")."""
    module, attribute = name.split(":")
    return getattr(importlib.import_module(module), attribute)
