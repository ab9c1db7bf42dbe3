"""Tool overheads on this machine: sandbox round trip, calculator, call parsing, loop bookkeeping.

    .venv/bin/python -m evals.bench.tools

Prints one table. The model is not involved (the loop row uses the scripted backend), so these are
the costs tools add on top of generation.
"""

from __future__ import annotations

import asyncio
import statistics
import time

from agentrt.backends.scripted import ScriptedBackend
from agentrt.routes.toolcall import run_tool_loop
from tools import execute, parse_tool_calls
from tools.calculator import calculator, evaluate
from tools.python import SandboxLimits, run_python


def timed(fn, repeat: int) -> list[float]:
    out = []
    for _ in range(repeat):
        start = time.perf_counter()
        fn()
        out.append(time.perf_counter() - start)
    return out


def main() -> None:
    limits = SandboxLimits(cpu_s=2, wall_s=10)
    layers = run_python("print(1)", limits).layers
    rows = [
        (f"python sandbox: print(1), {launcher}",
         timed(lambda launcher=launcher: run_python("print(1)", limits, launchers=(launcher,)), 10))
        for launcher in ("bwrap", "namespaces")
    ] + [
        ("python sandbox: print(1), unsafe (no isolating layer)",
         timed(lambda: run_python("print(1)", limits, launchers=(), allow_unsafe=True), 10)),
        ("calculator: evaluate('1234*5678')", timed(lambda: evaluate("1234*5678"), 2000)),
        ("calculator tool via execute()", timed(lambda: asyncio.run(execute(calculator, {"expression": "2**64"})), 200)),
        ("parse <tool_call> text", timed(lambda: parse_tool_calls(
            '<tool_call>{"name": "calculator", "arguments": {"expression": "1+1"}}</tool_call>'), 2000)),
    ]
    script = ['{"name": "calculator", "arguments": {"expression": "6*7"}}',
              '{"name": "final_answer", "arguments": {"answer": "42"}}']
    rows.append(("tool loop, 2 steps, scripted model", timed(lambda: asyncio.run(run_tool_loop(
        ScriptedBackend(list(script)), [{"role": "user", "content": "6*7?"}], [calculator], budget=4000)), 100)))
    print(f"sandbox layers here: {', '.join(layers)}")
    print(f"{'operation':50} {'runs':>5} {'p50 ms':>9} {'p95 ms':>9}")
    for name, samples in rows:
        samples.sort()
        p95 = samples[min(len(samples) - 1, int(0.95 * len(samples)))]
        print(f"{name:50} {len(samples):>5} {statistics.median(samples) * 1e3:>9.3f} {p95 * 1e3:>9.3f}")


if __name__ == "__main__":
    main()
