"""`python -m benchmarks NAME [OPTIONS]`: run one comparison; `--help` lists them (no heavy import)."""

from __future__ import annotations

import ast
import importlib
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
# The comparisons, grouped as a reader looks for them; each name is a module of this package.
GROUPS = {
    "against peers, in process": ("peers", "batching", "threads", "answers"),
    "through servers": ("servers", "openai-overhead", "dynamo"),
    "drafting": ("trees", "self-drafting", "heads-layouts", "dtype-agreement", "eagle3-draft", "eagle3-paths",
                 "grammar", "suffix"),
    "where the time goes": ("step-costs", "policy-cost", "scaling-ceiling", "prefill-share", "prefill-budget", "prompt-reuse", "decode-forward",
                            "attention-split", "linear-kernels", "linear-sequence"),
}
COMMANDS = [name for names in GROUPS.values() for name in names]


def summary(name: str) -> str:
    """The first sentence of a comparison's docstring, read without importing it."""
    tree = ast.parse((HERE / f"{name.replace('-', '_')}.py").read_text())
    sentence = " ".join((ast.get_docstring(tree) or "").split("\n\n")[0].split()).split(". ")[0].rstrip(".:")
    return sentence if len(sentence) <= 100 else sentence[:sentence.rfind(" ", 0, 97)] + " ..."


def usage() -> str:
    lines = ["usage: python -m benchmarks NAME [OPTIONS]   (NAME --help: its options)", ""]
    for group, names in GROUPS.items():
        lines.append(f"{group}:")
        lines += [f"  {name:<17} {summary(name)}" for name in names]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if not argv or argv[0] in ("-h", "--help"):
        print(usage())
        return 0
    name = argv[0].replace("_", "-")
    if name not in COMMANDS:
        print(f"error: no comparison {argv[0]!r}; one of {', '.join(COMMANDS)}", file=sys.stderr)
        return 2
    module = importlib.import_module(f"benchmarks.{name.replace('-', '_')}")
    sys.argv = [f"python -m benchmarks {name}", *argv[1:]]  # argparse's prog, and the modules that read argv
    return int(module.main() or 0)


if __name__ == "__main__":
    sys.exit(main())
