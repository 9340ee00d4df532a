"""What each backend does at each step of `trtspec build` (trtspec.builders.build runs the steps).

The steps, in order: `refuse` (before any weight is read), `written_spec` (the spec whose engines
are written: the GPU backends write mode layerskip as draft-target), `render` (engine.json, extra files,
commands and messages, all in memory: a dry run stops after it), `machine_inputs` (what this
machine could do, part of the manifest's inputs so that a re-run redoes what it can do now),
`place` (the checkpoints into the staging directory) and `finish` (the smoke test, the check or
the engine build, inside the staging directory). trtspec.backends names the class per backend.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

from trtspec.builders import engine_json as ej


class Steps:
    """The defaults: nothing refused, nothing machine-dependent, the bundle written as the cpu engine reads it."""

    def refuse(self, spec: Any, target_config: Callable[[], dict[str, Any]]) -> None:
        """Refuse in one line what this backend cannot build; `target_config()` reads config.json only."""

    def written_spec(self, spec: Any, layout: Any, target_config: Callable[[], dict[str, Any]]) -> Any:
        """The spec whose engines this backend writes; the requested one unless it has no such mode."""
        return spec

    def render(self, spec: Any, contract: Any, name: str, inputs: ej.BuildInputs, engine_dir: Path,
               result: Any) -> None:
        raise NotImplementedError

    def machine_inputs(self, result: Any) -> dict[str, Any]:
        return {}

    def place(self, staging: Path, inputs: ej.BuildInputs, contract: Any) -> None:
        from trtspec.builders import cpu

        cpu.write_bundle(staging, inputs)

    def finish(self, spec: Any, staging: Path, result: Any, contract: Any, verify: bool, engine_dir: Path) -> None:
        """Work inside the staged engine before it is renamed into place."""


class CpuSteps(Steps):
    def refuse(self, spec: Any, target_config: Callable[[], dict[str, Any]]) -> None:
        from trtspec.runtime.checkpoints.architectures import refuse_unrunnable

        refuse_unrunnable(target_config(), spec.build.max_seq_len, f"model.source {spec.model.source}")

    def render(self, spec: Any, contract: Any, name: str, inputs: ej.BuildInputs, engine_dir: Path,
               result: Any) -> None:
        from trtspec.builders import cpu

        result.engine = ej.engine_json(spec, name, inputs)
        result.engine["runtime"].update(cpu.runtime_options(spec))

    def machine_inputs(self, result: Any) -> dict[str, Any]:
        from trtspec.builders import cpu

        # a smoke test skipped before trtspec.runtime could load is redone once it can
        return {"smoke_possible": cpu.runtime_import_error() is None}

    def finish(self, spec: Any, staging: Path, result: Any, contract: Any, verify: bool, engine_dir: Path) -> None:
        from trtspec.builders import cpu

        result.smoke = cpu.smoke_test(staging)
        if result.smoke["status"] == "skipped":
            result.messages.append(f"smoke generation skipped: {result.smoke['reason']}")


class _GpuSteps(Steps):
    def written_spec(self, spec: Any, layout: Any, target_config: Callable[[], dict[str, Any]]) -> Any:
        if spec.speculative.mode == "layerskip":  # no early-exit drafting upstream: a first-layers draft
            return ej.layerskip_as_draft_target(spec, layout, target_config())
        return spec


class LlmApiSteps(_GpuSteps):
    def refuse(self, spec: Any, target_config: Callable[[], dict[str, Any]]) -> None:
        from trtspec.builders import contracts, trtllm

        trtllm.refuse_unmapped(spec, contracts.for_spec(spec))  # a mode the release has no config for

    def render(self, spec: Any, contract: Any, name: str, inputs: ej.BuildInputs, engine_dir: Path,
               result: Any) -> None:
        from trtspec.builders.trtllm import tree_note

        result.engine, result.files = _llm_api_package(spec, contract, name, inputs, engine_dir)
        if "forward_note" in result.engine["trtllm"].get("eagle3_head", {}):
            result.messages.append(result.engine["trtllm"]["eagle3_head"]["forward_note"])
        if tree_note(spec, contract):
            result.messages.append(tree_note(spec, contract))
            result.engine["trtllm"]["tree_note"] = tree_note(spec, contract)

    def place(self, staging: Path, inputs: ej.BuildInputs, contract: Any) -> None:
        from trtspec.builders import cpu, eagle3_head

        if inputs.draft_kind != "eagle3" or inputs.draft is None:
            return super().place(staging, inputs, contract)
        cpu.link_tree(inputs.target.path, staging / "target")
        eagle3_head.write_head(inputs.draft.path, staging / "draft", contract)  # the release's head layout

    def finish(self, spec: Any, staging: Path, result: Any, contract: Any, verify: bool, engine_dir: Path) -> None:
        if verify:
            from trtspec.builders import trtllm

            result.verify = trtllm.verify(staging, result.engine["trtllm"]["llm_api_options"], contract)


class EngineSteps(_GpuSteps):
    def refuse(self, spec: Any, target_config: Callable[[], dict[str, Any]]) -> None:
        from trtspec.builders import trtllm_engine

        trtllm_engine.refuse_unsupported(spec.speculative.mode)

    def render(self, spec: Any, contract: Any, name: str, inputs: ej.BuildInputs, engine_dir: Path,
               result: Any) -> None:
        from trtspec.builders import trtllm_engine
        from trtspec.builders.trtllm import tree_note

        commands = trtllm_engine.engine_commands(spec, contract)
        result.commands = [trtllm_engine.subproc.format_command(command) for command in commands]
        result.files["build.sh"] = trtllm_engine.render_build_sh(commands, contract)
        if tree_note(spec, contract):  # draft-target: the BLS drafts chains of max_draft_len
            result.messages.append(tree_note(spec, contract))
        built = trtllm_engine.trtllm_build_available() and not result.dry_run
        result.engine = ej.engine_json(spec, name, inputs, target_path="hf/target", draft_path="hf/draft",
                                       trtllm_engine=trtllm_engine.engine_section(spec, contract, commands, built,
                                                                                  plan=result.plan))

    def machine_inputs(self, result: Any) -> dict[str, Any]:
        # build.sh not run before trtllm-build was on PATH is run once it is
        return {"trtllm_build_on_path": result.engine["trtllm_engine"]["built"]}

    def place(self, staging: Path, inputs: ej.BuildInputs, contract: Any) -> None:
        from trtspec.builders import cpu

        cpu.link_tree(inputs.target.path, staging / "hf" / "target")
        if inputs.draft is not None:
            cpu.link_tree(inputs.draft.path, staging / "hf" / "draft")

    def finish(self, spec: Any, staging: Path, result: Any, contract: Any, verify: bool, engine_dir: Path) -> None:
        from trtspec.builders import trtllm_engine

        if result.engine["trtllm_engine"]["built"]:
            trtllm_engine.run_commands(trtllm_engine.engine_commands(spec, contract), staging)
        else:
            result.messages.append(
                f"trtllm-build is not on PATH: wrote {engine_dir / 'build.sh'} with the exact commands; run "
                f"`bash {engine_dir / 'build.sh'}` inside {contract.image}")


def _llm_api_package(spec: Any, contract: Any, name: str, inputs: ej.BuildInputs,
                     engine_dir: Path) -> tuple[dict[str, Any], dict[str, str]]:
    """engine.json and llm_api_options.yaml of the LLM-API package, for the spec's release."""
    from trtspec.builders import eagle3_head, trtllm, upstream

    capture = None
    head = inputs.draft if inputs.draft_kind == "eagle3" else None  # an EAGLE-3 head, in the release's layout
    if spec.speculative.mode == "mtp":  # the MTP modules are the served target's own
        trtllm.refuse_without_mtp(inputs.target.path)
    if head is not None:
        capture = eagle3_head.layers_to_capture(head.config, inputs.base_target.config, contract)
    draft = "draft" if inputs.draft is not None else None
    relative = trtllm.checked_options(spec, contract, target="target", draft=draft, layers_to_capture=capture)
    absolute = trtllm.checked_options(spec, contract, target=str((engine_dir / "target").resolve()),
                                      draft=str((engine_dir / "draft").resolve()) if draft else None,
                                      layers_to_capture=capture)
    section = {"tensorrt_llm_version": contract.version, "container": contract.image,
               "field_source": upstream.llm_api_fields(contract)["source"],
               "contract": {key: contract.source(key) for key in ("llm_api", "eagle3_head")},
               "llm_api_options_file": "llm_api_options.yaml", "llm_api_options": relative}
    if head is not None:
        section["eagle3_head"] = {"layer_prefix": contract.head["layer_prefix"], "layers_to_capture": capture}
        if eagle3_head.forward_note(head.config):
            section["eagle3_head"]["forward_note"] = eagle3_head.forward_note(head.config)
    if upstream.tensorrt_llm_version() is not None:  # inside the GPU container: ask the release itself
        section["decoding_check"] = upstream.introspect_decoding(contract)
    engine = ej.engine_json(spec, name, inputs, trtllm=section)
    return engine, {"llm_api_options.yaml": trtllm.render_yaml(absolute, contract)}
