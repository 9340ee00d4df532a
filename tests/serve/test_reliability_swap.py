"""The repository swap is one rename: an interrupt at any point leaves a complete repository.

KeyboardInterrupt (what Ctrl-C raises) is injected just before the k-th rename that touches the
repository path, inside a real `repository.render`: an audit hook sees os.rename/os.replace
(Python raises the event before the call), a wrapper sees artifacts.exchange_paths (a ctypes
call raises no event). Docstrings "Fault: ... / Behaviour: ..." feed docs/DEPLOY.md's
Reliability table.
"""

from __future__ import annotations

import sys

import pytest

from trtspec import artifacts, repository

_TRAP: dict = {"path": None, "at": 0, "seen": 0}


def _interrupt_before_a_rename(event: str, args: tuple) -> None:
    if _TRAP["path"] is not None and event in ("os.rename", "exchange_paths") and _TRAP["path"] in repr(args):
        _TRAP["seen"] += 1
        if _TRAP["seen"] == _TRAP["at"]:
            _TRAP["path"] = None
            raise KeyboardInterrupt


sys.addaudithook(_interrupt_before_a_rename)


@pytest.mark.parametrize("interrupt_at", [1, 2])
def test_interrupted_repository_swap_leaves_a_complete_repository(tiny_cpu_engine, tmp_path, respec, monkeypatch,
                                                                   interrupt_at):
    """Fault: Ctrl-C while `deploy` swaps a new model repository in over the old one.
    Behaviour: the repository path always holds a complete repository, the old or the new one
    (one renameat2 RENAME_EXCHANGE; the old two renames left none between them)."""
    built, engine_dir = tiny_cpu_engine
    old_spec = respec(built, tmp_path, instance_count=1)
    new_spec = respec(built, tmp_path, instance_count=2)
    dest = tmp_path / "model_repository"
    repository.render(engine_dir, old_spec, dest)
    old_config = (dest / "tensorrt_llm" / "config.pbtxt").read_text()
    exchange = artifacts.exchange_paths

    def audited_exchange(a, b):
        _interrupt_before_a_rename("exchange_paths", (str(a), str(b)))
        return exchange(a, b)

    monkeypatch.setattr(artifacts, "exchange_paths", audited_exchange)
    _TRAP.update(path=str(dest), at=interrupt_at, seen=0)
    try:
        repository.render(engine_dir, new_spec, dest)
        interrupted = False
    except KeyboardInterrupt:
        interrupted = True
    finally:
        _TRAP["path"] = None
    assert interrupted == (interrupt_at == 1), "the swap is not exactly one rename"
    config = dest / "tensorrt_llm" / "config.pbtxt"
    assert config.exists(), "no repository left after the interrupt"
    assert repository.models(dest) == ["tensorrt_llm"]
    text = config.read_text()
    assert text == old_config if interrupted else "count: 2" in text
    assert sorted(p.name for p in tmp_path.iterdir() if p.name.startswith(".model_repository")) == []
