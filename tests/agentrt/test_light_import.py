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


def test_rooms_do_not_import_each_other():
    """planners/, memory/, tools/ may import only agentrt's shared vocabulary."""
    import ast
    from pathlib import Path

    root = Path(__file__).resolve().parents[2]
    allowed_agentrt = {"agentrt", "agentrt.core.types", "agentrt.core.protocols", "agentrt.core.errors", "agentrt.core.budget"}
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
                    if top == "agentrt" and name not in allowed_agentrt:
                        problems.append(f"{path.relative_to(root)} imports {name}")
    assert problems == []
