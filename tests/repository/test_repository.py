"""Rendered repositories: golden config.pbtxt / model.yaml, ModelConfig parsing, cross-checks, atomic swap.

Set TRTSPEC_UPDATE_GOLDEN=1 to rewrite tests/golden/repository/ after an intended change.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from trtspec.errors import IncompatibleArtifactError, TrtSpecError
from trtspec.repository import pbtxt, render

GOLDEN = Path(__file__).resolve().parents[1] / "golden" / "repository"
ENGINE_PATH = "/engines/tiny"   # container-style path keeps the goldens independent of tmp dirs


def _compare_with_golden(case: str, repo: Path) -> None:
    files = sorted(p for p in repo.rglob("*") if p.is_file() and p.name != "manifest.json")
    golden_dir = GOLDEN / case
    if os.environ.get("TRTSPEC_UPDATE_GOLDEN") == "1":
        for path in files:
            target = golden_dir / path.relative_to(repo)
            target.parent.mkdir(parents=True, exist_ok=True)
            target.write_text(path.read_text())
    expected = sorted(p.relative_to(golden_dir) for p in golden_dir.rglob("*") if p.is_file())
    assert [p.relative_to(repo) for p in files] == expected, f"files differ from {golden_dir}"
    for path in files:
        assert path.read_text() == (golden_dir / path.relative_to(repo)).read_text(), f"{case}: {path.name} changed"


def _check_all_pbtxt(repo: Path) -> list:
    configs = []
    for path in sorted(repo.rglob("config.pbtxt")):
        text = path.read_text()
        assert "${" not in text
        configs.append(pbtxt.check(text, where=str(path)))
    assert configs
    return configs


@pytest.fixture(scope="module")
def gpu_engines(tmp_path_factory, tiny_llama, tiny_llama_draft, spec_factory):
    """Engines built by `trtspec build` for trtllm (n-gram, draft-target) and trtllm-engine (draft-target, tp 2)."""
    from trtspec.builders import build

    root = tmp_path_factory.mktemp("gpu-engines")
    cases = {
        "trtllm-ngram": spec_factory(root, tiny_llama, backend="trtllm", mode="ngram"),
        "trtllm-draft-target": spec_factory(root, tiny_llama, backend="trtllm", mode="draft-target",
                                         draft=tiny_llama_draft),
        "trtllm-engine-draft-target-tp2": spec_factory(root, tiny_llama, backend="trtllm-engine", mode="draft-target",
                                                    draft=tiny_llama_draft, build={"tp_size": 2}),
        "trtllm-engine-none": spec_factory(root, tiny_llama, backend="trtllm-engine", mode="none"),
    }
    return {case: (spec, build(spec).engine_dir) for case, spec in cases.items()}


def test_cpu_repository_matches_golden_and_parses(tiny_cpu_engine, tmp_path):
    spec, engine_dir = tiny_cpu_engine
    files = render(engine_dir, spec, tmp_path / "repo", engine_path=ENGINE_PATH)
    assert {f.name for f in files} == {"config.pbtxt", "model.py"}
    (config,) = _check_all_pbtxt(tmp_path / "repo")
    assert config.backend == "python" and config.model_transaction_policy.decoupled
    assert config.instance_group[0].count == spec.serve.instance_count
    assert config.parameters["engine_dir"].string_value == ENGINE_PATH
    assert {i.name for i in config.input} >= {"text_input", "streaming", "sampling_param_max_tokens", "speculative",
                                             "sampling_param_return_perf_metrics"}
    assert [i.name for i in config.input if not i.optional] == ["text_input"]
    _compare_with_golden("cpu", tmp_path / "repo")


@pytest.mark.parametrize("case", ["trtllm-ngram", "trtllm-draft-target"])
def test_gpu_repositories_match_golden_and_parse(gpu_engines, case, tmp_path):
    spec, engine_dir = gpu_engines[case]
    render(engine_dir, spec, tmp_path / "repo", engine_path=ENGINE_PATH)
    _check_all_pbtxt(tmp_path / "repo")
    _compare_with_golden(case, tmp_path / "repo")


@pytest.mark.parametrize("case", ["trtllm-engine-draft-target-tp2", "trtllm-engine-none"])
def test_trtllm_engine_repository_is_the_fill_of_upstreams_tree(gpu_engines, case, tmp_path):
    """No config.pbtxt of trtspec's own: fill_template.sh (copy the container's whole tree, derive the
    draft, fill every model) and fills.json, the per-model key:value lists; golden files pin both."""
    import json

    spec, engine_dir = gpu_engines[case]
    files = render(engine_dir, spec, tmp_path / "repo", engine_path=ENGINE_PATH)
    assert sorted(f.name for f in files) == ["fill_template.sh", "fills.json"]
    assert not list((tmp_path / "repo").rglob("config.pbtxt"))
    fills = json.loads((tmp_path / "repo" / "fills.json").read_text())["models"]
    assert fills["tensorrt_llm"]["triton_max_batch_size"] == spec.build.max_batch_size
    assert fills["tensorrt_llm"]["batching_strategy"] == "inflight_fused_batching"
    assert ("tensorrt_llm_draft" in fills) == (spec.speculative.mode == "draft-target")
    _compare_with_golden(case, tmp_path / "repo")


def test_deploy_dry_run_shows_the_fill_template_calls_and_key_value_lists(gpu_engines, tmp_path):
    """`deploy --dry-run` (text and --json) shows each fill_template.py call with its key:value list."""
    import json

    import yaml
    from click.testing import CliRunner

    from trtspec.cli import main

    spec, _ = gpu_engines["trtllm-engine-draft-target-tp2"]
    config = tmp_path / "trtspec.yaml"
    config.write_text(yaml.safe_dump(spec.model_dump(mode="json")))
    text = CliRunner().invoke(main, ["deploy", "-c", str(config), "--dry-run", "--target", "docker"])
    assert text.exit_code == 0, text.output
    data = json.loads(CliRunner().invoke(main, ["deploy", "-c", str(config), "--dry-run", "--json",
                                                "--target", "docker"]).output)
    fills = data["fill_template"]
    assert list(fills["models"]) == ["tensorrt_llm", "tensorrt_llm_draft", "preprocessing", "postprocessing",
                                     "ensemble", "tensorrt_llm_bls"]
    assert len(fills["calls"]) == len(fills["models"])
    for call, (model, values) in zip(fills["calls"], fills["models"].items(), strict=True):
        assert call.startswith(f"python3 /app/tools/fill_template.py -i /tmp/trtspec-models/{model}/config.pbtxt ")
        assert all(f"{key}:" in call for key in values)
        assert call in text.output
    assert "bash /models/fill_template.sh /tmp/trtspec-models" in data["command"]
    assert not (tmp_path / "repo").exists() and not Path(spec.serve.repository).exists()


def test_trtllm_model_yaml_is_llm_arguments_with_triton_config(gpu_engines, tmp_path):
    import yaml

    spec, engine_dir = gpu_engines["trtllm-draft-target"]
    render(engine_dir, spec, tmp_path / "repo", engine_path=ENGINE_PATH)
    data = yaml.safe_load((tmp_path / "repo" / "tensorrt_llm" / "1" / "model.yaml").read_text())
    assert data["backend"] == "pytorch" and data["model"] == f"{ENGINE_PATH}/target"
    assert data["triton_config"] == {"max_batch_size": 0, "decoupled": True}
    speculative = data["speculative_config"]
    assert speculative["max_draft_len"] == spec.speculative.max_draft_len
    assert any(str(v).startswith(ENGINE_PATH + "/draft") for v in speculative.values())


def test_tp2_draft_target_engines_share_the_gpus_in_orchestrator_mode(gpu_engines, tmp_path):
    """tensorrtllm_backend docs/llama_multi_instance.md, orchestrator mode: each tensorrt_llm model names
    its GPUs (gpu_device_ids), the backend spawns the workers, no participant_ids (those are only for
    --disable-spawn-processes); the KV pools are planned token counts, so the load order does not matter."""
    import json

    spec, engine_dir = gpu_engines["trtllm-engine-draft-target-tp2"]
    render(engine_dir, spec, tmp_path / "repo", engine_path=ENGINE_PATH)
    fills = json.loads((tmp_path / "repo" / "fills.json").read_text())["models"]
    tokens = json.loads((engine_dir / "engine.json").read_text())["trtllm_engine"]["kv_cache_tokens"]
    for model, role in (("tensorrt_llm", "target"), ("tensorrt_llm_draft", "draft")):
        assert fills[model]["gpu_device_ids"] == [0, 1]
        assert fills[model]["participant_ids"] == ""
        assert fills[model]["max_tokens_in_paged_kv_cache"] == tokens[role]
        assert fills[model]["kv_cache_free_gpu_mem_fraction"] == spec.build.free_gpu_memory_fraction
    assert fills["tensorrt_llm_draft"]["engine_dir"] == f"{ENGINE_PATH}/draft"
    script = (tmp_path / "repo" / "fill_template.sh").read_text()
    assert "gpu_device_ids:0\\,1" in script
    assert fills["tensorrt_llm_bls"]["decoupled_mode"] is False   # upstream's BLS spec loop is non-streaming


def test_check_refuses_leftover_placeholders_and_bad_fields():
    with pytest.raises(TrtSpecError, match="unfilled placeholder"):
        pbtxt.check('name: "m"\nmax_batch_size: ${triton_max_batch_size}\n')
    with pytest.raises(TrtSpecError, match="does not parse"):
        pbtxt.check('name: "m"\nno_such_field: 1\n')
    with pytest.raises(TrtSpecError, match="not a valid Triton ModelConfig"):
        pbtxt.render({"name": "m", "max_batch_sise": 1})


def test_cross_checks_against_engine_json(tiny_cpu_engine, tmp_path):
    spec, engine_dir = tiny_cpu_engine
    wrong_batch = spec.model_copy(deep=True)
    wrong_batch.build.max_batch_size = 4
    with pytest.raises(IncompatibleArtifactError, match="max_batch_size"):
        render(engine_dir, wrong_batch, tmp_path / "a")
    longer_draft = spec.model_copy(deep=True)
    longer_draft.speculative.max_draft_len = 16
    with pytest.raises(IncompatibleArtifactError, match="max_draft_len"):
        render(engine_dir, longer_draft, tmp_path / "b")
    with pytest.raises(TrtSpecError, match="trtspec build"):
        render(tmp_path / "no-engine", spec, tmp_path / "c")


def test_failed_render_leaves_previous_repository_intact(tiny_cpu_engine, tmp_path):
    spec, engine_dir = tiny_cpu_engine
    repo = tmp_path / "repo"
    render(engine_dir, spec, repo)
    before = {p: p.read_bytes() for p in repo.rglob("*") if p.is_file()}
    broken = spec.model_copy(deep=True)
    broken.build.max_batch_size = 3   # the cross-check fails inside render
    with pytest.raises(IncompatibleArtifactError):
        render(engine_dir, broken, repo)
    assert {p: p.read_bytes() for p in repo.rglob("*") if p.is_file()} == before
    assert [p.name for p in tmp_path.iterdir()] == ["repo"], "staging directory left behind"


def test_failure_inside_staging_leaves_previous_repository_intact(tiny_cpu_engine, tmp_path, monkeypatch):
    from trtspec.repository import cpu

    spec, engine_dir = tiny_cpu_engine
    repo = tmp_path / "repo"
    render(engine_dir, spec, repo)
    before = {p: p.read_bytes() for p in repo.rglob("*") if p.is_file()}
    # A config that renders but leaves a placeholder: caught by the check after files are staged.
    original = cpu.model_config
    monkeypatch.setattr(cpu, "model_config", lambda *a: {**original(*a), "backend": "${triton_backend}"})
    with pytest.raises(TrtSpecError, match="unfilled placeholder"):
        render(engine_dir, spec, repo)
    assert {p: p.read_bytes() for p in repo.rglob("*") if p.is_file()} == before
    assert [p.name for p in tmp_path.iterdir()] == ["repo"]
