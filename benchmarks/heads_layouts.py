"""Acceptance of one EAGLE-3 head through every layout and every export (cpu engine, greedy).

  TRTSPEC_CPU_LINEAR=rowdot OMP_NUM_THREADS=1 .venv/bin/python -m benchmarks heads-layouts \\
      RUN_DIR OUT_DIR [PROMPTS [TOKENS]]

RUN_DIR is where `trtspec convert --mode eagle3` ran (work/checkpoints/{target,eagle3}). The head is
written as each tool writes it (tests/convert/heads/tool_layouts.py), imported, exported in each
format and imported again, then measured on the first PROMPTS (8) of the packaged dev prompts
for TOKENS (32) greedy tokens, chains of 4; then the same float32 tensors under each first-layer
function. One JSON line per head; figures in docs/CONVERT.md ("EAGLE-3 heads you already have").
"""

from __future__ import annotations

import json
import shutil
import sys
from pathlib import Path

from benchmarks.common import dev_rows


def main() -> None:
    args = sys.argv[1:]
    if len(args) < 2 or args[0] in ("-h", "--help"):
        print(__doc__)
        return
    measure_head(Path(args[0]), Path(args[1]), int(args[2]) if len(args) > 2 else 8, int(args[3]) if len(args) > 3 else 32)


def measure_head(run: Path, out: Path, prompts_count: int, tokens: int) -> None:
    import torch
    from safetensors.torch import load_file

    from tests.convert.heads import tool_layouts
    from trtspec.convert.eagle3.heads.export import export_head
    from trtspec.convert.eagle3.heads.stage import write_imported
    from trtspec.convert.reports import runtime_acceptance

    torch.set_num_threads(1)
    target, head = run / "work/checkpoints/target", run / "work/checkpoints/eagle3"
    prompts = [row["prompt"] for row in dev_rows(limit=prompts_count)]
    shutil.rmtree(out, ignore_errors=True)
    out.mkdir(parents=True)

    def measure(label: str, directory: Path) -> None:
        acc = runtime_acceptance(target, directory, prompts, max_draft_len=4, new_tokens=tokens, timed=False)
        print(json.dumps({"head": label, "mean_acceptance_length": acc["mean_acceptance_length"],
                          "per_position": acc["acceptance_per_position"], "steps": acc["steps"]}), flush=True)

    def imported(name: str, source: Path) -> tuple[Path, dict]:
        directory = out / name
        directory.mkdir()
        return directory, write_imported(directory, str(source), target, max_seq_len=2048)

    ids = json.loads((head / "config.json").read_text())["eagle_config"]["eagle_aux_hidden_state_layer_ids"]
    embed = load_file(str(target / "model.safetensors"))["model.embed_tokens.weight"]
    written = {
        "modelopt": head,
        "modelopt-0.42": tool_layouts.write_modelopt_042(head, out / "tool-modelopt-0.42"),
        "eagle": tool_layouts.write_eagle_authors(head, out / "tool-eagle"),
        "specforge": tool_layouts.write_specforge(head, out / "tool-specforge", embed),
        "speculators": tool_layouts.write_speculators(head, out / "tool-speculators", norm_before_residual=True,
                                                      layer_ids=[i + 1 for i in ids]),
    }
    measure("as convert wrote it", head)
    target_config = json.loads((target / "config.json").read_text())
    for name, path in written.items():
        directory, report = imported(f"import-{name}", path)
        measure(f"written as {name} writes it, imported (forward {report['forward']})", directory)
        if name != "modelopt":
            continue
        for fmt in ("eagle", "modelopt", "speculators"):
            exported = out / f"export-{fmt}"
            exported.mkdir()
            export_head(directory, exported, fmt, target_config=target_config, verifier=str(target))
            again, _ = imported(f"reimport-{fmt}", exported)
            measure(f"imported, export-head {fmt}, imported again", again)
    for forward in ("eagle", "norm_before_residual"):  # the same float32 tensors, another function
        directory = out / f"function-{forward}"
        shutil.copytree(head, directory)
        config = json.loads((directory / "config.json").read_text())
        (directory / "config.json").write_text(json.dumps({**config, "trtspec_head_forward": forward}))
        measure(f"as convert wrote it, computed as {forward}", directory)


if __name__ == "__main__":
    main()
