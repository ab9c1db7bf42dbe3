"""`import agentrt` (and the other rooms) must not load heavy libraries."""

import subprocess
import sys

HEAVY = ("torch", "transformers", "vllm", "chromadb", "langgraph", "onnxruntime", "xgrammar")


def test_import_is_light():
    code = (
        "import sys, agentrt, agentrt.app.cli, planners, memory, tools, evals\n"
        "agentrt.app.cli.build_parser()\n"
        f"print(','.join(m for m in {HEAVY!r} if m in sys.modules))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "", f"heavy modules imported: {out.stdout.strip()}"


def test_plain_import_loads_nothing_but_the_package():
    """PEP 562: `import agentrt` defines names only; the core ones load core modules, no runtime layer."""
    code = (
        "import sys, agentrt\n"
        "print(' '.join(sorted(m for m in sys.modules if m.startswith('agentrt'))))\n"
        "agentrt.Budget, agentrt.Settings, agentrt.InputError, agentrt.Message\n"
        "print(' '.join(sorted(m for m in sys.modules if m.startswith('agentrt'))))\n"
        f"print(','.join(m for m in {HEAVY!r} if m in sys.modules))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    bare, core, heavy = out.stdout.splitlines()
    assert bare == "agentrt"
    assert all(m in ("agentrt", "agentrt.core") or m.startswith("agentrt.core.") for m in core.split()), core
    assert heavy == "", f"heavy modules imported: {heavy}"


def test_agent_class_is_light():
    """`agentrt.Agent` loads the app layer and what it needs, still no heavy library."""
    code = f"import sys, agentrt\nagentrt.Agent\nprint(','.join(m for m in {HEAVY!r} if m in sys.modules))"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "", f"heavy modules imported: {out.stdout.strip()}"


def test_rooms_do_not_import_each_other():
    """planners/, memory/, tools/ may import only agentrt.core (import-linter checks the same, indirect imports too)."""
    import ast
    from pathlib import Path

    root = Path(__file__).resolve().parents[2]
    rooms = {"planners", "memory", "tools"}
    banned_top = {"langgraph", "vllm"}
    problems = []
    for room in rooms:
        for path in (root / room).rglob("*.py"):
            for node in ast.walk(ast.parse(path.read_text())):
                names = []
                if isinstance(node, ast.Import):
                    names = [a.name for a in node.names]
                elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
                    names = [node.module]
                for name in names:
                    top = name.split(".")[0]
                    if top in rooms - {room} or top in banned_top:
                        problems.append(f"{path.relative_to(root)} imports {name}")
                    if top == "agentrt" and name not in ("agentrt", "agentrt.core") and not name.startswith("agentrt.core."):
                        problems.append(f"{path.relative_to(root)} imports {name}")
    assert problems == []
