"""Benchmark: is every ``ok`` run a real answer, and does every other run say why? (issue 37)

    .venv/bin/python -m evals.bench.answer_bench [-n 300] [--seed 0] [--concurrency 4] [--out FILE]

Seeded random runs of the embedded model: questions drawn from five kinds (greetings and thanks, arithmetic,
short facts, questions over the bundled sample corpus, nonsense), each on a random route (every route, and
``auto``: the router decides) under a random budget from the run's minimum (its prompt + 16 tokens) to 4,096.
The sample corpus is indexed into a scratch home (the converted model is reused), so ``plan``, ``read`` and
the reason route's search tool have an index to use.

Every run is checked by the answer contract (``agentrt.core.answer.check_answer``): an ``ok`` run must hold a
real answer; any other status must carry its reason (``Result.error``). Prints, per route, the share of
``ok`` runs with a real answer (goal: 100%) and of runs that ended ``no_answer``; exits 1 when an ``ok`` run
had no real answer or a failed run said nothing. Rows go to a JSON-lines file as they finish
(``--out``; a second run with the same file resumes).
"""

from __future__ import annotations

import asyncio
import json
import os
import random
import tempfile
import time
from collections import defaultdict
from pathlib import Path
from typing import Any

from evals.bench.common import append_jsonl, parser, read_jsonl, reuse_converted_model, show, table

KINDS = ("greeting", "arithmetic", "fact", "corpus", "nonsense")
GREETINGS = ("Hi, my name is Kai.", "Hello!", "Thanks a lot!", "Good morning.", "Thank you, that helps.",
             "Hey there, nice to meet you.", "Bye!", "How are you?")
FACTS = ("What is the capital of France?", "What is the capital of Italy?", "Who wrote Hamlet?",
         "What color is the sky on a clear day?", "How many legs does a spider have?",
         "What is the largest planet in the solar system?", "What language is spoken in Brazil?")
MAX_BUDGET = 4096


def _corpus_questions() -> list[str]:
    from importlib import resources

    text = resources.files("agentrt.data").joinpath("sample_questions.jsonl").read_text(encoding="utf-8")
    return [json.loads(line)["question"] for line in text.splitlines() if line.strip()]


def question(kind: str, rng: random.Random) -> str:
    """A random question of ``kind`` (one of ``KINDS``)."""
    if kind == "greeting":
        return rng.choice(GREETINGS)
    if kind == "arithmetic":
        a, b, op = rng.randint(2, 99), rng.randint(2, 99), rng.choice("+-*")
        return rng.choice(("What is {} {} {}?", "Compute {} {} {}.", "{} {} {} = ?")).format(a, op, b)
    if kind == "fact":
        return rng.choice(FACTS)
    if kind == "corpus":
        return rng.choice(_corpus_questions())
    letters = "abcdefghijklmnopqrstuvwxyz"
    return " ".join("".join(rng.choice(letters) for _ in range(rng.randint(3, 9))) for _ in range(rng.randint(2, 6)))


def plan_runs(n: int, seed: int, routes: tuple[str, ...]) -> list[dict[str, Any]]:
    """``n`` seeded run specs: kind, question, route ("auto": the router decides), a budget draw in [0, 1)
    (mapped log-uniformly between the run's minimum and 4,096 once its prompt is counted)."""
    rng = random.Random(seed)
    runs = []
    for i in range(n):
        kind = KINDS[i % len(KINDS)] if i < len(KINDS) else rng.choice(KINDS)
        runs.append({"i": i, "kind": kind, "question": question(kind, rng), "route": rng.choice(routes),
                     "draw": rng.random()})
    return runs


def budget_for(draw: float, minimum: int, top: int = MAX_BUDGET) -> int:
    """Log-uniform between ``minimum`` and ``top`` (draw 0 -> the minimum itself, draw 1 -> ``top``)."""
    return min(top, int(round(minimum * (top / minimum) ** draw)))


def verdict(result: Any) -> dict[str, Any]:
    """What the contract says of a finished run: ``real`` (a real answer), ``violation`` (why the run breaks it)."""
    from agentrt.core.answer import check_answer

    real = check_answer(result.answer, result.record.question if result.record else "").ok
    violation = ""
    if result.status == "ok" and not real:
        violation = "ok without a real answer"
    elif result.status != "ok" and not (result.error or "").strip():
        violation = f"status {result.status} without a reason"
    return {"real": real, "violation": violation}


async def run_one(agent: Any, spec: dict[str, Any], top: int = MAX_BUDGET) -> dict[str, Any]:
    """Run one spec on ``agent``; the row records the outcome and the contract's verdict."""
    from agentrt.core.types import Message

    minimum = agent.policy.count_tokens([Message("user", spec["question"])]) + 16
    budget = budget_for(spec["draw"], minimum, top)
    route = None if spec["route"] == "auto" else spec["route"]
    t0 = time.perf_counter()
    row = {**spec, "budget": budget}
    try:
        result = await agent.arun(spec["question"], budget=budget, route=route)
    except Exception as e:  # a raised run is a failure the bench reports, never a silent pass
        return {**row, "status": "raised", "route_taken": spec["route"], "answer": "",
                "error": f"{type(e).__name__}: {e}", "real": False, "violation": "", "tokens": 0,
                "wall_s": round(time.perf_counter() - t0, 2)}
    return {**row, "status": result.status, "route_taken": result.route, "answer": result.answer[:300],
            "partial": (result.partial or "")[:300], "error": result.error, "tokens": result.usage.total_tokens,
            "wall_s": round(time.perf_counter() - t0, 2), **verdict(result)}


async def run_all(agent: Any, specs: list[dict[str, Any]], concurrency: int, out: Path | None,
                  progress: bool = True, top: int = MAX_BUDGET) -> list[dict[str, Any]]:
    """Run ``specs`` ``concurrency`` at a time (the model batches them); rows appended to ``out`` as they end."""
    gate = asyncio.Semaphore(concurrency)
    rows: list[dict[str, Any]] = []

    async def one(spec: dict[str, Any]) -> None:
        async with gate:
            row = await run_one(agent, spec, top)
        rows.append(row)
        if out is not None:
            append_jsonl(out, row)
        if progress:
            print(f"[{len(rows)}/{len(specs)}] {row['route']:>7} -> {row['route_taken']:<7} {row['status']:<9} "
                  f"{row['tokens']:>5}/{row['budget']:<5} {row['kind']:<10} {row['answer'][:60]!r}"
                  + (f"  VIOLATION: {row['violation']}" if row['violation'] else ""), flush=True)

    await asyncio.gather(*(one(s) for s in specs))
    return rows


def summary(rows: list[dict[str, Any]]) -> list[list[Any]]:
    """Per route asked (and all): runs, ok, share of ok runs with a real answer, no_answer, truncated, raised."""
    groups: dict[str, list[dict[str, Any]]] = defaultdict(list)
    for r in rows:
        groups[r["route"]].append(r)
        groups["all"].append(r)
    out = []
    for name in sorted(groups, key=lambda g: (g == "all", g)):
        g = groups[name]
        ok = [r for r in g if r["status"] == "ok"]
        share = lambda xs: f"{len(xs) / len(g):.0%}"  # noqa: E731
        out.append([name, len(g), len(ok), f"{sum(r['real'] for r in ok) / len(ok):.1%}" if ok else "-",
                    share([r for r in g if r["status"] == "no_answer"]),
                    share([r for r in g if r["status"] == "truncated"]),
                    len([r for r in g if r["status"] in ("failed", "raised")]),
                    round(sum(r["tokens"] for r in g) / len(g))])
    return out


def open_agent(home: Path) -> Any:
    """An Agent on a scratch home with the bundled sample corpus indexed as its default collection."""
    os.environ["AGENTRT_HOME"] = str(home)
    reuse_converted_model()
    from agentrt import Agent
    from agentrt.app.commands.demo import DEMO_CORPUS, index_sample_corpus
    from agentrt.core.config import load_settings

    settings = load_settings(corpus=DEMO_CORPUS)
    index_sample_corpus(settings)
    return Agent(settings)


def main() -> int:
    from agentrt.core.types import ROUTES

    p = parser(__doc__)
    p.add_argument("-n", type=int, default=300, help="runs (default 300)")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--concurrency", type=int, default=4, help="runs in flight together (default 4)")
    p.add_argument("--out", default=None, help="JSON-lines rows (default: a file in the scratch home); resumes")
    p.add_argument("--home", default=None, help="the scratch home (default: a new temporary folder)")
    args = p.parse_args()
    home = Path(args.home or tempfile.mkdtemp(prefix="agentrt-answer-bench-"))
    out = Path(args.out) if args.out else home / "answer_bench.jsonl"
    specs = plan_runs(args.n, args.seed, ROUTES + ("auto",))
    done = {r["i"]: r for r in read_jsonl(out)}
    todo = [s for s in specs if s["i"] not in done]
    agent = open_agent(home)
    t0 = time.perf_counter()
    rows = list(done.values()) + asyncio.run(run_all(agent, todo, args.concurrency, out))
    rows = [r for r in rows if r["i"] < args.n]
    show(table(f"answer contract over {len(rows)} seeded runs (seed {args.seed}, budgets min..{MAX_BUDGET}; "
               f"{time.perf_counter() - t0:.0f} s)",
               ["route asked", "runs", "ok", "ok with a real answer", "no_answer", "truncated", "failed",
                "mean tokens"],
               summary(rows)), width=160)
    bad = [r for r in rows if r["violation"] or r["status"] == "raised"]
    for r in bad:
        print(f"VIOLATION run {r['i']} ({r['route']}, budget {r['budget']}): {r['violation'] or r['error']} "
              f"answer={r['answer'][:80]!r}")
    print(f"rows: {out}")
    return 1 if bad else 0


if __name__ == "__main__":
    raise SystemExit(main())
