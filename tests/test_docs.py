"""docs/BENCHMARKS.md says where things stand in a page a reader finishes: its tables are the ones
scripts/benchmarks_page.py generates from docs/benchmarks/*.json, and every section of the
benchmark pages that code or docs cite by name ('docs/BENCHMARKS-log.md, "Threads"') exists."""

from __future__ import annotations

import importlib.util
import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PAGES = ("BENCHMARKS.md", "BENCHMARKS-log.md", "BENCHMARKS-engine.md")
# a page's name, then one or more quoted section names: `BENCHMARKS-log.md, "A" and "B"`,
# `BENCHMARKS.md ("A")`, `BENCHMARKS.md "A"`
NAME = r'"([\w`][^"]*)"'
CITATION = re.compile(r'(BENCHMARKS(?:-log|-engine)?\.md)\)?,?\s*\(?((?:' + NAME + r'(?:,?\s*(?:and\s+)?)?)+)')
CITING = ("trtspec", "docs", "scripts", "benchmarks", "tests")
SUFFIXES = {".py", ".md", ".cpp", ".h", ".sh", ".txt", ".yaml"}


def _script():
    spec = importlib.util.spec_from_file_location("benchmarks_page", ROOT / "scripts" / "benchmarks_page.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _flat(text: str) -> str:
    """Text with line breaks and the comment marks that start continued lines (#, //, *) removed."""
    return re.sub(r"\s*\n\s*(?:#+|//+|\*)?\s*", " ", text)


def _sections(page: str) -> list[str]:
    """The names a citation may use: headings outside code blocks and bold paragraph openings."""
    text = (ROOT / "docs" / page).read_text()
    names, fenced = [], False
    for line in text.splitlines():
        if line.startswith("```"):
            fenced = not fenced
        elif not fenced and (match := re.match(r"#{1,6} (.+)", line)):
            names.append(match.group(1))
    for paragraph in text.split("\n\n"):
        names += re.findall(r"\*\*([^*]+)\*\*", _flat(paragraph))
    return [" ".join(name.replace("`", "").split()) for name in names]


def _citations() -> list[tuple[str, str, str]]:
    """(citing file, page, section name) for every citation of a benchmark page's section."""
    files = [ROOT / "README.md"] + [p for folder in CITING for p in sorted((ROOT / folder).rglob("*"))
                                    if p.is_file() and p.suffix in SUFFIXES and p.name != "test_docs.py"]
    found = []
    for path in files:
        for match in CITATION.finditer(_flat(path.read_text(errors="replace"))):
            for name in re.findall(NAME, match.group(2)):
                found.append((str(path.relative_to(ROOT)), match.group(1), name))
    return found


def test_benchmark_tables_are_the_reports():
    script = _script()
    doc = script.DOC.read_text()
    tables = {name: script.render(report) for name, report in script.reports().items()}
    assert script.with_tables(doc, tables) == doc, \
        "docs/BENCHMARKS.md's tables are stale: run python scripts/benchmarks_page.py --write"


def test_every_report_has_its_table_and_every_table_its_report():
    script = _script()
    assert sorted(script.tables_in(script.DOC.read_text())) == sorted(script.reports())


def test_benchmarks_page_says_where_things_stand_in_at_most_300_lines():
    assert len((ROOT / "docs" / "BENCHMARKS.md").read_text().splitlines()) <= 300


def test_every_cited_benchmark_section_exists():
    sections = {page: _sections(page) for page in PAGES}
    citations = _citations()
    missing = [(where, page, name) for where, page, name in citations
               if not any(section.startswith(name) for section in sections[page])]
    assert len(citations) > 40 and not missing, missing
