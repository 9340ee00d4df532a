"""Checks every name trtspec writes into a TensorRT-LLM artifact against that release's contract.

The names themselves live in data (contract_data/trtllm-<version>.json, loaded by contracts.py), each
list citing the upstream file at the release tag. Here they are enforced: every rendered
LLM-API option (`check_llm_api_options`), every `build.sh` flag (`check_command`) and the
EAGLE-3 head's tensor names (`check_head_tensors`). Nothing is written that fails a check.

When `tensorrt_llm` is importable (inside the GPU container), `llm_api_fields()` reads the field
names from its own pydantic classes instead, and `introspect_decoding()` runs each decoding_type
trtspec writes through TensorRT-LLM's own YAML path (`update_llm_args_with_extra_dict`, what
Triton's llmapi model.py calls) and compares the resulting class's own `decoding_type` with the
contract: a string the installed release rejects, or maps to another class, fails.
"""

from __future__ import annotations

from typing import Any

from trtspec.builders.contracts import Contract
from trtspec.errors import IncompatibleArtifactError

BUG_FIX = "this is a trtspec bug; report it with the TensorRT-LLM version"


def tensorrt_llm_version() -> str | None:
    """The installed tensorrt_llm version, or None (the usual case off the GPU container)."""
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("tensorrt_llm")
    except PackageNotFoundError:
        return None


def check_installed(contract: Contract) -> None:
    """Inside a container, the installed TensorRT-LLM must be the release the contract is for."""
    installed = tensorrt_llm_version()
    if installed is not None and installed.split("+")[0] != contract.version:
        raise IncompatibleArtifactError(
            f"this environment has tensorrt_llm {installed}; build.trtllm_version is {contract.version}",
            fix=f"set build.trtllm_version to the installed release (or build inside {contract.image})")


def pinned_fields(contract: Contract) -> dict[str, Any]:
    """The contract's field lists in the shape check_llm_api_options takes."""
    api = contract.llm_api
    return {"source": f"contract {contract.version}: {api['source']}",
            "llm_args": frozenset(api["llm_args"]), "kv_cache_config": frozenset(api["kv_cache_config"]),
            "cuda_graph_config": frozenset(api["cuda_graph_config"]),
            "decoding": {entry["decoding_type"]: frozenset(entry["fields"]) for entry in api["decoding"].values()}}


def llm_api_fields(contract: Contract) -> dict[str, Any]:
    """Field names per LLM-API section: from tensorrt_llm's classes when importable, else the contract."""
    try:
        from tensorrt_llm.llmapi import llm_args  # heavy; only in the GPU container
    except Exception:  # not installed, or the PyPI stub without NVIDIA's index
        return pinned_fields(contract)
    args_cls = getattr(llm_args, "TorchLlmArgs", None) or llm_args.LlmArgs
    decoding = {entry["decoding_type"]: _names(getattr(llm_args, entry["class"]))
                for entry in contract.llm_api["decoding"].values() if hasattr(llm_args, entry["class"])}
    return {"source": f"introspected: tensorrt_llm {tensorrt_llm_version()}",
            "llm_args": _names(args_cls), "kv_cache_config": _names(llm_args.KvCacheConfig),
            "cuda_graph_config": _names(llm_args.CudaGraphConfig), "decoding": decoding}


def _names(model_cls: Any) -> frozenset[str]:
    """A pydantic class's field names plus their validation aliases (AliasChoices included)."""
    names = set(model_cls.model_fields)
    for info in model_cls.model_fields.values():
        alias = info.validation_alias
        choices = getattr(alias, "choices", None)
        if isinstance(alias, str):
            names.add(alias)
        elif choices:
            names.update(c for c in choices if isinstance(c, str))
    # decoding_type is a ClassVar in 1.x releases (not a model field) and a field in later ones
    return frozenset(names | ({"decoding_type"} if hasattr(model_cls, "decoding_type") else set()))


def class_decoding_type(config_cls: Any) -> str | None:
    """A decoding config class's own decoding_type: a ClassVar (1.1, 1.2) or a Literal field default."""
    field = getattr(config_cls, "model_fields", {}).get("decoding_type")
    if field is not None:
        return field.default
    value = getattr(config_cls, "decoding_type", None)
    return value if isinstance(value, str) else None


def introspect_decoding(contract: Contract) -> dict[str, str]:
    """Run each decoding_type of the contract through the installed TensorRT-LLM's YAML path.

    Returns {mode: "<decoding_type> -> <class> (<class's own decoding_type>)"}; raises
    IncompatibleArtifactError when the installed release rejects the string or builds a class
    whose own decoding_type differs from the contract's. Needs tensorrt_llm (GPU container).
    """
    from tensorrt_llm.llmapi.llm_utils import update_llm_args_with_extra_dict

    report = {}
    for mode, entry in contract.llm_api["decoding"].items():
        extra = {"speculative_config": {"decoding_type": entry["decoding_type"], "max_draft_len": 2}}
        try:
            config = update_llm_args_with_extra_dict({}, extra)["speculative_config"]
        except Exception as error:  # TensorRT-LLM raises ValueError("Invalid decoding type: ...")
            raise IncompatibleArtifactError(
                f"tensorrt_llm {tensorrt_llm_version()} rejects decoding_type {entry['decoding_type']!r} ({error})",
                fix=f"set build.trtllm_version to the installed release (contract {contract.version} is for "
                    f"another one)") from None
        own = class_decoding_type(type(config))
        if type(config).__name__ != entry["class"] or own != entry["class_decoding_type"]:
            raise IncompatibleArtifactError(
                f"tensorrt_llm {tensorrt_llm_version()} maps decoding_type {entry['decoding_type']!r} to "
                f"{type(config).__name__} (decoding_type {own!r}); contract {contract.version} expects "
                f"{entry['class']} ({entry['class_decoding_type']!r})",
                fix="set build.trtllm_version to the installed release")
        report[mode] = f"{entry['decoding_type']} -> {type(config).__name__} ({own})"
    return report


def check_llm_api_options(options: dict[str, Any], contract: Contract, fields: dict[str, Any] | None = None) -> None:
    """Raise IncompatibleArtifactError naming the first key or decoding_type not in the field lists."""
    fields = fields or llm_api_fields(contract)
    where = fields["source"]
    _check_keys("llm_api_options", options, fields["llm_args"], where)
    _check_keys("kv_cache_config", options.get("kv_cache_config") or {}, fields["kv_cache_config"], where)
    _check_keys("cuda_graph_config", options.get("cuda_graph_config") or {}, fields["cuda_graph_config"], where)
    speculative = options.get("speculative_config")
    if speculative:
        decoding_type = speculative.get("decoding_type")
        accepted = contract.llm_api["dispatch"]["names"]
        if decoding_type not in fields["decoding"] or decoding_type not in accepted:
            raise IncompatibleArtifactError(
                f"speculative_config.decoding_type {decoding_type!r}: TensorRT-LLM {contract.version} accepts "
                f"{sorted(set(accepted) & set(fields['decoding']))} ({where})", fix=BUG_FIX)
        _check_keys("speculative_config", speculative, fields["decoding"][decoding_type], where)


def _check_keys(section: str, data: dict[str, Any], allowed: frozenset[str], where: str) -> None:
    unknown = sorted(set(data) - set(allowed))
    if unknown:
        raise IncompatibleArtifactError(f"{section}: {', '.join(unknown)} not a field of the LLM API ({where})",
                                        fix=BUG_FIX)


def check_head_tensors(names: set[str], contract: Contract) -> None:
    """The EAGLE-3 head's tensor names are exactly what this release's loader binds."""
    head = contract.head
    missing = sorted(set(head["tensors"]) - names)
    unknown = sorted(names - set(head["tensors"]) - set(head["optional_tensors"]))
    if missing or unknown:
        raise IncompatibleArtifactError(
            f"EAGLE-3 head for TensorRT-LLM {contract.version}: missing {missing}, unexpected {unknown} "
            f"({head['source']})", fix=BUG_FIX)


def check_command(command: list[str], allowed: dict[str, list[str] | None], booleans: list[str] | tuple = (),
                  where: str = "") -> None:
    """Check every `--flag value` of a command line against a contract's flag table.

    Raises IncompatibleArtifactError naming the unknown flag or the value outside its choices.
    """
    index = 0
    args = command[2:] if command[:1] == ["python3"] else command[1:]
    while index < len(args):
        flag = args[index]
        if flag not in allowed:
            raise IncompatibleArtifactError(f"{command[0]}: flag {flag} is not in the contract ({where})",
                                            fix=BUG_FIX)
        if flag in booleans:
            index += 1
            continue
        value = args[index + 1]
        choices = allowed[flag]
        if choices is not None and value not in choices:
            raise IncompatibleArtifactError(f"{flag} {value}: must be one of {sorted(choices)} ({where})")
        index += 2
