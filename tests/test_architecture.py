"""The architecture of docs/architecture.md, checked: no import cycles, light rooms, the import-linter
contracts of pyproject.toml, and no oversized source files."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PACKAGES = ("agentrt", "planners", "memory", "tools", "evals")
MAX_LINES = 450


def _import_graph():
    grimp = pytest.importorskip("grimp", reason="grimp comes with import-linter (the dev extra)")
    # Every import grimp sees, also those inside functions; `if TYPE_CHECKING:` imports never run.
    return grimp.build_graph(*PACKAGES, cache_dir=None, exclude_type_checking_imports=True)


def _cycles(succ: dict[str, list[str]]) -> list[list[str]]:
    """Strongly connected components of more than one module (Tarjan's algorithm, iterative)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []
    for root in sorted(succ):
        if root in index:
            continue
        index[root] = low[root] = len(index)
        stack.append(root)
        on_stack.add(root)
        work = [(root, iter(succ[root]))]
        while work:
            v, children = work[-1]
            for w in children:
                if w not in index:
                    index[w] = low[w] = len(index)
                    stack.append(w)
                    on_stack.add(w)
                    work.append((w, iter(succ[w])))
                    break
                if w in on_stack:
                    low[v] = min(low[v], index[w])
            else:
                work.pop()
                if work:
                    parent = work[-1][0]
                    low[parent] = min(low[parent], low[v])
                if low[v] == index[v]:
                    component = []
                    while True:
                        w = stack.pop()
                        on_stack.discard(w)
                        component.append(w)
                        if w == v:
                            break
                    if len(component) > 1:
                        found.append(sorted(component))
    return found


def test_cycle_finder_finds_a_package_and_its_submodule():
    assert _cycles({"p": ["p.a"], "p.a": ["p"], "q": ["p"]}) == [["p", "p.a"]]
    assert _cycles({"a": ["b"], "b": ["c"], "c": ["a", "d"], "d": []}) == [["a", "b", "c"]]
    assert _cycles({"a": ["b"], "b": []}) == []


def test_no_import_cycles():
    """A package that imports its submodule which imports the package back is a cycle too."""
    graph = _import_graph()
    succ = {m: sorted(graph.find_modules_directly_imported_by(m)) for m in graph.modules}
    problems = []
    for component in _cycles(succ):
        members = set(component)
        edges = []
        for importer in component:
            for imported in succ[importer]:
                if imported in members:
                    lines = [d["line_number"] for d in graph.get_import_details(importer=importer, imported=imported)]
                    edges.append(f"{importer} -> {imported} (l.{', l.'.join(map(str, lines))})")
        problems.append(" | ".join(edges))
    assert problems == [], "import cycles:\n" + "\n".join(problems)


def test_rooms_do_not_load_the_runtime():
    """tools, planners and memory load agentrt.core at most: no runtime layer above it."""
    code = (
        "import sys, tools.base, planners, memory\n"
        "print('\\n'.join(sorted(m for m in sys.modules if m.startswith('agentrt.'))))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, cwd=ROOT)
    loaded = out.stdout.split()
    above_core = ("app", "train", "batch", "routes", "routing", "trajectory", "backends")
    bad = [m for m in loaded if m.split(".")[1] in above_core]
    assert bad == [], f"the rooms loaded runtime modules: {bad}"
    assert "agentrt.core.errors" in loaded  # the check looks at the right thing


def test_import_linter_contracts_hold():
    """The contracts in pyproject.toml ([tool.importlinter]); `make test` runs the same command first."""
    lint = Path(sys.executable).with_name("lint-imports")
    if not lint.exists():
        pytest.fail(f"{lint} is missing: install the dev extra (pip install -e '.[dev]')")
    out = subprocess.run([str(lint), "--no-cache"], capture_output=True, text=True, cwd=ROOT)
    if out.returncode != 0:
        pytest.fail("lint-imports: " + out.stdout[out.stdout.find("Contracts"):] + out.stderr, pytrace=False)


def _python_files():
    """Every .py file of the project: hidden folders (.venv, .git), builds and evals/bench left out."""
    for folder, dirs, files in os.walk(ROOT):
        rel = Path(folder).relative_to(ROOT)
        dirs[:] = sorted(d for d in dirs if not d.startswith((".", "__pycache__")) and d not in ("build", "dist")
                         and not d.endswith(".egg-info") and (rel / d).parts != ("evals", "bench"))
        yield from (rel / f for f in sorted(files) if f.endswith(".py"))


def test_no_oversized_source_files():
    """No Python file over 450 lines, except the benchmark scripts in evals/bench."""
    oversized = []
    for rel in _python_files():
        n = len((ROOT / rel).read_text(encoding="utf-8").splitlines())
        if n > MAX_LINES:
            oversized.append(f"{rel}: {n} lines")
    assert oversized == [], f"over {MAX_LINES} lines: {oversized}"
