"""The house's limits (STYLE.md, issue 61): no module over 400 lines, and the cpu engine's top
level a handful of entry points beside its rooms."""

from __future__ import annotations

import subprocess
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def tracked(pattern: str) -> list[Path]:
    names = subprocess.run(["git", "ls-files", pattern], cwd=ROOT, capture_output=True, text=True, check=True)
    return [ROOT / name for name in names.stdout.split()]


def test_no_module_is_over_400_lines():
    long = {str(p.relative_to(ROOT)): n for p in tracked("trtspec/*.py")
            if p.is_file() and (n := len(p.read_text().splitlines())) > 400}
    assert not long, f"split these by what they do: {long}"


def test_the_cpu_engine_shows_its_rooms():
    runtime = ROOT / "trtspec" / "runtime"
    entries = sorted(p.name for p in runtime.iterdir() if p.name != "__pycache__")
    rooms = [name for name in entries if (runtime / name).is_dir()]
    assert len(entries) <= 14, entries
    assert all((runtime / room / "__init__.py").read_text().startswith('"""') for room in rooms), rooms
    assert set(entries) - set(rooms) == {"__init__.py", "config.py", "engine.py", "loading.py"}
