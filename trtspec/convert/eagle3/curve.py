"""Acceptance against training time: evaluate every weight snapshot of the last EAGLE-3 run.

`train` saves `snapshots/step-NNNNNN.pt` (head weights, step, seconds) every
`checkpoint_every` steps. Each snapshot is exported with ModelOpt exactly like the final head
and measured with the same acceptance report, so the curve and the final figure are comparable.
"""

from __future__ import annotations

import json
import tempfile
from pathlib import Path
from typing import Any

from trtspec import artifacts
from trtspec.convert.eagle3 import export, train
from trtspec.convert.progress import Reporter
from trtspec.convert.target import load_causal_lm


def acceptance_curve(spec, layout, target_dir: Path, prompts: list[str], *, new_tokens: int,
                     report: Reporter | None = None, every: int = 1) -> list[dict[str, Any]]:
    """[{step, seconds, mean_acceptance_length, acceptance_per_position}] for every `every`-th snapshot."""
    import torch

    from trtspec.convert.eagle3.stage import measure_acceptance

    work = layout.checkpoint(".eagle3-work")
    snapshots = sorted((work / "snapshots").glob("step-*.pt"))[::every]
    if not snapshots:
        return []
    target_config = json.loads((target_dir / "config.json").read_text())
    model, tokenizer = load_causal_lm(target_dir, dtype=spec.model.dtype)
    first = torch.load(snapshots[0], map_location="cpu", weights_only=False)["head"]
    draft_vocab = first["lm_head.weight"].shape[0] if "lm_head.weight" in first else None
    train.convert_eagle3(model, target_config, draft_vocab_size=draft_vocab,
                                kept_ids=None, d2t=first.get("d2t"))
    curve = []
    for path in snapshots:
        snapshot = torch.load(path, map_location="cpu", weights_only=False)
        model.eagle_module.load_state_dict(snapshot["head"], strict=False)
        with tempfile.TemporaryDirectory(dir=work) as export_dir:
            export.export_eagle3(model, Path(export_dir))
            acceptance = measure_acceptance(model, tokenizer, target_dir, Path(export_dir), prompts,
                                            max_draft_len=spec.speculative.max_draft_len, new_tokens=new_tokens,
                                            report=report, timed=False)
        curve.append({"step": snapshot["step"], "seconds": round(snapshot["seconds"], 1),
                      "mean_acceptance_length": acceptance["mean_acceptance_length"],
                      "acceptance_per_position": acceptance["acceptance_per_position"], "method": acceptance["method"]})
    layout.reports.mkdir(parents=True, exist_ok=True)
    artifacts.write_json(layout.report_dir("convert-eagle3-curve.json"), curve)
    return curve
