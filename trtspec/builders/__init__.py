"""`trtspec build`: turn the spec (and convert's checkpoints) into engines/<name>/.

One module per backend (cpu.py, trtllm.py, trtllm_engine.py), engine.json and the target/draft
pairing in engine_json.py, the GPU target as data in contracts.py (+ contract_data/*.json, checked by
upstream.py), the EAGLE-3 head per release in eagle3_head.py, the memory planner in planner.py.
`build()` is the thin layer that executes, running the steps the backend table (trtspec.backends)
names for the spec's backend (builders/steps.py): refuse -> resolve inputs -> plan (GPU backends; refuse what does
not fit) -> render every file in memory -> (dry run: stop) -> write into a staging directory,
smoke-test or run the engine builder there -> rename into place (artifacts.atomic_dir). A re-run
with the same inputs is skipped and says so. This package reads checkpoints and writes engines;
it never touches the model repository or the server.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from trtspec import artifacts, backends
from trtspec.artifacts import Layout
from trtspec.builders import contracts
from trtspec.builders import engine_json as ej
from trtspec.builders.planner import ModelShape, Plan, PlanSettings, plan_memory, require_fit

GPU_BACKENDS = backends.GPU


@dataclass(kw_only=True)
class BuildResult(artifacts.StageResult):
    """The engine stage's StageResult (kind "engine", path the engine directory; planned on a dry
    run, skipped when up to date) with what build rendered, planned, checked and has to say."""

    name: str
    engine: dict[str, Any]
    files: dict[str, str] = field(default_factory=dict)   # extra rendered files: name -> content
    plan: Plan | None = None
    smoke: dict[str, Any] | None = None
    verify: dict[str, Any] | None = None
    commands: list[str] = field(default_factory=list)
    messages: list[str] = field(default_factory=list)

    @property
    def engine_dir(self) -> Path:
        return self.path

    @property
    def dry_run(self) -> bool:
        return self.status == "planned"

    @property
    def skipped(self) -> bool:
        return self.status == "skipped"

    def to_dict(self) -> dict[str, Any]:
        return {"name": self.name, "engine_dir": str(self.engine_dir), "dry_run": self.dry_run,
                "skipped": self.skipped, "engine": self.engine, "files": self.files,
                "plan": self.plan.to_dict() if self.plan else None, "smoke": self.smoke, "verify": self.verify,
                "commands": self.commands, "messages": self.messages}


def engine_name(spec: Any) -> str:
    return artifacts.engine_name(spec.model_name, spec.speculative.mode, spec.build.backend, spec.quantization.fp8)


def plan_for(spec: Any, target_config: dict[str, Any], draft_config: dict[str, Any] | None = None) -> Plan:
    """The memory plan for the spec's engines, given the target's (and draft's/head's) config.json."""
    mtp_layers = 0
    if spec.speculative.mode == "mtp":  # the checkpoint's MTP modules load with the target
        mtp_layers = spec.speculative.mtp.num_layers or int(target_config.get("num_nextn_predict_layers") or 0)
    target = ModelShape.from_config(target_config, extra_layers=mtp_layers)
    mode = spec.speculative.mode
    if mode == "medusa":  # the heads live in the target's engine: per head its ResBlocks and its own lm_head
        from dataclasses import replace

        target = replace(target, extra_params=target.extra_params + _medusa_params(spec, target, draft_config))
    draft, role = None, "draft"
    if mode == "eagle3":
        draft, role = ModelShape.eagle3_head(target, draft_config), "EAGLE-3 head"
    elif mode in ("draft-target", "layerskip") and draft_config:  # layerskip: its first-layers copy (GPU)
        draft = ModelShape.from_config(draft_config)
    return plan_memory(target, PlanSettings.from_spec(spec), draft, role)


def _medusa_params(spec: Any, target: ModelShape, heads_config: dict[str, Any] | None) -> int:
    """Weights of the Medusa heads as TensorRT-LLM's Medusa engine holds them: num_heads x
    (num_layers ResBlocks of hidden x hidden + bias, and a vocab x hidden lm_head each)."""
    from trtspec.spec.medusa import DEFAULT_HEADS, DEFAULT_LAYERS

    config, medusa = heads_config or {}, spec.speculative.medusa
    heads = int(config.get("medusa_num_heads") or medusa.num_heads or DEFAULT_HEADS)
    layers = int(config.get("medusa_num_layers") or medusa.num_layers or DEFAULT_LAYERS)
    h = target.hidden_size
    return heads * (layers * (h * h + h) + target.vocab_size * h)


def plan_inputs(spec: Any) -> Plan:
    """Plan the spec's models from their config.json alone (what `trtspec plan` shows).

    No weights are read or hashed: a 70B deployment is planned before its 140 GB are downloaded.
    The target's shape comes from work/checkpoints/target/config.json when convert has run, else
    from the model source's config.json; an EAGLE-3 head from work/checkpoints/eagle3/config.json,
    else ModelOpt's default one-layer head; mode layerskip's draft (a GPU backend's first-layers copy), the
    target's config with E layers, as convert writes it.
    """
    layout = Layout.from_spec(spec)
    target_config = _config_only(layout.checkpoint("target"), spec.model.source, spec)
    draft_config = None
    if spec.speculative.mode == "eagle3" and (layout.checkpoint("eagle3") / "config.json").is_file():
        draft_config = artifacts.read_json(layout.checkpoint("eagle3") / "config.json")
    elif spec.speculative.mode == "draft-target":
        draft_config = _config_only(layout.checkpoint("draft"), spec.speculative.draft, spec)
    elif spec.speculative.mode == "medusa" and (layout.checkpoint("medusa") / "config.json").is_file():
        draft_config = artifacts.read_json(layout.checkpoint("medusa") / "config.json")
    elif spec.speculative.mode == "layerskip":  # the config.json convert writes for the GPU backends' draft
        from trtspec.convert.first_layers import exit_layer, first_layers_config

        draft_config = first_layers_config(target_config, exit_layer(spec.speculative.layerskip.exit_layer,
                                                                     target_config))
    return plan_for(spec, target_config, draft_config)


def _config_only(checkpoint: Path, source: str, spec: Any) -> dict[str, Any]:
    """config.json of a converted checkpoint, a source directory, or a resolved alias; nothing else read."""
    from trtspec import hub
    from trtspec.errors import ModelSourceError
    from trtspec.models import ALIASES, resolve_model

    if not (checkpoint / "config.json").is_file() and hub.is_hub_id(source):  # its config.json alone
        return artifacts.read_json(hub.snapshot(source, files=("config.json",)) / "config.json")
    for directory in (checkpoint, Path(source).expanduser()):
        if (directory / "config.json").is_file():
            return artifacts.read_json(directory / "config.json")
    if source in ALIASES or source.endswith(".gguf"):  # these become a checkpoint only by conversion
        return resolve_model(source, trust_remote_code=spec.model.trust_remote_code, quiet=True).config
    raise ModelSourceError(f"{source}: no config.json there", fix="give a Hugging Face model directory "
                           "(config.json is enough for `trtspec plan`)")


def _manifest_inputs(spec: Any, inputs: ej.BuildInputs) -> dict[str, Any]:
    return {"spec": {k: spec.model_dump(mode="json")[k] for k in ("model", "speculative", "quantization", "build")},
            "target_sha256": inputs.target.sha256, "draft_sha256": inputs.draft.sha256 if inputs.draft else None}


def build(spec: Any, *, dry_run: bool = False, verify: bool = False, force: bool = False) -> BuildResult:
    """Build engines/<name>/ for the spec's backend; see the module docstring for the steps, and
    trtspec.builders.steps for what each backend does at each."""
    backend = backends.row(spec.build.backend)
    steps = backends.resolve(backend.steps)()
    layout = Layout.from_spec(spec)
    # before any weight is read: what the backend cannot build is one line
    requested = spec
    steps.refuse(spec, target_config := lambda: _config_only(layout.checkpoint("target"), spec.model.source, spec))
    name = engine_name(spec)
    engine_dir = layout.engine_dir(name)
    spec = steps.written_spec(spec, layout, target_config)  # GPU layerskip: draft-target; `requested` is kept
    inputs = ej.resolve_inputs(spec, layout)
    result = BuildResult(kind="engine", path=engine_dir, status="planned" if dry_run else "written", name=name,
                         engine={})
    contract = contracts.for_spec(spec) if backend.gpu else None
    if backend.gpu:
        from trtspec.builders import upstream

        upstream.check_installed(contract)
        result.plan = plan_for(spec, inputs.base_target.config, inputs.draft.config if inputs.draft else None)
        require_fit(result.plan)
    steps.render(spec, contract, name, inputs, engine_dir, result)
    if spec is not requested:
        ej.record_requested(result, requested, inputs)
    if dry_run:
        return result

    # what this machine could do changes the result too (Steps.machine_inputs)
    manifest_inputs = {**_manifest_inputs(requested, inputs), **steps.machine_inputs(result)}
    if not force and (skipped := artifacts.settled("engine", engine_dir, manifest_inputs, dry_run=False)):
        result.status, result.manifest = skipped.status, skipped.manifest
        result.messages.append(f"{engine_dir} is up to date with these inputs; nothing to do (--force rebuilds)")
        return result

    with artifacts.atomic_dir(engine_dir) as staging:
        steps.place(staging, inputs, contract)
        for file_name, content in result.files.items():
            (staging / file_name).write_text(content)
        if "build.sh" in result.files:
            (staging / "build.sh").chmod(0o755)
        artifacts.write_json(staging / artifacts.ENGINE_JSON, result.engine)
        steps.finish(spec, staging, result, contract, verify, engine_dir)
        result.manifest = artifacts.write_manifest(staging, "engine", inputs=manifest_inputs, backend=backend.name,
                                                   mode=requested.speculative.mode, smoke=result.smoke,
                                                   plan_fits=result.plan.fits if result.plan else None)
    return result
