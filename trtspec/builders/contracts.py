"""The GPU target as data: which container carries which TensorRT-LLM, and what that release accepts.

Two kinds of JSON file under contract_data/ are the one source of truth for every name trtspec writes
into a GPU artifact:

- containers.json: Triton container tag -> TensorRT-LLM, ModelOpt, transformers, Python, torch
  (with the upstream files they were read from). Its `default` is the container the Dockerfile
  builds FROM, and so the default `build.trtllm_version`.
- trtllm-<version>.json: one per supported TensorRT-LLM release: LLM-API field names (top level,
  kv_cache_config, cuda_graph_config, each speculative config), the decoding_type strings its YAML
  path accepts, the EAGLE-3 head's weight names and default captured layers, trtllm-build and
  quantize.py flags, and the Triton template keys. Every section cites `repo/path@tag` and says
  what was read (`read`).

This module only loads and answers questions about that data; upstream.py checks artifacts
against it, and the builders ask it what to write.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from functools import cache
from pathlib import Path
from typing import Any

from trtspec.errors import IncompatibleArtifactError

DATA_DIR = Path(__file__).with_name("contract_data")
IMAGE = "nvcr.io/nvidia/tritonserver:{tag}-trtllm-python-py3"


@cache
def containers() -> dict[str, Any]:
    """containers.json as data (tag -> versions)."""
    return json.loads((DATA_DIR / "containers.json").read_text())


def supported_versions() -> tuple[str, ...]:
    """TensorRT-LLM releases with a contract file, oldest first."""
    found = [path.stem.removeprefix("trtllm-") for path in DATA_DIR.glob("trtllm-*.json")]
    return tuple(sorted(found, key=lambda v: tuple(int(part) for part in v.split("."))))


def default_container() -> str:
    return containers()["default"]


def default_version() -> str:
    """The TensorRT-LLM release of the default container (what the Dockerfile builds on)."""
    return containers()["containers"][default_container()]["tensorrt_llm"]


def image(tag: str) -> str:
    return IMAGE.format(tag=tag)


@dataclass(frozen=True)
class Contract:
    """What one TensorRT-LLM release accepts, for the names trtspec writes (see module docstring)."""

    version: str
    data: dict[str, Any]

    # -- where it runs -------------------------------------------------------------------------
    @property
    def container_tags(self) -> list[str]:
        return list(self.data["containers"])

    @property
    def container(self) -> str:
        """The container tag trtspec recommends for this release: the default one, else the newest."""
        tags = self.container_tags
        return default_container() if default_container() in tags else tags[-1]

    @property
    def image(self) -> str:
        return image(self.container)

    # -- LLM API ---------------------------------------------------------------------------------
    @property
    def llm_api(self) -> dict[str, Any]:
        return self.data["llm_api"]

    def decoding(self, mode: str) -> dict[str, Any] | None:
        """{decoding_type, class, class_decoding_type, fields} for a trtspec mode; None for `none`."""
        return self.llm_api["decoding"].get(mode)

    def has_field(self, section: str, name: str) -> bool:
        """Whether `name` is a verified field of `section` (llm_args, kv_cache_config, a mode)."""
        if section in self.llm_api["decoding"]:
            return name in self.llm_api["decoding"][section]["fields"]
        return name in self.llm_api[section]

    # -- EAGLE-3 head ----------------------------------------------------------------------------
    @property
    def head(self) -> dict[str, Any]:
        return self.data["eagle3_head"]

    def default_capture(self, num_layers: int) -> list[int] | None:
        """TensorRT-LLM's default captured target layers for EAGLE-3, or None where it refuses
        to pick (too few layers): (1, n // 2 - 1, n - 4)."""
        if num_layers < self.head["default_capture"]["min_layers"]:
            return None
        return [1, num_layers // 2 - 1, num_layers - 4]

    # -- engines and Triton ----------------------------------------------------------------------
    @property
    def trtllm_build(self) -> dict[str, Any]:
        return self.data["trtllm_build"]

    @property
    def quantize(self) -> dict[str, Any]:
        return self.data["quantize"]

    @property
    def triton(self) -> dict[str, Any]:
        return self.data["triton"]

    def source(self, section: str) -> str:
        return self.data[section]["source"] if section in self.data else self.llm_api["source"]


@cache
def load(version: str) -> Contract:
    """The contract of a supported TensorRT-LLM release; an error naming the supported ones else."""
    path = DATA_DIR / f"trtllm-{version}.json"
    if not path.is_file():
        raise IncompatibleArtifactError(f"trtspec has no contract for TensorRT-LLM {version}",
                                        fix=f"use build.trtllm_version {' or '.join(supported_versions())} "
                                            "(docs/BUILD.md, version table)")
    return Contract(version=version, data=json.loads(path.read_text()))


def for_spec(spec: Any) -> Contract:
    return load(spec.build.trtllm_version)
