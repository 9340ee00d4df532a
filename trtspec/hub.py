"""Hugging Face hub ids as sources: `org/name[@revision]` -> a local snapshot directory.

The one place trtspec fetches from the hub, with `huggingface_hub.snapshot_download` and only
the files a checkpoint needs (configs, weights, tokenizer). The environment is read at call time,
not when huggingface_hub was imported: `HF_HUB_CACHE`, else `HF_HOME/hub`, else
~/.cache/huggingface/hub; `HF_HUB_OFFLINE=1` answers from that cache alone (what the tests do:
they lay out `models--org--name/snapshots/<rev>/` themselves). A path that exists on disk is
never a hub id; `./x` and `/x` never are either.
"""

from __future__ import annotations

import os
import re
from pathlib import Path

from trtspec.errors import ModelSourceError

_HUB_ID = re.compile(r"^(?P<repo>[A-Za-z0-9][\w.-]{0,95}/[\w.-]{1,96})(?:@(?P<rev>[\w./-]{1,128}))?$")
# what a checkpoint or a head needs; never the whole repository (datasets, images, other formats)
CHECKPOINT_FILES = ("*.json", "*.safetensors", "*.bin", "*.model", "*.tiktoken", "*.txt", "*.jinja")
_TRUE = ("1", "ON", "YES", "TRUE")


def is_hub_id(source: str) -> bool:
    """`org/name` or `org/name@rev` that is not a path on disk (nor ./..., /..., ~...)."""
    if not source or source.startswith((".", "/", "~")) or Path(source).expanduser().exists():
        return False
    return _HUB_ID.match(source) is not None


def offline() -> bool:
    return os.environ.get("HF_HUB_OFFLINE", "").strip().upper() in _TRUE


def cache_dir() -> Path:
    if os.environ.get("HF_HUB_CACHE"):
        return Path(os.environ["HF_HUB_CACHE"]).expanduser()
    home = Path(os.environ.get("HF_HOME") or Path.home() / ".cache" / "huggingface").expanduser()
    return home / "hub"


def snapshot(source: str, files: tuple[str, ...] = CHECKPOINT_FILES) -> Path:
    """The local snapshot directory of hub id `source`, downloaded unless offline or cached; only
    `files` (glob patterns) are fetched: ("config.json",) for a plan that reads no weights."""
    match = _HUB_ID.match(source)
    if match is None:
        raise ModelSourceError(f"{source}: not a Hugging Face hub id (org/name[@revision])",
                               fix="give a local directory or a hub id such as yuhuili/EAGLE3-LLaMA3.1-Instruct-8B")
    repo, revision = match["repo"], match["rev"]
    from huggingface_hub import snapshot_download
    from huggingface_hub.errors import HfHubHTTPError, LocalEntryNotFoundError, RepositoryNotFoundError

    where = cache_dir()
    try:
        path = snapshot_download(repo, revision=revision, cache_dir=str(where), local_files_only=offline(),
                                 allow_patterns=list(files))
    except LocalEntryNotFoundError:
        if offline():
            raise ModelSourceError(f"{source}: not in the Hugging Face cache {where} and HF_HUB_OFFLINE is set",
                                   fix="download it once (unset HF_HUB_OFFLINE) or point HF_HOME at the cache "
                                       "that holds it") from None
        raise ModelSourceError(f"{source}: the hub cannot be reached and {where} does not hold it",
                               fix="check the network, or download it elsewhere and copy the cache") from None
    except RepositoryNotFoundError:
        raise ModelSourceError(f"{source}: no such repository on the Hugging Face hub (or it is gated)",
                               fix="check the id; for a gated repository log in with `hf auth login`") from None
    except HfHubHTTPError as error:
        first = str(error).strip().splitlines()[0] if str(error).strip() else type(error).__name__
        raise ModelSourceError(f"{source}: the hub refused the download ({first})",
                               fix="check the id, the revision and your access") from None
    return Path(path)
