"""The documents stay references a reader can follow: every backticked module path in the docs
(README.md, ARCHITECTURE.md, docs/*.md, benchmarks/README.md) and in the docstrings of the
project's Python files names a file that exists; README.md and benchmarks/README.md stay within
their sizes; README's table of contents links to its own headings."""

from __future__ import annotations

import ast
import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
DOCS = [ROOT / "README.md", ROOT / "ARCHITECTURE.md", ROOT / "benchmarks" / "README.md",
        *sorted((ROOT / "docs").glob("*.md"))]
CODE = ("src", "flows", "deployments", "benchmarks", "tests")
SPAN = re.compile(r"`([^`\n]+)`")
PATH = re.compile(r"(?<![\w./-])([\w./-]*\w\.py)(?::\w+)?(?![\w/])")
# where a short path may start: the repository, src/, and each package
BASES = (ROOT, ROOT / "src", ROOT / "src" / "engage_sync", ROOT / "src" / "engage_sandbox")
MAX_LINES = {"README.md": 600, "benchmarks/README.md": 300}


def _names() -> set[str]:
    """File names of the project's Python files (a bare `cpu_watch.py` must be one of them)."""
    return {p.name for top in CODE for p in (ROOT / top).rglob("*.py") if ".venv" not in p.parts}


def paths_in(text: str) -> set[str]:
    """Every module path written in a backticked span of `text`."""
    return {m.group(1) for span in SPAN.findall(text) for m in PATH.finditer(span)}


def dead(paths: set[str], here: Path, names: set[str]) -> set[str]:
    """The paths that name no file: tried from the repository's root, from src/, from each
    package, and from the folder of the file that names them; a bare name, among the project's
    file names."""
    gone = set()
    for path in paths:
        if "/" not in path:
            found = path in names
        else:
            found = any((base / path).is_file() for base in (*BASES, here.parent))
        if not found:
            gone.add(path)
    return gone


def docstrings(path: Path) -> str:
    """The module's, classes' and functions' docstrings of one Python file, joined."""
    tree = ast.parse(path.read_text())
    nodes = [tree, *(n for n in ast.walk(tree) if isinstance(
        n, ast.ClassDef | ast.FunctionDef | ast.AsyncFunctionDef))]
    return "\n".join(d for n in nodes if (d := ast.get_docstring(n, clean=False)))


def dead_paths() -> dict[str, set[str]]:
    """Per file (relative to the repository), the backticked module paths that name no file."""
    names = _names()
    found: dict[str, set[str]] = {}
    sources = [(doc, doc.read_text()) for doc in DOCS]
    sources += [(py, docstrings(py)) for top in CODE for py in sorted((ROOT / top).rglob("*.py"))
                if "__pycache__" not in py.parts]
    for path, text in sources:
        gone = dead(paths_in(text), path, names)
        if gone:
            found[path.relative_to(ROOT).as_posix()] = gone
    return found


def test_every_backticked_module_path_names_a_file() -> None:
    found = dead_paths()
    listing = "\n".join(f"  {where}: {', '.join(sorted(paths))}"
                        for where, paths in sorted(found.items()))
    assert not found, f"backticked module paths that name no file:\n{listing}"


def test_the_path_check_finds_a_dead_path(tmp_path: Path) -> None:
    doc = tmp_path / "doc.md"
    doc.write_text("The loop is `run/loop.py`; the reader `src/engage_sync/read/extract.py`,\n"
                   "run as `.venv/bin/python benchmarks/no_change.py --runs 3`; gone: "
                   "`run/nowhere.py`, `field_helper.py`; `flows/sync.py:sync_integration` is.")
    assert dead(paths_in(doc.read_text()), doc, _names()) == {"run/nowhere.py", "field_helper.py"}


def test_readme_and_benchmarks_readme_stay_within_their_sizes() -> None:
    for name, most in MAX_LINES.items():
        lines = len((ROOT / name).read_text().splitlines())
        assert lines <= most, f"{name} has {lines} lines; at most {most}"


def slug(heading: str) -> str:
    """GitHub's anchor for a heading: lower case, punctuation dropped, spaces as hyphens."""
    text = re.sub(r"[^\w\- ]", "", heading.strip().lower())
    return text.replace(" ", "-")


def test_readme_contents_link_to_its_headings() -> None:
    text = (ROOT / "README.md").read_text()
    body = re.sub(r"```.*?```", "", text, flags=re.S)  # `# comments` in blocks are no headings
    anchors = {slug(h) for h in re.findall(r"^#{1,6} (.+)$", body, flags=re.M)}
    contents = body.split("\n## Contents\n", 1)[1].split("\n## ", 1)[0]
    links = re.findall(r"\]\(#([^)]+)\)", contents)
    assert len(links) >= 8, "README's contents list its sections"
    assert not [a for a in links if a not in anchors], f"contents links without a heading: " \
        f"{[a for a in links if a not in anchors]}"
    first = text.index("\n## Contents\n")
    assert text.count("```bash", 0, first) == 2, "the first screen is the two commands"
