"""Mode layerskip on the GPU backends, which have no early-exit drafting: convert writes the
target's first E layers as work/checkpoints/draft, the build writes what draft-target writes with
that copy (its memory in the plan, one line saying so), and deploy renders draft-target's repository.
The dry-run output itself is pinned by test_build_golden.py (trtllm-layerskip, trtllm-engine-layerskip)."""

from __future__ import annotations

import json

import pytest
import yaml
from click.testing import CliRunner

from trtspec.cli import main
from trtspec.errors import ModelSourceError

NOTE = ("layerskip on {}: TensorRT-LLM has no early-exit drafting; drafting with a first-2-layers copy of the "
        "target as a draft model (draft-target)")


def _write(root, target, backend: str, **speculative) -> str:
    spec = {"model": {"source": str(target), "name": "tiny"}, "build": {"backend": backend},
            "speculative": {"mode": "layerskip", **speculative}}
    (root / "trtspec.yaml").write_text(yaml.safe_dump(spec))
    return str(root / "trtspec.yaml")


def _cli(*args: str):
    result = CliRunner().invoke(main, list(args), catch_exceptions=False)
    assert result.exit_code == 0, result.output
    return result


def _spec(config: str, **overrides):
    from trtspec.spec.loading import load_spec

    return load_spec(config, {key.replace("__", "."): value for key, value in overrides.items()})


@pytest.fixture
def converted(in_tmp, gpu_target):
    """A workspace whose convert wrote the first-layers draft (exit_layer empty: 8 layers // 4 = 2)."""
    config = _write(in_tmp, gpu_target, "trtllm")
    _cli("convert", "-c", config)
    return config


def test_convert_writes_the_first_layers_draft_only_for_gpu_backends(in_tmp, gpu_target):
    from safetensors import safe_open

    from trtspec import artifacts

    config = _write(in_tmp, gpu_target, "trtllm-engine")
    planned = json.loads(_cli("convert", "-c", config, "--dry-run", "--json").stdout)["checkpoints"]
    assert [(c["kind"], c["status"]) for c in planned] == [("target", "planned"), ("draft", "planned")]
    assert not (in_tmp / "work").exists()
    written = json.loads(_cli("convert", "-c", config, "--json").stdout)["checkpoints"]
    assert [(c["kind"], c["status"]) for c in written] == [("target", "written"), ("draft", "written")]
    draft = in_tmp / "work" / "checkpoints" / "draft"
    manifest = artifacts.read_manifest(draft)
    target_sha = artifacts.weights_sha256(gpu_target)
    assert manifest["kind"] == "draft" and manifest["target_sha256"] == target_sha
    assert manifest["inputs"] == {"source": "first-layers", "num_layers": 2, "target_sha256": target_sha}
    assert manifest["first_layers"]["of_layers"] == 8
    assert json.loads((draft / "config.json").read_text())["num_hidden_layers"] == 2
    with safe_open(str(draft / "model.safetensors"), "pt") as handle:
        layers = {int(name.split(".")[2]) for name in handle.keys() if name.startswith("model.layers.")}
    assert layers == {0, 1}
    again = _cli("convert", "-c", config)
    assert again.stdout.count("up to date, skipped") == 2
    # the cpu engine drafts from the target itself: nothing beyond the target
    cpu = _write(in_tmp, gpu_target, "cpu")
    assert [c["kind"] for c in json.loads(_cli("convert", "-c", cpu, "--dry-run", "--json").stdout)["checkpoints"]] \
        == ["target"]


@pytest.mark.parametrize("backend", ["trtllm", "trtllm-engine"])
def test_build_writes_what_draft_target_writes_with_the_copy(converted, in_tmp, backend):
    from trtspec.builders import build
    from trtspec.builders.planner import ModelShape

    spec = _spec(converted, build__backend=backend)
    result = build(spec, dry_run=True)
    engine = dict(result.engine)
    assert (engine.pop("mode"), engine.pop("requested_mode")) == ("draft-target", "layerskip")
    assert engine.pop("layerskip") == {"exit_layer": 2, "num_hidden_layers": 8, "written_as": "draft-target",
                                       "note": NOTE.format(backend)}
    assert result.messages.count(NOTE.format(backend)) == 1
    # draft-target with the same copy as its draft writes the same, name and paths aside
    draft = build(_spec(converted, build__backend=backend, speculative__mode="draft-target",
                        speculative__draft=str(in_tmp / "work" / "checkpoints" / "draft")), dry_run=True)
    same = json.loads(json.dumps(draft.engine).replace("tiny-draft-target-", "tiny-layerskip-"))
    same.pop("mode")
    assert engine == same
    assert {k: v.replace("tiny-draft-target-", "tiny-layerskip-") for k, v in draft.files.items()} == result.files
    # the plan holds the copy: two layers of the target's shape, its own KV cache
    [target, drafted] = result.plan.components
    copy_config = json.loads((in_tmp / "work" / "checkpoints" / "draft" / "config.json").read_text())
    assert drafted.role == "draft" and drafted.params == ModelShape.from_config(copy_config).params
    assert drafted.kv_bytes_per_token * 4 == target.kv_bytes_per_token  # 2 layers of 8
    assert result.plan.to_dict() == draft.plan.to_dict()


def test_trtspec_plan_counts_the_draft_before_convert(in_tmp, gpu_target):
    from trtspec.builders import plan_inputs

    spec = _spec(_write(in_tmp, gpu_target, "trtllm", layerskip={"exit_layer": 2}))
    before = plan_inputs(spec)
    assert [c.role for c in before.components] == ["target", "draft"]
    _cli("convert", "-c", str(in_tmp / "trtspec.yaml"))
    from trtspec.builders import build

    assert build(spec, dry_run=True).plan.to_dict() == before.to_dict()


def test_llm_api_options_are_the_contract_s_draft_target_fields(converted):
    from trtspec.builders import build, contracts

    spec = _spec(converted)
    options = build(spec, dry_run=True).engine["trtllm"]["llm_api_options"]
    api = contracts.for_spec(spec).llm_api
    speculative = options["speculative_config"]
    assert speculative["decoding_type"] == "DraftTarget" and "DraftTarget" in api["dispatch"]["names"]
    assert set(speculative) <= set(api["decoding"]["draft-target"]["fields"])
    assert speculative[api["speculative_model_field"]] == "draft"


@pytest.mark.parametrize("version", ["1.1.0", "1.2.1"])
def test_trtllm_engine_repository_is_draft_target_s(converted, in_tmp, version):
    from trtspec.builders import build
    from trtspec.repository import trtllm_engine as te

    spec = _spec(converted, build__backend="trtllm-engine", build__trtllm_version=version)
    engine = build(spec, dry_run=True).engine
    fills = te.fills(te.plan(engine, spec, "/engines/x", in_tmp), version)
    assert "tensorrt_llm_draft" in fills and fills["tensorrt_llm_draft"]["engine_dir"] == "/engines/x/draft"
    te.check(fills, version)  # every placeholder filled, each config parses as Triton's ModelConfig


def test_deploy_dry_run_renders_the_draft_target_repository(converted):
    config = converted.replace("trtspec.yaml", "engine.yaml")
    spec = yaml.safe_load(open(converted))
    spec["build"]["backend"] = "trtllm-engine"
    open(config, "w").write(yaml.safe_dump(spec))
    _cli("build", "-c", config)
    out = _cli("deploy", "-c", config, "--dry-run").stdout
    assert "engines/tiny-layerskip-trtllm-engine" in out and "tensorrt_llm_draft/config.pbtxt" in out
    assert "tensorrt_llm_draft_model_name:tensorrt_llm_draft" in out


def test_without_the_copy_for_this_exit_layer_the_build_says_run_convert(converted, in_tmp, gpu_target):
    from trtspec.builders import build

    fresh = in_tmp / "fresh"
    fresh.mkdir()
    for spec, layers in ((_spec(converted, speculative__layerskip__exit_layer=3), 3),  # convert wrote 2
                         (_spec(_write(fresh, gpu_target, "trtllm-engine")), 2)):    # convert never ran
        with pytest.raises(ModelSourceError) as caught:
            build(spec, dry_run=True)
        message = str(caught.value)
        assert f"no copy of the target's first {layers} layers" in message and "run `trtspec convert`" in message
        assert len(message.strip().splitlines()) == 1
