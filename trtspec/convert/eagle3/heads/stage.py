"""`trtspec convert --mode eagle3 --head SOURCE`: an existing head becomes `checkpoints/eagle3`.

SOURCE (`speculative.eagle3.head`) is a directory or a Hugging Face hub id (trtspec.hub). The
head is read in whichever layout it is in (layouts.py), checked against the recorded target
(checks.py) and only then written, atomically, as the canonical head (canonical.py) with its
manifest: source, resolved path, layout read, where the layer ids came from and in which
convention, the canonical ids, the function its tool computes, every change made (notes), the
target's sha256. A re-run with the same head, target and settings is skipped.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from trtspec import artifacts, hub
from trtspec.artifacts import StageResult
from trtspec.convert.eagle3.heads import checks, layouts
from trtspec.convert.eagle3.heads import conventions as conv
from trtspec.convert.eagle3.heads.canonical import canonical_config, write_canonical
from trtspec.errors import ModelSourceError


def resolve_head(source: str) -> Path:
    """The local directory of a head source: a directory, or a hub id's snapshot."""
    path = Path(source).expanduser()
    if path.is_dir():
        return path
    if hub.is_hub_id(source):
        return hub.snapshot(source)
    raise ModelSourceError(f"speculative.eagle3.head: {source} is neither a directory nor a hub id (org/name)",
                           fix="give the head's directory or its Hugging Face id")


def import_head(source: str, target_dir: Path, *, max_seq_len: int, convention: str = "auto"):
    """(the head as read, its Checked tensors and ids, the resolved path); nothing written."""
    path = resolve_head(source)
    head = layouts.read_head(path)
    if convention != "auto":
        head.convention = conv.OUTPUT if convention == "output" else conv.INPUT
        head.ids_from += f" (convention set by speculative.eagle3.head_layer_convention: {convention})"
    target_config = json.loads((Path(target_dir) / "config.json").read_text())
    checked = checks.check_head(head, target_dir, target_config, max_seq_len=max_seq_len)
    return head, checked, path


def run_head_import(spec, layout, target_dir: Path, target_sha: str, *, dry_run: bool = False,
                    eval_prompts: list[str] | None = None, eval_tokens: int = 48) -> StageResult:
    """Import speculative.eagle3.head for the target in `target_dir` into checkpoints/eagle3; with
    `eval_prompts`, its acceptance profile is measured and written beside it (eagle3.profile)."""
    settings = spec.speculative.eagle3
    final = layout.checkpoint("eagle3")
    path = resolve_head(settings.head)
    inputs = {"target_sha256": target_sha, "head": settings.head, "head_sha256": _files_sha256(path),
              "head_layer_convention": settings.head_layer_convention, "max_seq_len": spec.build.max_seq_len}
    if skipped := artifacts.settled("eagle3", final, inputs, dry_run=False):
        return skipped
    if dry_run:  # checked, not written: a dry run refuses what the real run would
        import_head(settings.head, target_dir, max_seq_len=spec.build.max_seq_len,
                    convention=settings.head_layer_convention)
        return StageResult("eagle3", final, "planned")
    with artifacts.atomic_dir(final) as staging:
        report = write_imported(staging, settings.head, target_dir, max_seq_len=spec.build.max_seq_len,
                                convention=settings.head_layer_convention)
        measured = _profile(spec, target_dir, target_sha, staging, eval_prompts, eval_tokens)
        manifest = artifacts.write_manifest(
            staging, "eagle3", source=settings.head, resolved_path=report.pop("resolved_path"),
            target_sha256=target_sha, weights_sha256=artifacts.weights_sha256(staging), inputs=inputs, head=report,
            **({"report": measured} if measured else {}))
    return StageResult("eagle3", final, "written", manifest, {"head": report, **measured})


def _profile(spec, target_dir: Path, target_sha: str, head_dir: Path, prompts: list[str] | None,
             new_tokens: int) -> dict[str, Any]:
    """{"acceptance": the chain's figures} after writing speculation_profile.json beside the
    imported head, as convert does for the heads it trains; {} without prompts or the runtime."""
    if not prompts:
        return {}
    from trtspec.convert.eagle3.profile import as_acceptance, profile_beside

    try:
        profile = profile_beside(spec, target_dir, target_sha, head_dir, prompts, new_tokens=new_tokens,
                                 made_by="imported")
    except ImportError:  # trtspec.runtime not installed
        return {}
    return {"acceptance": as_acceptance(profile)}


def write_imported(directory: Path, source: str, target_dir: Path, *, max_seq_len: int,
                   convention: str = "auto") -> dict[str, Any]:
    """Read, check and write the head `source` as the canonical head into `directory` (made by the
    caller); return what the manifest says about it."""
    from trtspec.convert.eagle3.export import check_eagle3_export

    head, checked, path = import_head(source, target_dir, max_seq_len=max_seq_len, convention=convention)
    target_config = json.loads((Path(target_dir) / "config.json").read_text())
    dtype = str(checked.tensors["fc.weight"].dtype).removeprefix("torch.")
    config = canonical_config(head.llama, draft_vocab_size=head.draft_vocab_size, layer_ids=checked.layer_ids,
                              forward=head.forward, dtype=dtype)
    write_canonical(directory, config, checked.tensors)
    report = head_report(head, checked, target_config)
    report["export"] = check_eagle3_export(directory, target_config)
    report["resolved_path"] = str(path)
    return report


def head_report(head: layouts.Head, checked: checks.Checked, target_config: dict[str, Any]) -> dict[str, Any]:
    """What the manifest says about an imported head."""
    return {"layout": head.layout, "files": head.files,
            "layer_ids_written": head.layer_ids, "layer_ids_from": head.ids_from,
            "layer_ids_convention": conv.DESCRIBE[head.convention],
            "layer_ids": checked.layer_ids, "layer_ids_meaning": conv.DESCRIBE[conv.OUTPUT],
            "layer_ids_input_of_layer": conv.from_output(checked.layer_ids, conv.INPUT),
            "forward": head.forward, "forward_means": layouts.FORWARDS[head.forward],
            "draft_vocab_size": head.draft_vocab_size, "vocab_size": int(target_config["vocab_size"]),
            "max_position_embeddings": head.llama["max_position_embeddings"], "notes": checked.notes}


def _files_sha256(path: Path) -> str:
    """sha256 over the head's config.json and weight files (what the import reads)."""
    import hashlib

    digest = hashlib.sha256()
    for file in sorted(p for p in Path(path).iterdir() if p.is_file() and (
            p.name == "config.json" or p.suffix in (".safetensors", ".bin"))):
        digest.update(file.name.encode())
        digest.update(artifacts.sha256_file(file).encode())
    return digest.hexdigest()
