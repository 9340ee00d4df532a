"""Reading a spec file: the YAML, the flag overrides, and paths anchored to the file's directory.

`load_spec()` is the only YAML reader in trtspec; it hands the data to `trtspec.spec.schema.validate_spec`.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from trtspec.errors import SpecError, TrtSpecError
from trtspec.spec.checks import problem_line
from trtspec.spec.schema import DEFAULT_CONFIG, Spec, validate_spec


def set_dotted(data: dict[str, Any], dotted: str, value: Any) -> None:
    """Set `data["a"]["b"] = value` for dotted key "a.b", creating sections as needed."""
    *parents, leaf = dotted.split(".")
    node = data
    for key in parents:
        node = node.setdefault(key, {})
    node[leaf] = value


def spec_file(path: str | Path | None = None) -> Path | None:
    """The file load_spec(path) reads: `path` itself, else ./trtspec.yaml when it exists, else None
    (the built-in defaults)."""
    if path is not None:
        return Path(path)
    return Path(DEFAULT_CONFIG) if Path(DEFAULT_CONFIG).exists() else None


def load_spec(path: str | Path | None = None, overrides: dict[str, Any] | None = None) -> Spec:
    """Read a YAML spec, apply flag overrides (dotted keys; None values are skipped), validate.

    With no path, ./trtspec.yaml is read when it exists and the defaults are used otherwise; a
    path given explicitly must exist.
    """
    import yaml

    from trtspec.prompts import read_text_file

    explicit = path is not None
    path = Path(path) if path is not None else Path(DEFAULT_CONFIG)
    data: dict[str, Any] = {}
    if path.exists():
        try:
            text = read_text_file(path, what="spec file")
        except TrtSpecError as error:  # not UTF-8 (binary, UTF-16), a directory, unreadable
            raise SpecError([str(error)]) from None
        try:
            loaded = yaml.safe_load(text)
        except yaml.YAMLError as error:
            mark = getattr(error, "problem_mark", None)
            where = f" line {mark.line + 1}" if mark else ""
            reason = " ".join(str(getattr(error, "problem", None) or error).split())  # PyYAML's can span lines
            raise SpecError([problem_line(f"{path}:{where}", f"not valid YAML ({reason})",
                                          fix="check the indentation and quoting there")]) from None
        if loaded is not None:
            data = loaded
    elif explicit:
        raise SpecError([f"{path}: no such spec file; create one with `trtspec init`"])
    if not isinstance(data, dict):
        raise SpecError([f"{path}: the top level must be a mapping of sections (got {type(data).__name__})"])
    if path.exists() and isinstance(data, dict) and path.parent.resolve() != Path.cwd().resolve():
        anchor_paths(data, path.parent, {k for k, v in (overrides or {}).items() if v is not None})
    for dotted, value in (overrides or {}).items():
        if value is not None:
            set_dotted(data, dotted, value)
    return validate_spec(data)


# Path fields of a spec. Outputs belong beside the spec file (their defaults too); prompt files
# are anchored when given; model sources (a path, or an alias such as smollm2) only when the
# path exists beside the spec file.
OUTPUT_PATHS = ("workdir", "build.output_dir", "serve.repository")
INPUT_PATHS = ("speculative.eagle3.prompts", "speculative.eagle3.data", "quantization.calibration_prompts", "bench.prompts")
SOURCE_PATHS = ("model.source", "speculative.draft", "speculative.eagle3.head")  # or hub ids: org/name


def anchor_paths(data: dict[str, Any], base: Path, keep: set[str]) -> None:
    """Resolve the relative paths of a spec file's data against the file's directory, in place.

    `trtspec deploy stop -c other/dir/trtspec.yaml` run elsewhere used to look for other/dir's
    server under ./work. Values in `keep` (flags, given relative to the current directory) and
    absolute or ~ paths are left alone; a spec in the current directory changes nothing.
    """
    defaults = Spec().model_dump(mode="json")
    for dotted in OUTPUT_PATHS + INPUT_PATHS + SOURCE_PATHS:
        node, default = data, defaults
        *parents, leaf = dotted.split(".")
        for key in parents:
            node, default = node.get(key, {}), default[key]
            if not isinstance(node, dict):
                break  # a section that is not a mapping: validation reports it
        if not isinstance(node, dict):
            continue
        value = node.get(leaf)
        if value is None and dotted in OUTPUT_PATHS:
            value = default[leaf]
        if dotted in keep or not isinstance(value, str) or value.startswith("~") or Path(value).is_absolute():
            continue
        anchored = base / value
        if dotted in SOURCE_PATHS and not anchored.exists():
            continue
        set_dotted(data, dotted, str(anchored))


def spec_to_yaml(spec: Spec) -> str:
    """The resolved spec as YAML, every field shown."""
    import yaml

    return yaml.safe_dump(spec.model_dump(mode="json"), sort_keys=False)
