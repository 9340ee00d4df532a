"""EAGLE-3: the exported head is what vLLM and TensorRT-LLM read, with manifest and report.

Expected names and shapes come from vLLM's vllm/model_executor/models/llama_eagle3.py
(vllm-project/vllm@00bd1493, Eagle3LlamaForCausalLM / LlamaDecoderLayer / LlamaModel):
  - config.json architectures ["LlamaForCausalLMEagle3"], draft_vocab_size, eagle_config with
    use_aux_hidden_state;
  - `fc.weight` [hidden, 3 * hidden] (vLLM builds fc with input 3 * hidden_size);
  - `layers.0.self_attn.{q,k,v}_proj.weight` with 2 * hidden inputs (embeddings ++ hidden state),
    `layers.0.hidden_norm.weight`, `norm.weight`;
  - `lm_head.weight` [draft_vocab_size, hidden] and `d2t` [draft_vocab_size] (loaded into
    draft_id_to_target_id; target id = draft id + d2t[draft id]);
  - no "model." prefix in the file (vLLM adds it to every name but lm_head).
ModelOpt's own list (LLAMA_EAGLE_SINGLE_LAYER in modelopt/torch/export/plugins/hf_spec_export.py)
is the same set, which TensorRT-LLM's ModelOpt EAGLE-3 flow consumes.
"""

from __future__ import annotations

import json
import shutil

import pytest
import yaml

from tests.convert.conftest import manifest, run_cli

pytestmark = pytest.mark.slow


def test_export_matches_what_vllm_and_trtllm_load(eagle3_run, tiny_llama):
    from safetensors import safe_open

    directory, _, _ = eagle3_run
    head = directory / "work" / "checkpoints" / "eagle3"
    target = json.loads((tiny_llama / "config.json").read_text())
    hidden, heads = target["hidden_size"], target["num_attention_heads"]
    config = json.loads((head / "config.json").read_text())
    assert config["architectures"] == ["LlamaForCausalLMEagle3"]
    assert config["vocab_size"] == target["vocab_size"] and config["draft_vocab_size"] == 128
    assert config["num_hidden_layers"] == 1 and config["eagle_config"]["use_aux_hidden_state"] is True
    assert len(config["eagle_config"]["eagle_aux_hidden_state_layer_ids"]) == 3
    with safe_open(str(head / "model.safetensors"), "pt") as handle:
        shapes = {name: list(handle.get_slice(name).get_shape()) for name in handle.keys()}
        d2t = handle.get_tensor("d2t")
    assert not any(name.startswith("model.") for name in shapes)
    assert shapes["fc.weight"] == [hidden, 3 * hidden]
    head_dim = hidden // heads
    assert shapes["layers.0.self_attn.q_proj.weight"] == [heads * head_dim, 2 * hidden]
    assert shapes["layers.0.self_attn.k_proj.weight"][1] == 2 * hidden
    assert shapes["layers.0.hidden_norm.weight"] == [hidden]
    assert shapes["norm.weight"] == [hidden]
    assert shapes["lm_head.weight"] == [128, hidden]
    assert shapes["d2t"] == [128]
    # d2t maps every draft id to a distinct target id inside the vocabulary.
    import torch

    mapped = torch.arange(128) + d2t
    assert mapped.unique().numel() == 128 and int(mapped.max()) < target["vocab_size"]


def test_manifest_and_acceptance_report(eagle3_run):
    directory, _, summary = eagle3_run
    head = directory / "work" / "checkpoints" / "eagle3"
    data = manifest(head)
    target_manifest = manifest(directory / "work" / "checkpoints" / "target")
    assert data["kind"] == "eagle3"
    assert data["target_sha256"] == target_manifest["inputs"]["source_sha256"]
    assert data["inputs"]["eagle3"]["draft_vocab_size"] == 128
    assert data["versions"]["nvidia-modelopt"]
    report = data["report"]
    assert report["training"]["steps"] == 3
    training = report["training"]
    assert (training["device"], training["processes"], training["backend"]) == ("cpu", 1, "none")
    assert training["tokens_per_s"] > 0 and training["global_batch"] == 3
    assert report["data"]["source"] == "packaged train prompts" and report["data"]["sequences"] == 6
    acceptance = report["acceptance"]
    assert acceptance["max_draft_len"] == 4 and acceptance["prompts"] == 2
    assert 1.0 <= acceptance["mean_acceptance_length"] <= 5.0
    assert len(acceptance["acceptance_per_position"]) == 4
    assert acceptance["method"].startswith("trtspec.runtime")  # the cpu engine loaded and used the head
    # where the training figures were measured, and the one-line warning for a head that cannot pay
    machine = training["machine"]
    assert machine["isa"] and machine["threads"] >= 1 and machine["cores"] >= 1 and machine["cpu"]
    # whether the head pays here: every prompt decoded with and without it, both timed
    speed = acceptance["speed"]
    assert speed["speculative_tokens_per_s"] > 0 and speed["plain_tokens_per_s"] > 0
    assert abs(speed["speedup"] - speed["speculative_tokens_per_s"] / speed["plain_tokens_per_s"]) < 0.01
    from trtspec.convert.reports import low_acceptance_warning

    assert report.get("warning") == low_acceptance_warning(acceptance)
    curve = summary["acceptance_curve"]  # checkpoint_every 2, 3 steps: snapshots at step 2 and the last step
    assert [point["step"] for point in curve] == [2, 3]
    assert all(1.0 <= point["mean_acceptance_length"] <= 5.0 for point in curve)
    # the curve decodes only with the head (not timed); at the last step it is the exported head, and
    # the plain decodings of the timed report leave the head's greedy drafts as they are
    assert curve[-1]["mean_acceptance_length"] == acceptance["mean_acceptance_length"]
    kinds = [c["kind"] for c in summary["checkpoints"]]
    assert kinds == ["target", "eagle3"]
    assert not (head.parent / ".eagle3-work" / "state.pt.partial").exists()


def test_rerun_skips(eagle3_run, eval_prompts_file):
    _, spec, _ = eagle3_run
    result = run_cli("-c", str(spec), "--eval-prompts", str(eval_prompts_file))
    assert result.exit_code == 0
    assert "eagle3" in result.stdout and "up to date, skipped" in result.stdout
    assert "written" not in result.stdout


def test_larger_budget_continues_training(eagle3_run, eval_prompts_file, tmp_path):
    """Raising max_steps resumes from the saved state instead of training from scratch."""
    directory, spec, _ = eagle3_run
    copy = tmp_path / "extended"
    shutil.copytree(directory, copy)
    settings = yaml.safe_load(spec.read_text())
    settings["workdir"] = str(copy / "work")
    settings["speculative"]["eagle3"]["max_steps"] = 5
    extended = copy / "trtspec.yaml"
    extended.write_text(yaml.safe_dump(settings))
    result = run_cli("-c", str(extended), "--eval-prompts", str(eval_prompts_file), "--eval-tokens", "8")
    assert result.exit_code == 0, result.output
    training = manifest(copy / "work" / "checkpoints" / "eagle3")["report"]["training"]
    assert training["resumed_from"] == 3 and training["steps"] == 5
    assert [record["step"] for record in training["history"]] == [1, 2, 3, 4, 5]
