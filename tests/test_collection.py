"""Every tracked test file is collected by the default run (`make test` = `pytest -q`).

pytest's default `norecursedirs` skips any folder named `build`, `dist`, `venv` ..., and once hid
60 tests in `tests/build/` from CI. pyproject.toml now sets `norecursedirs` explicitly; this
guard fails whenever a tracked `tests/**/test_*.py` file is not collected, whatever hides it.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def test_files(root: Path) -> set[str]:
    """The test files under root/tests: tracked ones in a git checkout, else all on disk."""
    if (root / ".git").exists():
        listed = subprocess.run(["git", "ls-files", "tests"], cwd=root, capture_output=True, text=True, check=True)
        paths = listed.stdout.split()
    else:
        paths = [str(path.relative_to(root)) for path in (root / "tests").rglob("*.py")]
    return {path for path in paths if Path(path).name.startswith("test_") and path.endswith(".py")}


def collected_files(root: Path) -> set[str]:
    """The files the default pytest run in `root` collects at least one test from."""
    run = subprocess.run([sys.executable, "-m", "pytest", "--collect-only", "-q", "-p", "no:cacheprovider"],
                         cwd=root, capture_output=True, text=True, timeout=300)
    assert run.returncode == 0, run.stdout[-2000:] + run.stderr[-2000:]
    return {line.split("::")[0] for line in run.stdout.splitlines() if "::" in line}


def uncollected(root: Path) -> set[str]:
    return test_files(root) - collected_files(root)


# Not a test itself (pytest would collect it by its name otherwise).
test_files.__test__ = False


def test_every_tracked_test_file_is_collected():
    assert uncollected(ROOT) == set()


def _toy_project(root: Path, pyproject: str) -> Path:
    root.mkdir(exist_ok=True)
    (root / "pyproject.toml").write_text(pyproject)
    for folder in ("build", "ok"):
        (root / "tests" / folder).mkdir(parents=True)
        (root / "tests" / folder / f"test_{folder}.py").write_text("def test_one():\n    pass\n")
    return root


def test_guard_catches_a_folder_named_build(tmp_path):
    # pytest's defaults hide tests/build: the guard must see it ...
    default = _toy_project(tmp_path / "default", '[tool.pytest.ini_options]\ntestpaths = ["tests"]\n')
    assert uncollected(default) == {"tests/build/test_build.py"}
    # ... and the project's own pytest settings must not hide it.
    ours = _toy_project(tmp_path / "ours", (ROOT / "pyproject.toml").read_text())
    assert uncollected(ours) == set()
