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

A release no Triton container carries (the 1.3 line: TensorRT-LLM 1.3.0rc29 in NVIDIA Dynamo 1.6.x)
has no `containers` and a `runtime` section instead: the Dynamo release that pins it and its
tensorrtllm-runtime image (`for_dynamo`), and a `removed` section (what the line dropped, refused
for Dynamo targets). `build.trtllm_version` takes only the Triton releases (`supported_versions`).

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


def all_versions() -> tuple[str, ...]:
    """TensorRT-LLM releases with a contract file, oldest first (1.3.0rc29 sorts after 1.2.1)."""
    from packaging.version import Version

    found = [path.stem.removeprefix("trtllm-") for path in DATA_DIR.glob("trtllm-*.json")]
    return tuple(sorted(found, key=Version))


def supported_versions() -> tuple[str, ...]:
    """The releases a Triton container carries (build.trtllm_version), oldest first."""
    return tuple(v for v in all_versions() if "runtime" not in _data(v))


def dynamo_versions() -> dict[str, str]:
    """Dynamo release -> the TensorRT-LLM release its tensorrtllm-runtime image carries."""
    return {_data(v)["runtime"]["dynamo"]: v for v in all_versions() if "runtime" in _data(v)}


@cache
def _data(version: str) -> dict[str, Any]:
    return json.loads((DATA_DIR / f"trtllm-{version}.json").read_text())


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
        if not tags:
            raise IncompatibleArtifactError(f"no Triton container carries TensorRT-LLM {self.version}",
                                            fix=f"serve it with Dynamo ({self.image}): deploy --target dynamo-k8s")
        return default_container() if default_container() in tags else tags[-1]

    @property
    def runtime(self) -> dict[str, Any] | None:
        """The Dynamo runtime that carries a release no Triton container has (the 1.3 line), else None."""
        return self.data.get("runtime")

    @property
    def image(self) -> str:
        runtime = self.runtime
        if runtime:
            return runtime["image"].format(dynamo=runtime["dynamo"])
        return image(self.container)

    def removed(self, what: str) -> str | None:
        """Why this release no longer has `what` (a mode, backend or field), or None where it has it."""
        return (self.data.get("removed") or {}).get(what)

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
    return Contract(version=version, data=_data(version))


def for_spec(spec: Any) -> Contract:
    return load(spec.build.trtllm_version)


def for_dynamo(release: str) -> Contract:
    """The contract of the TensorRT-LLM release a Dynamo release's tensorrtllm-runtime image carries."""
    known = dynamo_versions()
    if release not in known:
        raise IncompatibleArtifactError(f"serve.dynamo.release {release}: trtspec has no TensorRT-LLM contract "
                                        "for its tensorrtllm-runtime image",
                                        fix=f"set serve.dynamo.release: {' or '.join(sorted(known))}")
    return load(known[release])


DYNAMO_TARGETS = ("dynamo", "dynamo-k8s")


def for_target(spec: Any, target: str) -> Contract:
    """The release a deploy target serves: Dynamo's (serve.dynamo.release) for the Dynamo targets,
    build.trtllm_version (Triton's) for local, docker and k8s."""
    return for_dynamo(spec.serve.dynamo.release) if target in DYNAMO_TARGETS else for_spec(spec)
