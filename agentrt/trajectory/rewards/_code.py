"""Unit-test rewards (human-eval style): program + test + ``check(entry_point)`` in the python sandbox.

The code a model or a client wrote runs only inside ``tools.python``'s sandbox (bubblewrap or our own
namespaces: no network, no host files, a read-only root, uid nobody, seccomp, rlimits; threat model:
tools/README.md), under CPU-time, memory and wall-clock limits. Where no isolating launcher works the
grader refuses (``SandboxUnavailable``, one line saying how to enable one), unless the user opted into the
sandbox's ``unsafe`` mode (``AGENTRT_ALLOW_PYTHON=unsafe``). The result comes back as one line holding a
nonce, written to a private copy of the sandbox's stdout; what the candidate prints goes to /dev/null.

Partial credit: every ``assert`` in ``check`` is counted on its own, so the score is the fraction
of asserts that pass. Cheats are found statically (the program's AST) and at run time (the process
exited before ``check`` finished); each is named in ``Reward.penalties``.
"""

from __future__ import annotations

import ast
import json
import math
import os
import re
import secrets
from functools import cache
from pathlib import Path

from agentrt.trajectory.rewards._base import CHEAT_PENALTY, Reward, penalized

_CHILD = Path(__file__).with_name("_code_child.py")  # the harness the sandbox runs
_MAX_REPORT = 4000  # characters of output kept: the report is one short line, the candidate's prints go nowhere

# name -> why; matched against dotted names the program uses (calls, attributes, imports).
_FORBIDDEN = {
    "sys.exit": "exits early", "os._exit": "exits early", "exit": "exits early", "quit": "exits early",
    "os.abort": "exits early", "os.kill": "exits early", "signal": "exits early",
    "builtins": "patches builtins", "__builtins__": "patches builtins", "__import__": "patches builtins",
    "AssertionError": "patches assert", "sys.modules": "patches the checker", "sys._getframe": "edits the tests",
    "inspect": "edits the tests", "gc": "edits the tests", "globals": "edits the tests", "atexit": "exits early",
    "unittest": "skips the tests", "pytest": "skips the tests", "sys.settrace": "edits the tests",
    "sys.setprofile": "edits the tests", "ctypes": "patches the checker",
}
_RESERVED_DEFS = {"check": "redefines the checker", "METADATA": "edits the tests", "candidate": "edits the tests"}


def find_cheats(program: str, entry_point: str = "") -> dict[str, str]:
    """Static cheat scan: ``{what: why}`` for every forbidden construct in ``program``."""
    try:
        tree = ast.parse(program)
    except SyntaxError:
        return {}
    found: dict[str, str] = {}
    for node in ast.walk(tree):
        names: list[str] = []
        if isinstance(node, ast.Import):
            names = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom) and node.module:
            names = [node.module] + [f"{node.module}.{a.name}" for a in node.names]
        elif isinstance(node, (ast.Name, ast.Attribute)):
            names = [_dotted(node)]
        elif isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)) and node.name in _RESERVED_DEFS:
            found[node.name] = _RESERVED_DEFS[node.name]
        elif isinstance(node, (ast.Assign, ast.AnnAssign)):
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            for t in targets:
                if isinstance(t, ast.Name) and t.id in _RESERVED_DEFS:
                    found[t.id] = _RESERVED_DEFS[t.id]
        if isinstance(node, ast.ClassDef) and _always_equal(node):
            found[f"{node.name}.__eq__"] = "fakes equality (an object equal to everything)"
        for name in names:
            for forbidden, why in _FORBIDDEN.items():
                if name == forbidden or name.startswith(forbidden + "."):
                    found[forbidden] = why
    return found


def _dotted(node: ast.AST) -> str:
    parts = []
    while isinstance(node, ast.Attribute):
        parts.append(node.attr)
        node = node.value
    if isinstance(node, ast.Name):
        parts.append(node.id)
    return ".".join(reversed(parts))


def _always_equal(cls: ast.ClassDef) -> bool:
    """A class whose ``__eq__`` returns a constant True (or whose ``__ne__`` returns False)."""
    for item in cls.body:
        if isinstance(item, ast.FunctionDef) and item.name in ("__eq__", "__ne__"):
            returns = [n for n in ast.walk(item) if isinstance(n, ast.Return)]
            want = item.name == "__eq__"
            if returns and all(isinstance(r.value, ast.Constant) and r.value.value is want for r in returns):
                return True
    return False


def instrument_test(test: str) -> str:
    """Rewrite every ``assert X`` inside ``check`` into ``__agentrt_assert__(lambda: X)`` (counted)."""
    tree = ast.parse(test)

    class _Rewrite(ast.NodeTransformer):
        def visit_Assert(self, node: ast.Assert) -> ast.AST:
            call = ast.Call(func=ast.Name("__agentrt_assert__", ast.Load()),
                            args=[ast.Lambda(args=ast.arguments(posonlyargs=[], args=[], kwonlyargs=[],
                                                                kw_defaults=[], defaults=[]), body=node.test)],
                            keywords=[])
            return ast.copy_location(ast.Expr(call), node)

    for node in tree.body:
        if isinstance(node, ast.FunctionDef) and node.name == "check":
            _Rewrite().visit(node)
    return ast.unparse(ast.fix_missing_locations(tree))


def unit_tests(program: str, test: str, entry_point: str, *, prompt: str = "", timeout_s: float = 10.0,
               memory_mb: int = 1024) -> Reward:
    """Run ``program`` (a response: code, or text with a fenced code block) against a human-eval ``test``.

    ``prompt``: the function signature/docstring, prepended when the program does not define
    ``entry_point`` itself (human-eval completions continue the prompt).
    """
    code = extract_code(program)
    if prompt and not re.search(rf"^\s*def\s+{re.escape(entry_point)}\b", code, re.M):
        code = prompt + code
    elif prompt:  # a whole function: keep the prompt's imports (``List`` in a signature needs them)
        imports = [ln for ln in prompt.splitlines() if re.match(r"(import|from)\s+\w", ln)]
        code = "\n".join(imports + [code])
    cheats = find_cheats(code, entry_point)
    try:
        ast.parse(code)
    except SyntaxError as e:
        return Reward(score=0.0, components={"passed": 0.0, "total": 0.0}, reason=f"syntax error: {e.msg} (line {e.lineno})",
                      verifier="unit_tests")
    try:
        instrumented = instrument_test(test)
    except SyntaxError as e:
        return Reward(score=0.0, reason=f"the test does not parse: {e.msg}", verifier="unit_tests")
    result = _run_child(code, instrumented, entry_point, timeout_s, memory_mb)
    passed, total = result.get("passed", 0), result.get("total", 0)
    components = {"passed": float(passed), "total": float(total), "all_passed": 0.0}
    penalties = {f"cheat:{k}": CHEAT_PENALTY for k in cheats}
    if result["state"] == "early_exit":
        penalties["cheat:early_exit"] = CHEAT_PENALTY
    if penalties:
        why = sorted(set(cheats.values()) | ({"exits early"} if result["state"] == "early_exit" else set()))
        return penalized(0.0, components, {k: v for k, v in penalties.items()}, "cheating: " + "; ".join(why), "unit_tests")
    if result["state"] != "done":
        return Reward(score=0.0, components=components, reason=result.get("error", result["state"]), verifier="unit_tests")
    base = passed / total if total else 1.0
    components["all_passed"] = float(passed == total)
    return Reward(score=round(base, 6), components=components, reason=f"{passed}/{total} asserts passed",
                  verifier="unit_tests")


def extract_code(response: str) -> str:
    """The last fenced python block of a response, else the response itself."""
    blocks = re.findall(r"```(?:python|py)?\s*\n(.*?)```", response, re.S)
    return blocks[-1] if blocks else response


def _run_child(program: str, test: str, entry_point: str, timeout_s: float, memory_mb: int) -> dict:
    """Grade in the python sandbox (``tools.python.run_python``): the harness's report, or how the run ended."""
    from tools.python import SandboxLimits, SandboxUnavailable, run_python  # lazily: tools/ is not a light import

    nonce = secrets.token_hex(16)
    spec = json.dumps({"program": program, "test": test, "entry_point": entry_point, "nonce": nonce})
    cpu_s = max(1, math.ceil(timeout_s))
    limits = SandboxLimits(cpu_s=cpu_s + 1, wall_s=timeout_s + 5, memory_mb=max(64, memory_mb),
                           max_output_chars=_MAX_REPORT)
    try:
        result = run_python(_harness() + f"\nmain({spec!r})\n", limits, allow_unsafe=allow_unsafe())
    except SandboxUnavailable as e:
        raise SandboxUnavailable(f"the unit_tests grader runs answers as code only inside the python sandbox: "
                                 f"{e}") from None
    report = None
    for line in result.output.splitlines():
        try:
            obj = json.loads(line)
        except ValueError:
            continue
        if isinstance(obj, dict) and obj.get("nonce") == nonce:
            report = obj
    if report is not None:
        return report
    if result.stopped in ("wall", "cpu"):
        return {"state": "timeout", "error": f"timed out after {timeout_s:g} s ({result.stopped} limit)"}
    if result.stopped == "memory":
        return {"state": "killed", "error": f"killed: the memory limit of {limits.memory_mb} MB was reached"}
    if result.stopped or result.signal:
        return {"state": "killed", "error": result.observation(limits).splitlines()[0]}
    if result.exit_code == 0:
        return {"state": "early_exit"}
    return {"state": "crashed", "error": f"exit code {result.exit_code}"}


def allow_unsafe() -> bool:
    """Whether the grader may fall back to the sandbox's ``unsafe`` mode where no isolating launcher works:
    only when the user opted into it for the python tool too (``AGENTRT_ALLOW_PYTHON=unsafe``)."""
    return os.environ.get("AGENTRT_ALLOW_PYTHON", "").strip().lower() == "unsafe"


@cache
def _harness() -> str:
    return _CHILD.read_text(encoding="utf-8")
