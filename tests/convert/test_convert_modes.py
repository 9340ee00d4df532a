"""`trtspec convert` per mode on tiny models: checkpoints, manifests, skip-on-rerun, dry-run, atomicity."""

from __future__ import annotations

import json

import pytest

from tests.convert.conftest import manifest, run_cli, write_spec


def test_target_only_manifest_and_skip(in_tmp, tiny_llama):
    spec = write_spec(in_tmp, tiny_llama)
    first = run_cli("-c", str(spec), "--json")
    assert first.exit_code == 0, first.output
    [target] = json.loads(first.stdout)["checkpoints"]
    assert target["kind"] == "target" and target["status"] == "written"
    path = in_tmp / "work" / "checkpoints" / "target"
    data = manifest(path)
    assert data["kind"] == "target" and data["source"] == str(tiny_llama)
    assert data["weights_sha256"] == target["weights_sha256"]
    assert data["inputs"]["source_sha256"] == data["weights_sha256"]  # same files, same hash
    assert {"config.json", "model.safetensors", "tokenizer.json"} <= {p.name for p in path.iterdir()}
    second = run_cli("-c", str(spec))
    assert second.exit_code == 0
    assert "target" in second.stdout and "up to date, skipped" in second.stdout


def test_dry_run_writes_nothing(in_tmp, tiny_llama):
    spec = write_spec(in_tmp, tiny_llama, quantization={"fp8": True})
    result = run_cli("-c", str(spec), "--dry-run", "--mode", "eagle3")
    assert result.exit_code == 0, result.output
    for kind in ("target", "target-fp8", "target-fp8-trtllm", "eagle3"):
        assert f"{kind}" in result.stdout
    assert result.stdout.count("would be written") == 4
    assert not (in_tmp / "work").exists()


def test_interrupted_write_leaves_nothing(in_tmp, tiny_llama, monkeypatch):
    """An exception after files were written into the staging directory leaves no checkpoint."""
    from trtspec import artifacts

    spec = write_spec(in_tmp, tiny_llama)
    real = artifacts.write_manifest

    def explode(directory, kind, **fields):
        real(directory, kind, **fields)  # the checkpoint is complete in staging ...
        raise RuntimeError("killed")  # ... and the run dies before the rename

    monkeypatch.setattr(artifacts, "write_manifest", explode)
    with pytest.raises(RuntimeError, match="killed"):
        run_cli("-c", str(spec))
    checkpoints = in_tmp / "work" / "checkpoints"
    assert not (checkpoints / "target").exists()
    assert list(checkpoints.iterdir()) == []  # no staging leftovers either


@pytest.mark.slow
def test_fp8_both_formats_report_and_skip(in_tmp, tiny_llama):
    import warnings

    from safetensors import safe_open

    spec = write_spec(in_tmp, tiny_llama, build={"tp_size": 2})
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        result = run_cli("-c", str(spec), "--fp8", "--json")
    assert result.exit_code == 0, result.output
    noise = [str(w.message)[:80] for w in caught if "modelopt" in w.filename and issubclass(w.category, UserWarning)]
    assert not noise, noise  # ModelOpt's export warnings that do not apply are not shown to users
    statuses = {c["kind"]: c["status"] for c in json.loads(result.stdout)["checkpoints"]}
    assert statuses == {"target": "written", "target-fp8": "written", "target-fp8-trtllm": "written"}
    hf = in_tmp / "work" / "checkpoints" / "target-fp8"
    config = json.loads((hf / "config.json").read_text())
    assert config["architectures"] == ["LlamaForCausalLM"]
    assert json.loads((hf / "hf_quant_config.json").read_text())["quantization"]["quant_algo"] == "FP8"
    with safe_open(str(hf / "model.safetensors"), "pt") as handle:
        assert handle.get_slice("model.layers.0.mlp.up_proj.weight").get_dtype() == "F8_E4M3"
        assert "model.layers.0.mlp.up_proj.weight_scale" in handle.keys()
    data = manifest(hf)
    assert data["kind"] == "target-fp8" and data["report"]["calibration_prompts"] == 3
    assert 0.0 <= data["report"]["greedy_token_agreement"] <= 1.0
    assert data["report"]["perplexity_fp8"] > 0 and data["report"]["perplexity_original"] > 0
    trt = in_tmp / "work" / "checkpoints" / "target-fp8-trtllm"
    trt_config = json.loads((trt / "config.json").read_text())
    assert trt_config["mapping"]["tp_size"] == 2 and trt_config["quantization"]["quant_algo"] == "FP8"
    assert (trt / "rank0.safetensors").exists() and (trt / "rank1.safetensors").exists()
    assert manifest(trt)["inputs"]["tp_size"] == 2
    again = run_cli("-c", str(spec), "--fp8")
    assert again.stdout.count("up to date, skipped") == 3


@pytest.mark.slow
def test_draft_target_pairing_with_fp8(in_tmp, tiny_llama, tiny_llama_draft):
    spec = write_spec(in_tmp, tiny_llama)
    result = run_cli("-c", str(spec), "--mode", "draft-target", "--draft", str(tiny_llama_draft), "--fp8", "--json")
    assert result.exit_code == 0, result.output
    kinds = [c["kind"] for c in json.loads(result.stdout)["checkpoints"]]
    assert kinds == ["target", "target-fp8", "target-fp8-trtllm", "draft", "draft-fp8"]
    checkpoints = in_tmp / "work" / "checkpoints"
    target_sha = manifest(checkpoints / "target")["inputs"]["source_sha256"]
    draft = manifest(checkpoints / "draft")
    assert draft["kind"] == "draft" and draft["target_sha256"] == target_sha
    assert draft["pairing"]["draft_parameters"] < draft["pairing"]["target_parameters"]
    assert manifest(checkpoints / "draft-fp8")["target_sha256"] == target_sha
    assert (checkpoints / "draft-fp8" / "hf_quant_config.json").exists()
