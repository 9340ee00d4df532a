"""trtspec's exported heads load through speculators 0.9.0 itself (issue 69 item 3), in its own venv.

- `export-head --format speculators`: SpeculatorModelConfig.from_pretrained and
  SpeculatorModel.from_pretrained load it (an Eagle3 speculator, the verifier our absolute target
  path, the layer ids ours), every tensor of the files loaded, none NaN (NaN = never loaded);
- `export-head --format eagle` through `speculators convert --algorithm eagle3 --verifier TARGET
  --validate-device cpu`: validation succeeds and the converted tensors equal trtspec's own
  speculators export bit for bit (speculators' converter writes no layer ids: vLLM then falls back to
  its default (2, N//2, N-3), which is what this head reads; trtspec writes them, which is right for
  any head whose ids are not the default).
"""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest

from tests.peers.conftest import ROOT, export, run_json

pytestmark = pytest.mark.slow
CHECK = str(Path(__file__).with_name("speculators_check.py"))


def _tensors(directory: Path) -> dict:
    from safetensors.torch import load_file

    return load_file(str(directory / "model.safetensors"))


def test_speculators_export_loads_in_speculators(speculators_python, peer_spec, peer_target, tmp_path):
    out = export(peer_spec, "speculators", tmp_path / "spec")
    config = json.loads((out / "config.json").read_text())
    assert config["speculators_version"] == "0.9.0"
    assert config["speculators_config"]["verifier"]["name_or_path"] == str(peer_target.resolve())
    loaded = run_json(speculators_python, CHECK, str(out))
    assert loaded["speculators"] == "0.9.0" and loaded["class"] == "Eagle3DraftModel"
    assert loaded["verifier"] == str(peer_target.resolve())
    assert loaded["layer_ids"] == config["eagle_aux_hidden_state_layer_ids"]
    files = _tensors(out)
    assert not [name for name, t in loaded["tensors"].items() if t["nan"]]
    # every tensor the file holds is in the loaded model, values and all (names as the model keeps them)
    for name, tensor in files.items():
        mine = loaded["tensors"].get(name)
        assert mine is not None, f"{name} not loaded (model has {sorted(loaded['tensors'])[:8]}...)"
        assert mine["shape"] == list(tensor.shape)
        assert mine["sum"] == pytest.approx(float(tensor.double().sum()), rel=1e-9, abs=1e-9), name


def test_a_named_verifier_is_written_as_given(speculators_python, peer_spec, peer_target, tmp_path):
    out = export(peer_spec, "speculators", tmp_path / "named", "--verifier", str(peer_target))
    assert json.loads((out / "config.json").read_text())["speculators_config"]["verifier"]["name_or_path"] == \
        str(peer_target.resolve())


def test_eagle_export_passes_speculators_convert_with_identical_tensors(speculators_python, peer_spec,
                                                                          peer_target, tmp_path):
    import torch

    eagle = export(peer_spec, "eagle", tmp_path / "eagle")
    mine = export(peer_spec, "speculators", tmp_path / "spec")
    converted = tmp_path / "converted"
    cli = speculators_python.parent / "speculators"
    done = subprocess.run([str(cli), "convert", str(eagle), "--algorithm", "eagle3", "--verifier", str(peer_target),
                           "--output-path", str(converted), "--validate-device", "cpu"],
                          capture_output=True, text=True, timeout=600, cwd=ROOT,
                          env={"HF_HUB_OFFLINE": "1", "PATH": "/usr/bin:/bin", "OMP_NUM_THREADS": "1"})
    log = done.stdout + done.stderr
    assert done.returncode == 0 and "Validation succeeded" in log, log[-3000:]
    theirs, ours = _tensors(converted), _tensors(mine)
    # speculators keeps the target's embeddings out of a head that shares them
    assert sorted(theirs) == sorted(ours)
    for name, tensor in ours.items():
        assert theirs[name].dtype == tensor.dtype and torch.equal(theirs[name], tensor), name
    config = json.loads((converted / "config.json").read_text())
    assert "eagle_aux_hidden_state_layer_ids" not in config or config["eagle_aux_hidden_state_layer_ids"] in (
        None, json.loads((mine / "config.json").read_text())["eagle_aux_hidden_state_layer_ids"])
