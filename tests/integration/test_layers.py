"""The house's plan holds: layers kept by import-linter (pyproject.toml), no import circle
between any two modules (imports for types included), and the checks really fail when a
forbidden import is added (each is proved on a copy of the sources)."""

from __future__ import annotations

import ast
import json
import re
import shutil
import subprocess
import sys
from pathlib import Path

import grimp
import pytest

ROOT = Path(__file__).resolve().parents[2]
LINT = Path(sys.executable).parent / "lint-imports"


def _lint(src: Path) -> subprocess.CompletedProcess[str]:
    """import-linter over the packages found first in `src` (the repository's, or a copy)."""
    return subprocess.run([str(LINT), "--config", str(ROOT / "pyproject.toml"), "--no-cache"],
                          cwd=ROOT, env={"PYTHONPATH": str(src), "PATH": "/usr/bin:/bin"},
                          capture_output=True, text=True, timeout=300)


def _cycles(graph: grimp.ImportGraph) -> list[list[str]]:
    """Every strongly connected set of more than one module (an import circle)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on: set[str] = set()
    found: list[list[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on.add(v)
        for w in graph.find_modules_directly_imported_by(v):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            part = []
            while True:
                w = stack.pop()
                on.discard(w)
                part.append(w)
                if w == v:
                    break
            if len(part) > 1:
                found.append(sorted(part))

    for module in sorted(graph.modules):
        if module not in index:
            visit(module)
    return found


def _cycles_in(src: Path) -> list[list[str]]:
    """The import circles of the packages found first in `src`, in a process of their own
    (this one has the repository's imported already)."""
    code = ("import json, grimp\n"
            "from tests.integration.test_layers import _cycles\n"
            "graph = grimp.build_graph('engage_sync', 'engage_sandbox', cache_dir=None)\n"
            "print(json.dumps(_cycles(graph)))\n")
    done = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True,
                          text=True, timeout=300, env={"PYTHONPATH": f"{src}:{ROOT}"})
    assert done.returncode == 0, done.stderr
    return [list(c) for c in json.loads(done.stdout)]


def _copy(tmp_path: Path) -> Path:
    src = tmp_path / "src"
    shutil.copytree(ROOT / "src", src, ignore=shutil.ignore_patterns("*.egg-info", "__pycache__"))
    return src


def test_the_layer_contracts_are_kept() -> None:
    done = _lint(ROOT / "src")
    assert done.returncode == 0, done.stdout + done.stderr
    assert "0 broken" in done.stdout


def test_no_two_modules_import_each_other() -> None:
    assert _cycles_in(ROOT / "src") == []


@pytest.mark.parametrize(("module", "line", "contract"), [
    ("read/reader.py", "from engage_sync.deliver import deliverer", "Reading never sends"),
    ("state/store.py", "from engage_sync.deliver import doubled",
     "The state store knows nothing of HTTP delivery"),
    ("kinds/base.py", "from engage_sync.state import store", "Kinds are pure"),
    ("run/loop.py", "from engage_sync.partitions import scope", "The loop knows neither"),
    ("config/integration.py", "from engage_sync import kinds", "The stages of a row"),
])
def test_a_forbidden_import_breaks_its_contract(tmp_path: Path, module: str, line: str,
                                                contract: str) -> None:
    src = _copy(tmp_path)
    target = src / "engage_sync" / module
    target.write_text(target.read_text() + f"\n{line}  # noqa\n")
    done = _lint(src)
    assert done.returncode != 0
    assert f"{contract}" in done.stdout and "BROKEN" in done.stdout, done.stdout


def test_a_circle_between_two_modules_is_found(tmp_path: Path) -> None:
    src = _copy(tmp_path)
    window = src / "engage_sync" / "cursor" / "progress.py"
    window.write_text(window.read_text() + "\nfrom engage_sync.cursor import window  # noqa\n")
    assert ["engage_sync.cursor.progress", "engage_sync.cursor.window"] in _cycles_in(src)


def test_a_file_parses_in_a_process_that_imported_only_the_config_layer() -> None:
    """config.kind_registry loads the built-in kinds by name on first use: a process that
    imports only the config layer still checks a file's kind (config never imports kinds)."""
    code = ("import sys\n"
            "from engage_sync.config.files import parse_integration\n"
            "assert 'engage_sync.kinds' not in sys.modules\n"
            "i = parse_integration({'kind': 'deletes', 'source': {'table': 't'}}, file='d.yaml')\n"
            "assert i.section == 'deletes' and 'engage_sync.kinds' in sys.modules\n")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          timeout=120)
    assert done.returncode == 0, done.stderr


def _modules() -> set[str]:
    """Every module of both packages, as a path under src/ (empty package markers left out)."""
    found = set()
    for package in ("engage_sync", "engage_sandbox"):
        for path in (ROOT / "src" / package).rglob("*.py"):
            if path.name == "__init__.py" and not path.read_text().strip():
                continue
            found.add(path.relative_to(ROOT / "src").as_posix())
    return found


def test_architecture_names_every_module_and_only_modules_that_exist() -> None:
    text = (ROOT / "ARCHITECTURE.md").read_text()
    named = set(re.findall(r"`(engage_(?:sync|sandbox)/[\w/]+\.py)`", text))
    # short forms (`run/loop.py`, `state/fields.py`) must name an existing module too
    short = set(re.findall(r"`((?:cli|demo|adapters|partitions|run|diff|deliver|read|status|"
                           r"state|kinds|pack|config|cursor)/\w+\.py)", text))
    assert not named - _modules(), "ARCHITECTURE.md names modules that do not exist"
    assert not {f"engage_sync/{s}" for s in short} - _modules(), "short paths that do not exist"
    assert not _modules() - named, "modules ARCHITECTURE.md does not name"


def test_test_folders_are_named_after_source_folders() -> None:
    """tests/unit/X and tests/integration/X exist only for a stage src/engage_sync/X, so a test
    is found where the code it checks lives."""
    source = ROOT / "src" / "engage_sync"
    stages = {p.name for p in source.iterdir() if (p / "__init__.py").exists()}
    for kind in ("unit", "integration"):
        folders = {p.name for p in (ROOT / "tests" / kind).iterdir()
                   if p.is_dir() and p.name != "__pycache__"}
        assert folders, f"tests/{kind} has no stage folders"
        strays = folders - stages
        assert not strays, f"tests/{kind} folders with no source stage: {strays}"


def test_modules_and_functions_stay_small_and_the_loop_simple() -> None:
    """No module over 400 lines, and none over 300 in the run's core (`run/`, `deliver/`,
    `adapters/`), the folders a newcomer reads first; no function over 50; the loop's McCabe
    complexity at most 9 (ruff's C901), so features plug in as stages instead of branching."""
    core = ("engage_sync/run/", "engage_sync/deliver/", "engage_sync/adapters/")
    for module in _modules():
        source = (ROOT / "src" / module).read_text()
        limit = 300 if module.startswith(core) else 400
        assert len(source.splitlines()) <= limit, f"{module}: over {limit} lines"
        for node in ast.walk(ast.parse(source)):
            if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
                assert node.end_lineno is not None
                assert node.end_lineno - node.lineno < 50, f"{module}: {node.name}"
    ruff = Path(sys.executable).parent / "ruff"
    done = subprocess.run([str(ruff), "check", "--no-cache", "--select", "C901", "--config",
                           "lint.mccabe.max-complexity=9", "src/engage_sync/run/loop.py"],
                          cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stdout
