"""evals/bench is a package (issue 33): every bench imports as ``evals.bench.<name>`` in a fresh interpreter,
none edits ``sys.path``, and no doc still tells a reader to run a bench as a script path."""

from __future__ import annotations

import ast
import re
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
BENCH = ROOT / "evals" / "bench"


def _modules() -> list[str]:
    return sorted(p.stem for p in BENCH.glob("*.py") if p.stem != "__init__")


def test_every_bench_imports_as_a_module_of_the_package():
    names = _modules()
    code = ("import importlib, sys\n"
            f"for name in {names!r}:\n"
            "    module = importlib.import_module('evals.bench.' + name)\n"
            "    if name not in ('common', 'cluster_procs') and not hasattr(module, 'main'):\n"
            "        sys.exit(name + ' has no main()')\n"
            "print(len(sys.modules['evals.bench'].__path__), 'ok')\n")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT, timeout=300)
    assert out.returncode == 0, out.stderr[-2000:]
    assert out.stdout.split() == ["1", "ok"]
    assert "batcher" in names and "common" in names  # the listing looks at the right folder


def test_no_bench_edits_sys_path():
    edits = []
    for path in sorted(BENCH.glob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.Attribute) and node.attr == "path" and getattr(node.value, "id", "") == "sys":
                edits.append(f"{path.name}:{node.lineno}")
    assert edits == [], f"sys.path used in {edits}: import siblings as evals.bench.<name> instead"


def test_docs_show_benches_run_as_modules():
    script_path = re.compile(r"python3? evals/bench/\w+\.py")
    texts = [*ROOT.glob("*.md"), *ROOT.glob("docs/*.md"), *ROOT.glob("*/README.md"), *BENCH.glob("*.py")]
    stale = [f"{p.relative_to(ROOT)}: {m.group(0)}" for p in texts for m in script_path.finditer(p.read_text())]
    assert stale == [], f"run benches as `python -m evals.bench.<name>`: {stale}"
    assert "-m evals.bench.batcher" in (ROOT / "Makefile").read_text()


def test_a_bench_refuses_an_unknown_family_or_route_in_one_line_before_it_runs(tmp_path):
    """read_bench on a family or route it has no data for: one line and exit 2, nothing run (a family name it
    did not know used to end in a KeyError traceback after the model had loaded)."""
    for flags, said in ((["--families", "squad,nosuch"], "unknown family nosuch: choose from"),
                        (["--routes", "read,reed"], "unknown route reed: choose from read")):
        out = subprocess.run([sys.executable, "-m", "evals.bench.read_bench", *flags, "--cache",
                              str(tmp_path / "c.jsonl"), "--workdir", str(tmp_path / "w")],
                             capture_output=True, text=True, cwd=ROOT, timeout=120)
        assert out.returncode == 2 and said in out.stderr and "Traceback" not in out.stderr, out.stderr
        assert not (tmp_path / "w").exists() and not (tmp_path / "c.jsonl").exists()
        if flags[0] == "--families":  # the never-seen families are benched too
            assert "squad-heldout" in out.stderr and "hotpotqa-heldout" in out.stderr
