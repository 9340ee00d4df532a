#!/usr/bin/env python3
"""Load upstream's own inflight_batcher_llm Python models with trtspec's fills on the CPU tritonserver.

    .venv/bin/python scripts/upstream-ibl-check.py --upstream ~/src/tensorrtllm_backend [--mode none]

`--upstream` is a checkout holding `all_models/inflight_batcher_llm/` and `tools/fill_template.py`
(triton-inference-server/tensorrtllm_backend, or NVIDIA/TensorRT-LLM's `triton_backend/`); nothing
of it is kept in this repository. The script builds an /app stand-in from that checkout, replaces
only the C++ engine model (tensorrt_llm, tensorrt_llm_draft) with the Python stand-in of
tests/repository/ibl_standins/ (held to the names the contract cites at `--commit`), runs trtspec's
fill_template.sh with upstream's own fill_template.py, starts the CPU tritonserver 2.51 and sends
one request through the ensemble and one through the BLS (draft-target: with num_draft_tokens, so
upstream's decoder makes draft and verify calls). One change is made to upstream's files: each
model.py first adds this virtualenv's site-packages to sys.path (the CPU stub ignores PYTHONPATH;
the container's stub has its packages installed). The answers are not meaningful text: the
stand-in engine emits byte tokens that a real tokenizer decodes to other characters.
Exit status 0 when every model loads and both requests answer.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--upstream", required=True, type=Path, help="checkout with all_models/ and tools/")
    parser.add_argument("--mode", choices=("draft-target", "none"), default="draft-target")
    parser.add_argument("--commit", default="c2e65b88",
                        help="hold the stand-in engine to the contract names cited at this commit (default c2e65b88)")
    args = parser.parse_args()

    import numpy as np

    from tests.repository import test_trtllm_engine_flow as flow
    from trtspec.builders import contracts
    from trtspec.repository import trtllm_engine as te
    from trtspec.repository import trtllm_engine_contract as contract
    from trtspec.testing.tiny import make_tiny_llama

    tree = args.upstream / "all_models" / "inflight_batcher_llm"
    if not (tree.is_dir() and (args.upstream / "tools" / "fill_template.py").is_file()):
        sys.exit(f"error: {args.upstream} has no all_models/inflight_batcher_llm or tools/fill_template.py")
    draft_target = args.mode == "draft-target"
    work = Path(tempfile.mkdtemp(prefix="trtspec-ibl-"))
    # 1. /app: upstream's tree and tool; the engine model replaced by the stand-in
    app = work / "app"
    shutil.copytree(tree, app / "all_models" / "inflight_batcher_llm")
    (app / "tools").mkdir()
    shutil.copy(args.upstream / "tools" / "fill_template.py", app / "tools")
    for model_py in (app / "all_models" / "inflight_batcher_llm").glob("*/1/model.py"):
        model_py.write_text("import os, sys; sys.path += [p for p in os.environ.get('TRTSPEC_PYTHONPATH', '')"
                            ".split(os.pathsep) if p]\n" + model_py.read_text())
    version = contracts.default_version()
    sec = contract.section(version)
    engine = app / "all_models" / "inflight_batcher_llm" / "tensorrt_llm" / "1"
    shutil.copy(flow.STANDINS / "tensorrt_llm.py", engine / "model.py")
    shutil.copy(flow.STANDINS / "standin_common.py", engine)
    at_commit = {model: {kind: {name: cited for name, cited in names.items()
                                if any(f"@{args.commit}" in entry["at"] for entry in cited)}
                         for kind, names in kinds.items()} for model, kinds in sec["reads"].items()}
    (engine / "contract.json").write_text(json.dumps({"reads": at_commit}))
    # 2. trtspec's fills (a real tokenizer for upstream's pre/postprocessing), trtspec's script
    tokenizer = make_tiny_llama(work / "tokenizer", seed=0)
    fills = te.fills({**flow._values(draft_target), "tokenizer_dir": str(tokenizer)}, version)
    for model in ("tensorrt_llm", "tensorrt_llm_draft"):
        if model in fills:
            fills[model]["triton_backend"] = "python"
    script = work / "fill_template.sh"
    script.write_text(te.fill_script(fills))
    repo = work / "models"
    subprocess.run(["bash", str(script), str(repo)], check=True, env={**os.environ, "APP": str(app)})
    # 3. serve and ask
    with flow._tritonserver(repo, work) as (server, client, log_path):
        if not (server.poll() is None and flow._ready(client)):
            print(log_path.read_text()[-6000:])
            print(f"FAIL: the repository did not load (log: {log_path})")
            return 1
        print("loaded:", ", ".join(model for model in fills if client.is_model_ready(model)))
        print("ensemble ->", repr(flow._ask(client, "ensemble")))
        # upstream's decoder reads `stream` whenever num_draft_tokens is set (lib/decode.py validate)
        extra = {"num_draft_tokens": np.array([[3]], dtype=np.int32), "stream": np.array([[False]])} \
            if draft_target else {}
        print("tensorrt_llm_bls ->", repr(flow._ask(client, "tensorrt_llm_bls", **extra)))
        for model in ("tensorrt_llm", "tensorrt_llm_draft"):
            if model in fills:
                stats = client.get_inference_statistics(model, as_json=True)["model_stats"][0]
                print(f"{model} calls: {stats.get('inference_count')}")
    shutil.rmtree(work, ignore_errors=True)
    print("PASS")
    return 0


if __name__ == "__main__":
    sys.exit(main())
