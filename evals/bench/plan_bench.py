"""Benchmark: the plan route vs direct vs reason on HotpotQA dev, and the plan's parallel efficiency.

    .venv/bin/python -m evals.bench.plan_bench [--questions 100] [--budget 6000] [--cache plan_bench.jsonl]
        [--store DIR --collection NAME] [--pool 300] [--workers 1] [--efficiency-only] [--skip-efficiency]

* Quality table: EM / F1 (SQuAD normalization), tokens per question and wall time per question for each
  route, on the first ``--questions`` HotpotQA dev questions, over a pooled corpus (the paragraphs of the
  first ``--pool`` questions, deduplicated; or an existing collection via --store/--collection).
  Resumable: every (question, route) result is appended to the JSONL cache and skipped on a rerun.
* Parallel efficiency: the wall time of one 8-searcher fan-out vs the same 8 steps run one after
  another (a chain plan: each step depends on the previous one), on the transformers batcher.
  Target (issue 23): >= 3.5x.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import statistics
import time
from pathlib import Path

from rich.console import Console

from evals.bench.common import DEFAULT_HOME, parser, read_jsonl, table

ROUTES = ("plan", "direct", "reason")


def hotpot_corpus(workdir: str | Path, pool: int):
    """The pooled paragraphs of the first ``pool`` HotpotQA dev questions, indexed once under ``workdir``."""
    from memory.corpus import open_corpus
    from memory.ingest import hotpotqa_chunks, ingest, load_hotpotqa

    corpus = open_corpus(Path(workdir) / "memory", f"hotpot{pool}", create=True)
    chunks = hotpotqa_chunks(load_hotpotqa(), limit=pool)
    if corpus.count() < len(chunks):
        ingest(corpus.store, chunks)
        corpus.invalidate()
    return corpus


def _corpus(args: argparse.Namespace):
    from memory.corpus import open_corpus

    if args.store:
        return open_corpus(args.store, args.collection)
    return hotpot_corpus(args.workdir, args.pool)


def quality(args: argparse.Namespace, console: Console) -> None:
    from agentrt import Agent
    from agentrt.core.config import load_settings
    from agentrt.trajectory.rewards import exact_match, f1_score
    from memory.ingest import load_hotpotqa

    corpus = _corpus(args)
    cache = Path(args.cache)
    done = {(r["id"], r["route"]): r for r in read_jsonl(cache)}
    qs = load_hotpotqa()[: args.questions]
    agent = Agent(load_settings(home=args.workdir, corpus=corpus.name))
    if args.store:  # the plan route searches this corpus wherever it lives
        import agentrt.routes.index as wf

        from memory.corpus import resolve_location

        wf._CORPORA[(resolve_location(agent.settings), corpus.name)] = corpus
    agent.policy  # noqa: B018 - load before timing
    deadline = time.time() + args.max_minutes * 60
    todo = [(i, q, route) for i, q in enumerate(qs) for route in ROUTES if (q["_id"], route) not in done]
    gate = asyncio.Semaphore(args.workers)

    async def one(i: int, q: dict, route: str, out) -> None:
        async with gate:
            if time.time() > deadline:
                return
            t0 = time.perf_counter()
            r = await agent.arun(q["question"], budget=args.budget, route=route)
        row = {"id": q["_id"], "route": route, "type": q.get("type"), "answer": r.answer, "gold": q["answer"],
               "em": exact_match(r.answer, q["answer"]), "f1": f1_score(r.answer, q["answer"]),
               "tokens": r.usage.total_tokens, "wall_s": round(time.perf_counter() - t0, 2),
               "workers": args.workers, "status": r.status, "citations": r.citations}
        out.write(json.dumps(row) + "\n")
        out.flush()
        done[(q["_id"], route)] = row
        console.print(f"[{i + 1}/{len(qs)}] {route:6s} em={row['em']:.0f} f1={row['f1']:.2f} "
                      f"tok={row['tokens']} {row['wall_s']}s  {r.answer[:60]!r} (gold {q['answer']!r})")

    async def run_all() -> None:
        with cache.open("a") as out:
            await asyncio.gather(*(one(i, q, route, out) for i, q, route in todo))

    asyncio.run(run_all())
    ids = {q["_id"] for q in qs}
    complete = [i for i in ids if all((i, r) in done for r in ROUTES)]
    t = table(f"HotpotQA dev, {len(complete)} questions x 3 routes (embedded SmolLM2-135M, "
              f"budget {args.budget}, corpus {corpus.name}: {corpus.count()} passages, {args.workers} in flight)",
              ("route", "EM", "F1", "tokens / question", "wall s / question", "truncated"))
    for route in ROUTES:
        rows = [done[(i, route)] for i in complete]
        n = max(1, len(rows))
        t.add_row(route, f"{sum(r['em'] for r in rows) / n:.3f}", f"{sum(r['f1'] for r in rows) / n:.3f}",
                  f"{sum(r['tokens'] for r in rows) / n:.0f}", f"{sum(r['wall_s'] for r in rows) / n:.1f}",
                  str(sum(r["status"] == "truncated" for r in rows)))
    console.print(t)


def efficiency(args: argparse.Namespace, console: Console) -> None:
    from agentrt.backends import load_backend
    from agentrt.core.budget import Budget
    from agentrt.core.config import Settings
    from agentrt.routes.context import RunContext
    from agentrt.core.config import PlanSettings
    from agentrt.routes.plan import run_plan
    from planners import Plan, Step

    backend = load_backend("hf:embedded", Settings())
    questions = [f"Who founded the company number {i} in the list?" for i in range(1, 9)]

    def searcher(query: str, k: int) -> list[dict]:
        return [{"id": f"d{j}", "title": f"Doc {j}", "text": f"{query}: founded by person {j}."} for j in range(k)]

    class Fixed:
        name = "fixed"

        def __init__(self, plan: Plan) -> None:
            self.p = plan

        async def plan(self, question, hits):
            return self.p

    parallel = Plan(goal="g", steps=[Step(id=f"s{i + 1}", question=q) for i, q in enumerate(questions)])
    chain = Plan(goal="g", steps=[Step(id=f"s{i + 1}", question=q, depends_on=[f"s{i}"] if i else [])
                                  for i, q in enumerate(questions)])
    # no step timeout: a cancelled request must not disturb the batch it shares (and skew the timing)
    opts = PlanSettings(max_steps=2, step_max_tokens=32, search_k=2, passage_chars=120, max_depth=8,
                       synth_max_tokens=32, step_timeout_s=1e6)

    def once(plan: Plan) -> tuple[float, int, int, int, int]:
        ctx = RunContext("bench", "g", Budget(100_000), backend, Settings())
        backend.prefix_cache.clear()  # each mode starts cold: no reuse of the other mode's prompts
        s = backend.stats
        f0, p0, c0, pf0, d0 = s.forward_passes, s.prompt_tokens, s.prefix_cached_tokens, s.prefill_s, s.decode_s
        t0 = time.perf_counter()
        asyncio.run(run_plan(ctx, "g", searcher=searcher, planner=Fixed(plan), options=opts))
        return (time.perf_counter() - t0, ctx.budget.spent, s.forward_passes - f0, s.prompt_tokens - p0,
                s.prefix_cached_tokens - c0, s.prefill_s - pf0, s.decode_s - d0)

    from agentrt.core.types import GenParams, Message

    asyncio.run(backend.chat([Message("user", "hi")], GenParams(max_tokens=4)))  # warm-up
    modes = (("fan-out (8 parallel searchers)", parallel), ("same 8 steps one after another", chain))
    runs: dict[str, list[tuple]] = {name: [] for name, _ in modes}
    ratios = []
    for _ in range(args.repeat):  # alternate the modes: a noisy machine slows both alike
        for name, plan in modes:
            runs[name].append(once(plan))
        ratios.append(runs[modes[1][0]][-1][0] / runs[modes[0][0]][-1][0])
    t = table(f"8-searcher fan-out vs sequential, transformers batcher (embedded model, CPU, torch "
              f"threads {backend.threads} / wide {backend.wide_threads}), median of {args.repeat}",
              ("mode", "wall s", "tokens", "forward passes", "prompt tokens (prefix-cached)", "prefill s", "decode s"))
    for name, rows in runs.items():
        wall, tokens, passes, prompt, cached, prefill_s, decode_s = (statistics.median(c) for c in zip(*rows))
        t.add_row(name, f"{wall:.1f}", f"{tokens:.0f}", f"{passes:.0f}", f"{prompt:.0f} ({cached:.0f})",
                  f"{prefill_s:.1f}", f"{decode_s:.1f}")
    console.print(t)
    console.print(f"parallel efficiency: {statistics.median(ratios):.2f}x median "
                  f"({', '.join(f'{r:.2f}' for r in ratios)}) (target >= 3.5x)")
    # The bound of this workload on this machine: the prompt passes are the same work in both modes, so
    # even a decode step of 8 rows as cheap as one of a single row leaves the fan-out this much faster.
    par, seq = runs[modes[0][0]], runs[modes[1][0]]
    ceilings = [s[0] / (p[0] - p[6] + s[6] / 8) for p, s in zip(par, seq, strict=True)]
    console.print(f"ceiling with free batching (8 rows decoded at the cost of one; prompt passes and the rest "
                  f"as measured): {statistics.median(ceilings):.2f}x median")
    backend.close()


def main() -> None:
    ap = parser(__doc__, whole=True)
    ap.add_argument("--questions", type=int, default=100)
    ap.add_argument("--budget", type=int, default=6000)
    ap.add_argument("--cache", default="plan_bench.jsonl")
    ap.add_argument("--workdir", default=str(DEFAULT_HOME / "plan_bench"))
    ap.add_argument("--store", help="an existing memory store (folder or URL) holding --collection")
    ap.add_argument("--collection", default="hotpotqa")
    ap.add_argument("--pool", type=int, default=300, help="pool the paragraphs of the first N questions")
    ap.add_argument("--workers", type=int, default=1, help="questions in flight at once (they share the batcher; "
                    "wall s / question then includes waiting for the others)")
    ap.add_argument("--max-minutes", type=float, default=1e9, help="stop starting new questions after this")
    ap.add_argument("--repeat", type=int, default=3, help="efficiency runs per mode (alternating); median reported")
    ap.add_argument("--efficiency-only", action="store_true")
    ap.add_argument("--skip-efficiency", action="store_true")
    args = ap.parse_args()
    console = Console()
    if not args.skip_efficiency:
        efficiency(args, console)
    if not args.efficiency_only:
        quality(args, console)


if __name__ == "__main__":
    main()
