"""The in-container probe: does the installed TensorRT-LLM know every LLM-API key trtspec wrote?

Runs inside the GPU container before tritonserver starts (launch.container_prelude, and
scripts/gpu-smoke.sh), as `python3 -m trtspec.serve.probe ENGINE_DIR`:

1. read the installed tensorrt_llm version (package metadata, no import) and the release trtspec
   wrote for (engine.json `trtllm.tensorrt_llm_version`, with its contract);
2. read the fields of the installed release's own config classes (pydantic `model_fields` and
   their aliases: TorchLlmArgs, KvCacheConfig, CudaGraphConfig, the speculative config class the
   contract names for the mode) and diff them against the contract's lists;
3. check every key trtspec wrote (engine.json `trtllm.llm_api_options`, what model.yaml carries)
   against the installed fields, top level first, then kv_cache_config, cuda_graph_config,
   speculative_config; then the decoding_type through the release's own dispatch
   (DecodingBaseConfig.from_dict, what update_llm_args_with_extra_dict calls).

It prints one line and exits 0 when every written key is known, or prints one line naming the
first key the installed release does not know and exits 3, so the container stops before the
server loads anything. It never edits what trtspec wrote. Nothing here needs a GPU: it imports only
tensorrt_llm.llmapi.llm_args (with torch, as the release does).
"""

from __future__ import annotations

import json
import sys
from importlib.metadata import PackageNotFoundError, version
from pathlib import Path
from typing import Any

from trtspec.builders import contracts, upstream

REFUSED = 3
SECTIONS = ("kv_cache_config", "cuda_graph_config")


def installed_version() -> str | None:
    try:
        return version("tensorrt_llm")
    except PackageNotFoundError:
        return None


def installed_fields(llm_args: Any, contract: contracts.Contract) -> dict[str, Any]:
    """Field names (and aliases) per section, read from the installed release's classes."""
    args_cls = getattr(llm_args, "TorchLlmArgs", None) or llm_args.LlmArgs
    decoding = {mode: upstream._names(getattr(llm_args, entry["class"]))
                for mode, entry in contract.llm_api["decoding"].items() if hasattr(llm_args, entry["class"])}
    return {"llm_args": upstream._names(args_cls), "kv_cache_config": upstream._names(llm_args.KvCacheConfig),
            "cuda_graph_config": upstream._names(llm_args.CudaGraphConfig), "decoding": decoding}


def contract_diff(fields: dict[str, Any], contract: contracts.Contract) -> list[str]:
    """`section.name` for every contract field the installed classes lack (informational)."""
    api, missing = contract.llm_api, []
    for section in ("llm_args", *SECTIONS):
        missing += [f"{section}.{name}" for name in api[section] if name not in fields[section]]
    for mode, entry in api["decoding"].items():
        have = fields["decoding"].get(mode)
        missing += ([entry["class"]] if have is None else
                    [f"{entry['class']}.{name}" for name in entry["fields"] if name not in have])
    return missing


def first_unknown(options: dict[str, Any], fields: dict[str, Any], mode: str) -> str | None:
    """The first written key (dotted) the installed fields do not hold, in the order written."""
    for key in options:
        if key not in fields["llm_args"]:
            return key
    for section in SECTIONS:
        for key in options.get(section) or {}:
            if key not in fields[section]:
                return f"{section}.{key}"
    speculative = options.get("speculative_config") or {}
    if speculative:
        have = fields["decoding"].get(mode)
        if have is None:
            return "speculative_config"
        for key in speculative:
            if key not in have:
                return f"speculative_config.{key}"
    return None


def dispatch_problem(llm_args: Any, speculative: dict[str, Any]) -> str | None:
    """Why the release's own dispatch refuses the written decoding_type, or None."""
    base = getattr(llm_args, "DecodingBaseConfig", None)
    if not speculative or base is None or not hasattr(base, "from_dict"):
        return None
    try:
        base.from_dict(dict(speculative))
    except Exception as error:  # TensorRT-LLM: ValueError("Invalid decoding type: ...")
        if "decoding type" in str(error).lower():
            return str(error).splitlines()[0]
    return None  # other validation (paths, values) is the server's to report


def probe(engine_dir: Path) -> tuple[int, str]:
    """(exit status, the one line to print)."""
    engine = json.loads((engine_dir / "engine.json").read_text())
    section = engine.get("trtllm") or {}
    options = section.get("llm_api_options")
    if options is None:
        return 0, f"probe: {engine_dir.name} writes no LLM-API options (backend {engine.get('backend')}); nothing to check"
    wrote = section.get("tensorrt_llm_version") or contracts.default_version()
    contract = contracts.load(wrote)
    installed = installed_version()
    if installed is None:
        return REFUSED, (f"probe: refusing to start: tensorrt_llm is not installed here; {engine_dir.name} was "
                         f"written for TensorRT-LLM {wrote} ({contract.image})")
    try:
        from tensorrt_llm.llmapi import llm_args
    except Exception as error:
        return REFUSED, f"probe: refusing to start: tensorrt_llm {installed} does not import ({error})"
    mode = engine.get("mode", "none")
    fields = installed_fields(llm_args, contract)
    unknown = first_unknown(options, fields, mode)
    speculative = options.get("speculative_config") or {}
    if unknown is None:
        problem = dispatch_problem(llm_args, speculative)
        if problem is not None:
            unknown = f"speculative_config.decoding_type {speculative.get('decoding_type')!r} ({problem})"
    missing = contract_diff(fields, contract)
    if unknown is not None:
        return REFUSED, (f"probe: refusing to start: tensorrt_llm {installed} does not know {unknown}, written for "
                         f"TensorRT-LLM {wrote} (contract_data/trtllm-{wrote}.json); rebuild with "
                         f"build.trtllm_version for this release, or run {contract.image}")
    drift = f"; the contract's {', '.join(missing[:3])}{' ...' if len(missing) > 3 else ''} not in it" if missing else ""
    same = "" if installed.split("+")[0] == wrote else f" (written for {wrote})"
    return 0, (f"probe: tensorrt_llm {installed}{same} knows every key {engine_dir.name} wrote "
               f"({_count(options)} keys){drift}")


def check_before_start(engine_dir: Path) -> str:
    """`trtspec deploy` (local, inside the GPU container): run the probe as the container does, in
    its own process (it imports TensorRT-LLM); its line, or IncompatibleArtifactError with it."""
    from trtspec import subproc
    from trtspec.errors import IncompatibleArtifactError

    result = subproc.run([sys.executable, "-m", "trtspec.serve.probe", str(engine_dir)], timeout=600, check=False)
    line = (result.stdout or result.stderr).strip().splitlines()[-1:] or ["probe: no output"]
    if result.returncode != 0:
        raise IncompatibleArtifactError(line[0].removeprefix("probe: "),
                                        fix="rebuild for the installed TensorRT-LLM (build.trtllm_version), or "
                                            "serve in the container the build names")
    return line[0]


def _count(options: dict[str, Any]) -> int:
    return sum(len(value) if isinstance(value, dict) else 1 for value in options.values())


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    if len(args) != 1:
        print("usage: python3 -m trtspec.serve.probe ENGINE_DIR", file=sys.stderr)
        return 2
    status, line = probe(Path(args[0]))
    print(line, file=sys.stderr if status else sys.stdout)
    return status


if __name__ == "__main__":
    sys.exit(main())
