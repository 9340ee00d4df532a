"""No import circle in trtspec: the modules' imports of each other form a graph without a cycle.

Every `import trtspec...` and `from trtspec... import ...` counts, wherever it stands: at module
level, inside a function (a lazy import still runs, only later) and under `if TYPE_CHECKING:`
(not run, but still one module leaning on another, the circle a reader has to untangle). An
import names the module it loads: `from trtspec.repository import cpu` is an edge to
`trtspec.repository.cpu`, `from trtspec.runtime import load_engine` one to `trtspec.runtime`
(its `__init__`). The parent packages a submodule import also runs are not edges: every module
of a package runs its `__init__` first, so they would make a circle of every `__init__` that
imports its own modules lazily.
"""

from __future__ import annotations

import ast
from pathlib import Path

PACKAGE = Path(__file__).resolve().parents[1] / "trtspec"


def module_name(path: Path, package: Path) -> str:
    parts = path.relative_to(package.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def imported(node: ast.Import | ast.ImportFrom, here: str, is_package: bool, modules: set[str]) -> list[str]:
    """The trtspec modules one import statement loads (each name: a submodule if there is one)."""
    if isinstance(node, ast.Import):
        return [alias.name for alias in node.names if alias.name in modules]
    if node.level:  # relative: `from . import x` in trtspec/a/b.py is trtspec.a.x
        anchor = here.split(".") if is_package else here.split(".")[:-1]
        anchor = anchor[:len(anchor) - (node.level - 1)]
        base = ".".join(anchor + ([node.module] if node.module else []))
    else:
        base = node.module or ""
    if base not in modules:
        return []
    return [f"{base}.{alias.name}" if f"{base}.{alias.name}" in modules else base for alias in node.names]


def import_graph(package: Path = PACKAGE) -> dict[str, set[str]]:
    """Module -> the modules of `package` it imports anywhere in its file."""
    paths = {module_name(path, package): path for path in package.rglob("*.py")}
    modules = set(paths)
    graph: dict[str, set[str]] = {}
    for name, path in paths.items():
        edges = graph.setdefault(name, set())
        for node in ast.walk(ast.parse(path.read_text(), filename=str(path))):
            if isinstance(node, ast.Import | ast.ImportFrom):
                edges.update(imported(node, name, path.name == "__init__.py", modules))
        edges.discard(name)
    return graph


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Every strongly connected component of more than one module (Tarjan), each sorted."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []

    def visit(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        on_stack.add(node)
        for succ in sorted(graph[node]):
            if succ not in index:
                visit(succ)
                low[node] = min(low[node], low[succ])
            elif succ in on_stack:
                low[node] = min(low[node], index[succ])
        if low[node] == index[node]:
            component = []
            while True:
                member = stack.pop()
                on_stack.discard(member)
                component.append(member)
                if member == node:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    for node in sorted(graph):
        if node not in index:
            visit(node)
    return sorted(found)


def test_the_graph_sees_lazy_relative_and_type_checking_imports(tmp_path):
    """Each kind of import becomes its edge (else an empty graph would pass the test below)."""
    files = {
        "pkg/__init__.py": "def load():\n    from pkg.sub import deep\n",
        "pkg/top.py": "import os\nimport pkg.sub.deep\nfrom pkg import plain\n",
        "pkg/plain.py": "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from pkg.top import Thing\n",
        "pkg/sub/__init__.py": "from pkg import helper_function\n",
        "pkg/sub/deep.py": "from . import sibling\nfrom .. import plain\n",
        "pkg/sub/sibling.py": "",
    }
    for name, text in files.items():
        (tmp_path / name).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / name).write_text(text)
    assert import_graph(tmp_path / "pkg") == {
        "pkg": {"pkg.sub.deep"},                          # lazy, in a function
        "pkg.top": {"pkg.sub.deep", "pkg.plain"},         # module level; os is not ours
        "pkg.plain": {"pkg.top"},                         # under TYPE_CHECKING
        "pkg.sub": {"pkg"},                               # a name, not a module: the package
        "pkg.sub.deep": {"pkg.sub.sibling", "pkg.plain"},  # relative
        "pkg.sub.sibling": set(),
    }
    # top -> sub.deep -> plain -> top
    assert cycles(import_graph(tmp_path / "pkg")) == [["pkg.plain", "pkg.sub.deep", "pkg.top"]]


def test_the_cycle_finder_finds_a_circle_and_passes_a_chain():
    assert cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]
    assert cycles({"a": {"b"}, "b": {"c"}, "c": set()}) == []


def test_no_import_circle_in_trtspec():
    found = cycles(import_graph())
    assert not found, "import circles (each: the modules that import each other, directly or " \
                      "through the others): " + "; ".join(" <-> ".join(c) for c in found)
