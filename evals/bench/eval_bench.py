"""Benchmark: eval harness overhead per item, and the speed-up of parallel workers (batching).

    .venv/bin/python -m evals.bench.eval_bench [--overhead-items 300] [--items 40] [--answer-max-tokens 64]
                                               [--skip-model]

Targets (issue 9):
* harness overhead per item <= 5 ms excluding model time: the scripted backend (no model time); the
  harness's cost is an eval's wall time minus the same runs through ``Agent.arun`` in a plain loop
  (it can come out negative: the eval moves scoring and trajectory fsyncs into threads).
* 40 GSM8K items on the embedded model: --workers 4 at least 2.5x faster than --workers 1.
Prints one table.
"""

from __future__ import annotations

import asyncio
import os
import tempfile
import time
from pathlib import Path

from rich.console import Console
from rich.table import Table

from evals.bench.common import parser, reuse_converted_model

# Temporary homes per phase, one shared converted model (as the tests do).
reuse_converted_model()


def _overhead(n: int, tmp: Path) -> dict[str, float]:
    from agentrt import Agent
    from agentrt.backends.scripted import ScriptedBackend
    from evals.metrics import compute
    from evals.report import write_reports
    from evals.routers import make_router
    from evals.runner import EvalConfig, plan_tasks, run_tasks
    from evals.suites import load_suite

    items = load_suite("gsm8k").items[:n]
    os.environ["AGENTRT_HOME"] = str(tmp / "home-plain")
    agent = Agent(policy=ScriptedBackend(["#### 42"]))

    async def plain() -> None:
        for item in items:
            await agent.arun(item.question, budget=1024, route="direct")

    t0 = time.perf_counter()
    asyncio.run(plain())
    plain_s = time.perf_counter() - t0
    os.environ["AGENTRT_HOME"] = str(tmp / "home-eval")
    agent = Agent(policy=ScriptedBackend(["#### 42"]))
    config = EvalConfig(suites=["gsm8k"], routers=["fixed:direct"], budget=1024, limit=n, workers=1, out=str(tmp / "overhead"))
    t0 = time.perf_counter()
    records = asyncio.run(run_tasks(agent, plan_tasks([load_suite("gsm8k")], [make_router("fixed:direct")], 1, n), config))
    eval_s = time.perf_counter() - t0
    t0 = time.perf_counter()
    write_reports(tmp / "overhead", compute(records), {"suites": ["gsm8k"]})
    report_s = time.perf_counter() - t0
    return {"plain_ms": plain_s / n * 1e3, "eval_ms": eval_s / n * 1e3, "overhead_ms": (eval_s - plain_s) / n * 1e3,
            "report_s": report_s}


def _speedup(n: int, answer_max_tokens: int, tmp: Path) -> dict[str, float]:
    from agentrt import Agent
    from evals.runner import EvalConfig, evaluate

    os.environ["AGENTRT_HOME"] = str(tmp / "home-model")
    agent = Agent(answer_max_tokens=answer_max_tokens)
    agent.policy  # noqa: B018 - load before timing
    out: dict[str, float] = {}
    stats = getattr(agent.policy, "stats", None)
    for workers in (4, 1):
        before = (stats.requests, stats.batches, stats.prefill_s + stats.decode_s) if stats else (0, 0, 0.0)
        if hasattr(agent.policy, "prefix_cache"):
            agent.policy.prefix_cache.clear()  # each run starts cold: no reuse of the other run's prompts
        t0 = time.perf_counter()
        report = evaluate(EvalConfig(suites=["gsm8k"], routers=["fixed:direct"], budget=1024, limit=n, workers=workers,
                                     out=str(tmp / f"w{workers}")), agent=agent)
        out[f"w{workers}_s"] = time.perf_counter() - t0
        if stats and stats.batches > before[1]:  # did concurrent runs share forward passes?
            out[f"w{workers}_rows_per_batch"] = (stats.requests - before[0]) / (stats.batches - before[1])
            out[f"w{workers}_model_s"] = stats.prefill_s + stats.decode_s - before[2]
        out["threads"] = f"{getattr(agent.policy, 'threads', '-')} / {getattr(agent.policy, 'wide_threads', '-')}"
        out[f"w{workers}_acc"] = report["policies"]["fixed:direct"]["gsm8k"]["accuracy"]
    out["speedup"] = out["w1_s"] / out["w4_s"]
    return out


def main() -> None:
    ap = parser(__doc__)
    ap.add_argument("--overhead-items", type=int, default=300)
    ap.add_argument("--items", type=int, default=40)
    ap.add_argument("--answer-max-tokens", type=int, default=64)
    ap.add_argument("--skip-model", action="store_true")
    args = ap.parse_args()
    table = Table(title="eval harness benchmark")
    for col in ("measure", "value", "target"):
        table.add_column(col)
    with tempfile.TemporaryDirectory() as d:
        tmp = Path(d)
        o = _overhead(args.overhead_items, tmp)
        table.add_row(f"Agent.arun alone, scripted ({args.overhead_items} items)", f"{o['plain_ms']:.2f} ms/item", "")
        table.add_row("agentrt eval, scripted, 1 worker", f"{o['eval_ms']:.2f} ms/item", "")
        table.add_row("harness overhead per item", f"{o['overhead_ms']:.2f} ms", "<= 5 ms")
        table.add_row("reports (metrics, markdown, JSON, 2 PNGs), once per eval", f"{o['report_s']:.2f} s", "")
        if not args.skip_model:
            s = _speedup(args.items, args.answer_max_tokens, tmp)
            table.add_row(f"{args.items} GSM8K, embedded, --workers 1", f"{s['w1_s']:.1f} s (acc {s['w1_acc']:.3f})", "")
            table.add_row(f"{args.items} GSM8K, embedded, --workers 4", f"{s['w4_s']:.1f} s (acc {s['w4_acc']:.3f})", "")
            table.add_row("speed-up workers 4 vs 1", f"{s['speedup']:.2f}x", ">= 2.5x")
            if "w4_rows_per_batch" in s:
                table.add_row("requests per batch, --workers 4", f"{s['w4_rows_per_batch']:.2f}", "")
            table.add_row("torch threads: one-row steps / wide passes", s["threads"], "")
            for w in (1, 4):
                if f"w{w}_model_s" in s:
                    table.add_row(f"model forward passes, --workers {w}",
                                  f"{s[f'w{w}_model_s']:.1f} s ({s[f'w{w}_model_s'] / s[f'w{w}_s']:.0%} of wall)", "")
    Console().print(table)


if __name__ == "__main__":
    main()
