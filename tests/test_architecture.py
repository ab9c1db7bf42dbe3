"""The architecture of docs/architecture.md, checked: no import cycles (type-only ones included), light rooms,
the import-linter contracts of pyproject.toml, and no oversized source files."""

from __future__ import annotations

import ast
import os
import subprocess
import sys
import warnings
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
    above_core = ("app", "train", "batch", "routes", "router", "trajectory", "backends")
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


def _python_files(root: Path = ROOT):
    """Every .py file of the project: hidden folders (.venv, .git) and builds left out."""
    for folder, dirs, files in os.walk(root):
        dirs[:] = sorted(d for d in dirs if not d.startswith((".", "__pycache__")) and d not in ("build", "dist")
                         and not d.endswith(".egg-info"))
        yield from (Path(folder).relative_to(root) / f for f in sorted(files) if f.endswith(".py"))


def _source_imports(root: Path = ROOT) -> dict[str, list[str]]:
    """module -> the project modules it imports, read from the source: every import statement counts, at module
    level, inside a function or under ``if TYPE_CHECKING:`` (a type-only circle is still a circle to a reader).
    Every .py file outside tests/ (benches and examples too); ``from pkg import name`` points at ``pkg.name``
    when that is a module, else at ``pkg``; a dotted name resolves to its longest known prefix."""
    files: dict[str, Path] = {}
    for rel in _python_files(root):
        if rel.parts[0] == "tests":
            continue
        parts = list(rel.with_suffix("").parts)
        if parts[-1] == "__init__":
            parts = parts[:-1]
        if parts:
            files[".".join(parts)] = rel

    def known(name: str) -> str | None:
        while name and name not in files:
            name = name.rpartition(".")[0]
        return name or None

    succ: dict[str, list[str]] = {}
    for module, rel in files.items():
        package = module if rel.name == "__init__.py" else module.rpartition(".")[0]
        targets: set[str | None] = set()
        with warnings.catch_warnings():  # another file's odd escape is not this test's business
            warnings.simplefilter("ignore")
            tree = ast.parse((root / rel).read_text(encoding="utf-8"))
        for node in ast.walk(tree):
            if isinstance(node, ast.Import):
                targets.update(known(a.name) for a in node.names)
            elif isinstance(node, ast.ImportFrom):
                base = node.module or ""
                if node.level:  # relative: up level-1 packages from this module's package
                    up = package.split(".")[: len(package.split(".")) - (node.level - 1)] if package else []
                    base = ".".join([*up, base] if base else up)
                targets.update(known(f"{base}.{a.name}" if f"{base}.{a.name}" in files else base)
                               for a in node.names)
        succ[module] = sorted(t for t in targets if t is not None and t != module)
    return succ


def test_source_import_reader_finds_a_type_only_circle(tmp_path):
    (tmp_path / "pkg" / "sub").mkdir(parents=True)
    (tmp_path / "tests").mkdir()
    files = {
        "pkg/__init__.py": "",
        "pkg/a.py": "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from pkg.b import B\n",
        "pkg/b.py": "def f():\n    from . import a\n",  # relative, inside a function
        "pkg/sub/__init__.py": "from ..b import f\nimport pkg.sub.c as c\n",
        "pkg/sub/c.py": "import os\n",
        "tests/test_x.py": "import pkg.a\n",  # tests are left out
    }
    for name, text in files.items():
        (tmp_path / name).write_text(text)
    succ = _source_imports(tmp_path)
    assert succ == {"pkg": [], "pkg.a": ["pkg.b"], "pkg.b": ["pkg.a"], "pkg.sub": ["pkg.b", "pkg.sub.c"],
                    "pkg.sub.c": []}
    assert _cycles(succ) == [["pkg.a", "pkg.b"]]


def test_source_import_reader_reads_this_project():
    succ = _source_imports()
    assert "agentrt.backends.hf.grammar" in succ["agentrt.backends.hf.runner"]  # imported inside a function
    assert "agentrt.core.config" in succ["agentrt.backends"]  # imported under `if TYPE_CHECKING:`
    assert "evals.bench.common" in succ["evals.bench.batcher"]  # the benches are read too


def test_no_import_cycles_type_only_ones_included():
    """No circle in the source at all: an ``if TYPE_CHECKING:`` import that closes one counts (issue 33)."""
    succ = _source_imports()
    problems = [" <-> ".join(c) + "  [" + "; ".join(f"{a} -> {b}" for a in c for b in succ[a] if b in c) + "]"
                for c in _cycles(succ)]
    assert problems == [], "import cycles (type-only imports counted):\n" + "\n".join(problems)


def test_no_oversized_source_files():
    """No Python file over 450 lines: the benchmarks in evals/bench included."""
    oversized = []
    for rel in _python_files():
        n = len((ROOT / rel).read_text(encoding="utf-8").splitlines())
        if n > MAX_LINES:
            oversized.append(f"{rel}: {n} lines")
    assert oversized == [], f"over {MAX_LINES} lines: {oversized}"
