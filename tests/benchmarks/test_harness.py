"""The benchmark harness (python -m benchmarks): every comparison listed and taking --help, the shared
library's prompts and figures, and nothing read from outside the repository."""

from __future__ import annotations

import ast
import contextlib
import importlib
import io
import json
import re
import subprocess
import sys
from pathlib import Path

import pytest

from benchmarks import common
from benchmarks.__main__ import COMMANDS, main
from trtspec.bench import metrics
from trtspec.prompts import packaged_prompt_file

ROOT = Path(__file__).resolve().parents[2]
HARNESS = ROOT / "benchmarks"
LIBRARY = {"__init__", "__main__", "common", "peers_draft", "peers_offline", "peers_api", "peers_servers", "peers_vllm", "vllm_peer", "vllm_worker"}  # modules that are not a command


def test_help_lists_every_comparison_and_every_module_with_a_main_is_one():
    result = subprocess.run([sys.executable, "-m", "benchmarks", "--help"], capture_output=True, text=True,
                            cwd=ROOT, timeout=60)
    assert result.returncode == 0, result.stderr
    listed = re.findall(r"(?m)^  (\S+) {2,}\S", result.stdout)
    modules = {p.stem.replace("_", "-") for p in HARNESS.glob("*.py") if p.stem not in LIBRARY}
    assert sorted(listed) == sorted(COMMANDS) == sorted(modules)
    for path in HARNESS.glob("*.py"):
        defines_main = any(isinstance(node, ast.FunctionDef) and node.name == "main"
                           for node in ast.parse(path.read_text()).body)
        assert defines_main == (path.stem not in LIBRARY - {"__main__"}), path.name


def test_an_unknown_comparison_is_refused_in_one_line(capsys):
    assert main(["nonsense"]) == 2
    assert capsys.readouterr().err.count("\n") == 1


@pytest.mark.parametrize("name", COMMANDS)
def test_every_comparison_answers_help(name, monkeypatch):
    module = importlib.import_module(f"benchmarks.{name.replace('-', '_')}")
    monkeypatch.setattr(sys, "argv", [f"python -m benchmarks {name}", "--help"])
    out, code = io.StringIO(), 0
    with contextlib.redirect_stdout(out):
        try:
            module.main()  # argparse exits after printing help; the two positional ones return
        except SystemExit as exit_:
            code = exit_.code or 0
    # argparse's usage line, or the docstring's example command
    assert code == 0 and f"-m benchmarks {name}" in out.getvalue(), out.getvalue()[:300]


def test_prompts_are_the_packaged_ones_and_held_back_is_lines_16_to_30():
    lines = [json.loads(line) for line in packaged_prompt_file("bench").read_text().splitlines() if line.strip()]
    assert common.dev_rows() == [{"prompt": r["prompt"], "category": r.get("category", "default")} for r in lines]
    held = common.dev_rows(held_back=True)
    assert [r["prompt"] for r in held] == [r["prompt"] for r in lines[15:30]] and len(held) == 15
    assert common.dev_rows(limit=3) == common.dev_rows()[:3]


def test_one_percentile_and_ratios_of_the_same_repeat():
    assert common.percentile is metrics.percentile  # the one trtspec bench reports
    assert common.percentile([1.0, 2.0, 3.0, 4.0], 50) == 2.5  # linear between ranks, not nearest rank
    # per-repeat ratios 2, 1, 4: their median 2 (a median of each side's medians would say 2.5 / 1.5)
    assert common.median_ratio([2.0, 3.0, 4.0], [1.0, 3.0, 1.0]) == 2.0


def test_nothing_reads_outside_the_repository_and_no_second_percentile():
    files = sorted(HARNESS.glob("*.py")) + sorted((ROOT / "scripts").iterdir())
    for path in files:
        text = path.read_text()
        assert "../shared" not in text and "shared/prompts" not in text, path
        # a path climbing above the repository root from benchmarks/ or scripts/
        assert not re.search(r"parents\[[2-9]\]|\.parent\.parent\.parent", text), path
        assert not re.search(r"def \w*percentile", text), path
