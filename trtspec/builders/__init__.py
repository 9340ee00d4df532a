"""`trtspec build`: turn the spec (and convert's checkpoints) into engines/<name>/.

One module per backend (cpu.py, trtllm.py, trtllm_engine.py), engine.json and the target/draft
pairing in engine_json.py, the GPU target as data in contracts.py (+ contract_data/*.json, checked by
upstream.py), the EAGLE-3 head per release in eagle3_head.py, the memory planner in planner.py.
`build()` is the thin layer that executes: resolve inputs -> plan (GPU backends; refuse what does
not fit) -> render every file in memory -> (dry run: stop) -> write into a staging directory,
smoke-test or run the engine builder there -> rename into place (artifacts.atomic_dir). A re-run
with the same inputs is skipped and says so. This package reads checkpoints and writes engines;
it never touches the model repository or the server.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from trtspec import artifacts
from trtspec.artifacts import Layout
from trtspec.builders import contracts
from trtspec.builders import engine_json as ej
from trtspec.builders.planner import ModelShape, Plan, PlanSettings, plan_memory, require_fit

GPU_BACKENDS = ("trtllm", "trtllm-engine")


@dataclass
class BuildResult:
    name: str
    engine_dir: Path
    engine: dict[str, Any]
    files: dict[str, str] = field(default_factory=dict)   # extra rendered files: name -> content
    plan: Plan | None = None
    smoke: dict[str, Any] | None = None
    verify: dict[str, Any] | None = None
    commands: list[str] = field(default_factory=list)
    dry_run: bool = False
    skipped: bool = False
    messages: list[str] = field(default_factory=list)

    def to_dict(self) -> dict[str, Any]:
        return {"name": self.name, "engine_dir": str(self.engine_dir), "dry_run": self.dry_run,
                "skipped": self.skipped, "engine": self.engine, "files": self.files,
                "plan": self.plan.to_dict() if self.plan else None, "smoke": self.smoke, "verify": self.verify,
                "commands": self.commands, "messages": self.messages}


def engine_name(spec: Any) -> str:
    return artifacts.engine_name(spec.model_name, spec.speculative.mode, spec.build.backend, spec.quantization.fp8)


def plan_for(spec: Any, target_config: dict[str, Any], draft_config: dict[str, Any] | None = None) -> Plan:
    """The memory plan for the spec's engines, given the target's (and draft's/head's) config.json."""
    target = ModelShape.from_config(target_config)
    mode = spec.speculative.mode
    draft, role = None, "draft"
    if mode == "eagle3":
        draft, role = ModelShape.eagle3_head(target, draft_config), "EAGLE-3 head"
    elif mode == "draft-target" and draft_config:
        draft = ModelShape.from_config(draft_config)
    return plan_memory(target, PlanSettings.from_spec(spec), draft, role)


def plan_inputs(spec: Any) -> Plan:
    """Plan the spec's models from their config.json alone (what `trtspec plan` shows).

    No weights are read or hashed: a 70B deployment is planned before its 140 GB are downloaded.
    The target's shape comes from work/checkpoints/target/config.json when convert has run, else
    from the model source's config.json; an EAGLE-3 head from work/checkpoints/eagle3/config.json,
    else ModelOpt's default one-layer head.
    """
    layout = Layout.from_spec(spec)
    target_config = _config_only(layout.checkpoint("target"), spec.model.source, spec)
    draft_config = None
    if spec.speculative.mode == "eagle3" and (layout.checkpoint("eagle3") / "config.json").is_file():
        draft_config = artifacts.read_json(layout.checkpoint("eagle3") / "config.json")
    elif spec.speculative.mode == "draft-target":
        draft_config = _config_only(layout.checkpoint("draft"), spec.speculative.draft, spec)
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
    """Build engines/<name>/ for the spec's backend; see the module docstring for the steps."""
    from trtspec.builders import cpu, trtllm_engine

    backend, mode = spec.build.backend, spec.speculative.mode
    if backend == "trtllm-engine":
        trtllm_engine.refuse_unsupported(mode)
    layout = Layout.from_spec(spec)
    if backend == "cpu":  # before any weight is read: an architecture the engine cannot run is one line
        from trtspec.runtime.checkpoints.architectures import refuse_unrunnable

        refuse_unrunnable(_config_only(layout.checkpoint("target"), spec.model.source, spec), spec.build.max_seq_len,
                          f"model.source {spec.model.source}")
    name = engine_name(spec)
    engine_dir = layout.engine_dir(name)
    inputs = ej.resolve_inputs(spec, layout)
    result = BuildResult(name=name, engine_dir=engine_dir, engine={}, dry_run=dry_run)
    contract = contracts.for_spec(spec) if backend in GPU_BACKENDS else None
    if backend in GPU_BACKENDS:
        from trtspec.builders import upstream

        upstream.check_installed(contract)
        result.plan = plan_for(spec, inputs.base_target.config, inputs.draft.config if inputs.draft else None)
        require_fit(result.plan)

    if backend == "cpu":
        result.engine = ej.engine_json(spec, name, inputs)
        result.engine["runtime"].update(cpu.runtime_options(spec))
    elif backend == "trtllm":
        from trtspec.builders.trtllm import tree_note

        result.engine, result.files = _trtllm_package(spec, contract, name, inputs, engine_dir)
        if "forward_note" in result.engine["trtllm"].get("eagle3_head", {}):
            result.messages.append(result.engine["trtllm"]["eagle3_head"]["forward_note"])
        if tree_note(spec, contract):
            result.messages.append(tree_note(spec, contract))
            result.engine["trtllm"]["tree_note"] = tree_note(spec, contract)
    else:
        from trtspec.builders.trtllm import tree_note

        commands = trtllm_engine.engine_commands(spec, contract)
        result.commands = [trtllm_engine.subproc.format_command(command) for command in commands]
        result.files["build.sh"] = trtllm_engine.render_build_sh(commands, contract)
        if tree_note(spec, contract):  # draft-target: the BLS drafts chains of max_draft_len
            result.messages.append(tree_note(spec, contract))
        built = trtllm_engine.trtllm_build_available() and not dry_run
        result.engine = ej.engine_json(spec, name, inputs, target_path="hf/target", draft_path="hf/draft",
                                       trtllm_engine=trtllm_engine.engine_section(spec, contract, commands, built,
                                                                                  plan=result.plan))
    if dry_run:
        return result

    manifest_inputs = _manifest_inputs(spec, inputs)
    # What this machine could do changes the result too: a smoke test skipped before trtspec.runtime
    # landed, or build.sh not run before trtllm-build was on PATH, is redone once it can be.
    if backend == "cpu":
        manifest_inputs["smoke_possible"] = cpu.runtime_import_error() is None
    elif backend == "trtllm-engine":
        manifest_inputs["trtllm_build_on_path"] = result.engine["trtllm_engine"]["built"]
    if not force and artifacts.is_up_to_date(engine_dir, manifest_inputs):
        result.skipped = True
        result.messages.append(f"{engine_dir} is up to date with these inputs; nothing to do (--force rebuilds)")
        return result

    with artifacts.atomic_dir(engine_dir) as staging:
        _place_checkpoints(staging, backend, mode, inputs, contract)
        for file_name, content in result.files.items():
            (staging / file_name).write_text(content)
        if "build.sh" in result.files:
            (staging / "build.sh").chmod(0o755)
        artifacts.write_json(staging / artifacts.ENGINE_JSON, result.engine)
        if backend == "cpu":
            result.smoke = cpu.smoke_test(staging)
            if result.smoke["status"] == "skipped":
                result.messages.append(f"smoke generation skipped: {result.smoke['reason']}")
        elif backend == "trtllm" and verify:
            from trtspec.builders import trtllm

            result.verify = trtllm.verify(staging, result.engine["trtllm"]["llm_api_options"], contract)
        elif backend == "trtllm-engine":
            if result.engine["trtllm_engine"]["built"]:
                trtllm_engine.run_commands(commands, staging)
            else:
                result.messages.append(
                    f"trtllm-build is not on PATH: wrote {engine_dir / 'build.sh'} with the exact commands; run "
                    f"`bash {engine_dir / 'build.sh'}` inside {contract.image}")
        artifacts.write_manifest(staging, "engine", inputs=manifest_inputs, backend=backend, mode=mode,
                                 smoke=result.smoke, plan_fits=result.plan.fits if result.plan else None)
    return result


def _trtllm_package(spec: Any, contract: Any, name: str, inputs: ej.BuildInputs,
                    engine_dir: Path) -> tuple[dict[str, Any], dict[str, str]]:
    """engine.json and llm_api_options.yaml of the LLM-API package, for the spec's release."""
    from trtspec.builders import eagle3_head, trtllm, upstream

    capture = None
    if inputs.draft_kind == "eagle3":
        capture = eagle3_head.layers_to_capture(inputs.draft.config, inputs.base_target.config, contract)
    draft = "draft" if inputs.draft is not None else None
    relative = trtllm.checked_options(spec, contract, target="target", draft=draft, layers_to_capture=capture)
    absolute = trtllm.checked_options(spec, contract, target=str((engine_dir / "target").resolve()),
                                      draft=str((engine_dir / "draft").resolve()) if draft else None,
                                      layers_to_capture=capture)
    section = {"tensorrt_llm_version": contract.version, "container": contract.image,
               "field_source": upstream.llm_api_fields(contract)["source"],
               "contract": {key: contract.source(key) for key in ("llm_api", "eagle3_head")},
               "llm_api_options_file": "llm_api_options.yaml", "llm_api_options": relative}
    if inputs.draft_kind == "eagle3":
        section["eagle3_head"] = {"layer_prefix": contract.head["layer_prefix"], "layers_to_capture": capture}
        if eagle3_head.forward_note(inputs.draft.config):
            section["eagle3_head"]["forward_note"] = eagle3_head.forward_note(inputs.draft.config)
    if upstream.tensorrt_llm_version() is not None:  # inside the GPU container: ask the release itself
        section["decoding_check"] = upstream.introspect_decoding(contract)
    engine = ej.engine_json(spec, name, inputs, trtllm=section)
    return engine, {"llm_api_options.yaml": trtllm.render_yaml(absolute, contract)}


def _place_checkpoints(staging: Path, backend: str, mode: str, inputs: ej.BuildInputs, contract: Any) -> None:
    """Link (or, for a release's EAGLE-3 head, rewrite) the input checkpoints into the staged engine."""
    from trtspec.builders import cpu, eagle3_head

    if backend == "trtllm-engine":
        cpu.link_tree(inputs.target.path, staging / "hf" / "target")
        if inputs.draft is not None:
            cpu.link_tree(inputs.draft.path, staging / "hf" / "draft")
    elif backend == "trtllm" and inputs.draft_kind == "eagle3":
        cpu.link_tree(inputs.target.path, staging / "target")
        eagle3_head.write_head(inputs.draft.path, staging / "draft", contract)
    else:
        cpu.write_bundle(staging, inputs)
