"""Features and training stream from disk: a data set several times larger than the memory a
process may use is featurised and trained on.

A child process loads a tiny target (hidden 256), writes 520 rows of 256 tokens, then caps its
own data memory (RLIMIT_DATA: heap and private mappings, what torch's CPU allocator takes) at what
it uses plus HEADROOM_MB, and only then computes the features (443 MB on disk, three times the
headroom) and trains 20 steps of 4 rows on them (one-row micro-batches, gradient accumulation). As a control, the same child then tries to hold one feature array whole in
memory under the same cap, and must be refused: the cap is real, so the run fitting under it
means nothing was loaded whole.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.slow

HEADROOM_MB = 140  # training here peaks at about +95 MB (one-row micro-batches), features at +75
ROWS, LENGTH = 520, 256  # 443 MB of features


def child(root: str) -> None:
    """Runs in the capped process; prints one JSON line with what happened."""
    import random
    import resource

    import torch

    from trtspec.convert.eagle3 import prepare, train
    from trtspec.convert.eagle3 import store as eagle3_store
    from trtspec.convert.eagle3.device import Placement
    from trtspec.convert.target import load_causal_lm
    from trtspec.testing.tiny import make_tiny_llama

    torch.set_num_threads(1)
    base = Path(root)
    target = make_tiny_llama(base / "target", seed=0, hidden_size=256, intermediate_size=512)
    model, tokenizer = load_causal_lm(target)
    torch.manual_seed(0)
    train.convert_eagle3(model, json.loads((target / "config.json").read_text()), draft_vocab_size=128)
    files = prepare.WorkFiles(base / "work")
    files.root.mkdir(parents=True)
    generator = random.Random(0)
    eagle3_store.write_rows(files.rows, ((i, [generator.randrange(3, 512) for _ in range(LENGTH)])
                                         for i in range(ROWS)))
    stats = eagle3_store.scan_rows(files.rows)

    # cap the process's data memory at what it uses now plus the headroom
    used = next(int(line.split()[1]) * 1024 for line in open("/proc/self/status") if line.startswith("VmData"))
    cap = used + HEADROOM_MB * 2**20
    resource.setrlimit(resource.RLIMIT_DATA, (cap, cap))

    store = prepare.make_features(model, tokenizer, files, stats, {"test": 1}, seq_len=LENGTH,
                                         dist=prepare.Dist(), report=None)
    settings = train.TrainSettings(max_steps=20, max_seconds=600, learning_rate=1e-3, batch_size=4,
                                          checkpoint_every=10, seed=0, micro_batch_size=1)
    result = train.train_eagle3(model, lambda: store, settings, Placement(torch.device("cpu"), "float32"),
                                       files.root)
    store = eagle3_store.FeatureStore.open(files.features)
    try:
        store.read("aux", list(range(ROWS)))
        control = "loaded"
    except (MemoryError, RuntimeError):
        control = "refused"
    print(json.dumps({"steps": result.steps, "store_bytes": store.nbytes(), "cap_headroom": cap - used,
                      "loss": result.history[-1]["loss"], "control": control}))


def test_a_feature_store_larger_than_memory_is_computed_and_trained_on(tmp_path):
    from trtspec import subproc

    root = Path(__file__).resolve().parents[3]
    run = subproc.run([sys.executable, "-c", f"from tests.convert.eagle3.test_streaming import child; child({str(tmp_path)!r})"],
                      cwd=root, env={"OMP_NUM_THREADS": "1"}, timeout=900)
    outcome = json.loads(run.stdout.strip().splitlines()[-1])
    assert outcome["steps"] == 20 and outcome["loss"] > 0
    assert outcome["store_bytes"] > 3 * outcome["cap_headroom"]  # the data is 3x what the process may add
    assert outcome["control"] == "refused"  # holding one array whole breaks the cap
