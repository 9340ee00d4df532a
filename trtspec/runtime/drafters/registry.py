"""A mode's drafter, built from the table in trtspec.modes (the row's `drafter` names a
`module:function` taking DrafterParts); the factories of the first three modes live here.

Contract: `make_drafter` returns the Drafter the mode's row names, or None for a mode without
one (`none`); an unknown mode is one IncompatibleArtifactError line. A factory reads only what
DrafterParts hands it: the loaded (and prepacked) target, the draft directory, the mode's own
options (popped from the engine options by checkpoints.engine_parts), and `load`, which loads and
prepacks another checkpoint as the target was.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from trtspec import modes
from trtspec.errors import IncompatibleArtifactError, ModelSourceError

# engine options that configure a drafter, not the Engine (EngineConfig): by mode
DRAFTER_OPTIONS = {"ngram": ("ngram_min", "ngram_max"), "lookahead": ("lookahead",), "layerskip": ("exit_layer",),
                   "medusa": ("medusa_choices",), "mtp": ("mtp_layers",), "suffix": ("suffix",),
                   "eagle3": ("head_dtype",)}


@dataclass
class DrafterParts:
    mode: str
    target: Any
    draft_dir: Path | str | None
    load: Callable[[Any], Any]           # checkpoint directory -> prepacked causal LM
    prepack: Callable[[Any], None]       # prepack another module's linear layers as the target's
    options: dict[str, Any] = field(default_factory=dict)

    def need_draft_dir(self) -> Path:
        if self.draft_dir is None or not Path(self.draft_dir).is_dir():
            raise ModelSourceError(f"mode {self.mode} needs a draft checkpoint directory (got {self.draft_dir})",
                                   fix="run `trtspec convert` to make one")
        return Path(self.draft_dir)


def make_drafter(parts: DrafterParts):
    """The drafter of `parts.mode` (see the module docstring)."""
    if parts.mode not in modes.MODES:
        raise IncompatibleArtifactError(f"unknown speculative mode {parts.mode!r}",
                                        fix=f"use one of {', '.join(modes.NAMES)}")
    where = modes.MODES[parts.mode].drafter
    if where is None:
        return None
    module, _, function = where.partition(":")
    return getattr(importlib.import_module(module), function)(parts)


def ngram(parts: DrafterParts):
    from trtspec.runtime.drafters.ngram import NgramDrafter

    return NgramDrafter(parts.options.get("ngram_min", 1), parts.options.get("ngram_max", 3))


def draft_target(parts: DrafterParts):
    from trtspec.runtime.drafters.draft_model import DraftModelDrafter

    return DraftModelDrafter(parts.load(parts.need_draft_dir()))


def eagle3(parts: DrafterParts):
    from trtspec.runtime.drafters.eagle3 import Eagle3Drafter

    drafter = Eagle3Drafter.from_dir(parts.need_draft_dir(), parts.target)
    # its forwards take 2-20 rows (catch-up, tree frontiers): SGEMM would repack per call
    head_dtype = parts.options.get("head_dtype") or "float32"
    if head_dtype == "float32":
        parts.prepack(drafter.head)
    elif head_dtype == "bfloat16":
        # The head's linear layers on the bfloat16 row kernel whatever the target runs: half the
        # bytes a draft position reads (docs/BENCHMARKS-log.md, "Where an EAGLE-3 draft step goes").
        # Its drafts may differ from the float32 head's; the target's verification keeps greedy exact.
        from trtspec.runtime.forward.linear_choice import ROWDOT_BF16
        from trtspec.runtime.forward.prepack import prepack_linears
        from trtspec.runtime.kernels import rowdot

        why = rowdot.bfloat16_unavailable()
        if why is not None:
            raise IncompatibleArtifactError(f"EAGLE-3 head_dtype bfloat16 needs the bfloat16 row kernel, which cannot "
                                            f"run here: {why}", fix="use head_dtype float32 on this machine")
        prepack_linears(drafter.head, (ROWDOT_BF16,))
    else:
        raise IncompatibleArtifactError(f"EAGLE-3 head_dtype {head_dtype!r} is not float32 or bfloat16",
                                        fix="use head_dtype float32 (the default) or bfloat16")
    return drafter
