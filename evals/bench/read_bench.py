"""Benchmark: the read route beside direct, reason and plan on each document family and on HotpotQA (issue 38).

    .venv/bin/python -m evals.bench.read_bench [--families squad,docs,hotpotqa-index,hotpotqa] [--limit 20]
        [--routes read,direct,reason,plan] [--plan-limit 10] [--budget 1500] [--pool 200]
        [--cache read_bench.jsonl] [--workdir DIR] [--tier large=hf:embedded:qwen2.5-coder-0.5b --routes read,read@large]
        [--routes auto,read,read@large]   # auto: the router in use decides, as with default settings

* A family (``evals.devsets.FAMILIES``, or a never-seen one of ``HELDOUT``) is a corpus and its questions: its
  corpus file is indexed once (Chroma + BM25) into a collection of its own under ``--workdir``; the first
  ``--limit`` items are asked (answerable and unanswerable-from-the-index alternate in squad, hotpotqa-index
  and the never-seen two; docs takes every answerable item in turn with one unanswerable after each three).
  ``hotpotqa``: the first ``--limit`` HotpotQA dev questions over the pooled paragraphs of the first
  ``--pool`` (the issue's 66,635-paragraph pool takes ~15 min to embed on 2 cores: ``--pool 7405`` for all of
  dev).
* Each (item, route) runs once through ``Agent.arun(route=...)`` with the family's corpus, budget ``--budget``
  (plan: the first ``--plan-limit`` items only, it costs ~10x). Scored by the harness's verifiers
  (``evals.verifiers.score_item``: qa = the reward's pass; unanswerable = it abstained) and, for answerable
  items, the lenient "gold contained in the answer" the issue used. Resumable: every result is appended to
  the cache and skipped on a rerun.
* Table per family: route, items, accuracy (all items), answerable right (contains), unanswerable abstained,
  token F1 over the answerable items (the best over the gold answers), tokens per item, seconds per item, and for
  ``auto`` the actions the router chose. The tiers are the default policy's (``--tier`` to set them, ``--tier none``
  for the policy alone).
"""

from __future__ import annotations

import asyncio
import time
from pathlib import Path

from rich.console import Console

from evals.bench.common import DEFAULT_HOME, append_jsonl, parser, read_jsonl, reuse_converted_model, table

ROUTES = ("read", "direct", "reason", "plan")
AUTO = "auto"  # not a route: the router in use decides (the default settings), the chosen action recorded


def family_items(name: str, limit: int) -> list:
    """The first ``limit`` items of a family's dev set (docs: answerable and unanswerable mixed in the file's
    ratio, 2:1, so any limit has both)."""
    from evals.suites import load_suite

    items = load_suite(name).items
    if name == "docs":
        answerable = [i for i in items if i.type != "unanswerable"]
        lacking = [i for i in items if i.type == "unanswerable"]
        every = max(1, len(answerable) // max(1, len(lacking)))
        mixed = []
        for n, item in enumerate(answerable):
            mixed.append(item)
            if n % every == every - 1 and lacking:
                mixed.append(lacking.pop(0))
        items = mixed + lacking
    return items[:limit]


def hotpot_items(limit: int) -> list:
    from evals.suites import load_suite

    return load_suite("hotpotqa").items[:limit]


def index_family(settings, name: str, pool: int) -> str:
    """Index the family's corpus (once) into the collection ``bench-<name>``; returns the collection."""
    from agentrt.app.corpus import index_path
    from evals.devsets import FAMILIES, HELDOUT
    from evals.suites import DATA_DIR

    collection = f"bench-{name}" if name != "hotpotqa" else f"bench-hotpot{pool}"
    if name == "hotpotqa":
        from memory.corpus import open_corpus, resolve_location
        from memory.ingest import hotpotqa_chunks, ingest, load_hotpotqa

        corpus = open_corpus(resolve_location(settings), collection, create=True)
        chunks = hotpotqa_chunks(load_hotpotqa(), limit=pool)
        if corpus.count() < len(chunks):
            ingest(corpus.store, chunks)
            corpus.invalidate()
        corpus.search("warm up", 1, mode="bm25")  # the BM25 cache the router's index features read
        return collection
    index_path(settings, HELDOUT[name][1] if name in HELDOUT else DATA_DIR / FAMILIES[name][1], name=collection)
    return collection


def contains(answer: str, golds: list[str]) -> bool:
    from agentrt.trajectory.rewards import normalize_answer

    a = normalize_answer(answer)
    return any(normalize_answer(g) and normalize_answer(g) in a for g in golds)


async def run_family(agent, name: str, items: list, routes: list[str], args, done: dict, cache: Path) -> None:
    from agentrt.trajectory.rewards import f1_score
    from evals.verifiers import score_item

    for route in routes:
        todo = [i for i in items[: args.plan_limit if route == "plan" else len(items)] if (name, i.id, route) not in done]
        for item in todo:
            t0 = time.perf_counter()
            try:
                r = await agent.arun(item.question, budget=args.budget, route=None if route == AUTO else route)
                answer, tokens, status, chosen = r.answer, r.usage.total_tokens, r.status, r.route
            except Exception as e:  # noqa: BLE001 - a failed run is a wrong answer, recorded with its error
                answer, tokens, status, chosen = "", 0, f"failed: {type(e).__name__}: {e}", route
            scored = score_item(item, answer, chosen.partition("@")[0])
            golds = item.answers or [item.ground_truth()]
            row = {"family": name, "id": item.id, "route": route, "chosen": chosen, "type": item.type,
                   "answer": answer[:300], "f1": max((f1_score(answer, str(g)) for g in golds), default=0.0),
                   "correct": scored.correct, "abstained": scored.abstained,
                   "contains": item.type != "unanswerable" and contains(answer, golds),
                   "tokens": tokens, "status": status, "wall_s": round(time.perf_counter() - t0, 2)}
            append_jsonl(cache, row)
            done[(name, item.id, route)] = row


def report(rows: list[dict], families: list[str], routes: list[str], console: Console) -> None:
    for name in families:
        out = []
        for route in routes:
            rs = [r for r in rows if r["family"] == name and r["route"] == route]
            if not rs:
                continue
            ans = [r for r in rs if r["type"] != "unanswerable"]
            lack = [r for r in rs if r["type"] == "unanswerable"]
            out.append([route, len(rs), f"{sum(r['correct'] for r in rs) / len(rs):.2f}",
                        f"{sum(r['contains'] for r in ans)}/{len(ans)}" if ans else "-",
                        f"{sum(r['correct'] for r in ans)}/{len(ans)}" if ans else "-",
                        f"{sum(r['abstained'] for r in lack)}/{len(lack)}" if lack else "-",
                        f"{sum(r['f1'] for r in ans) / len(ans):.3f}" if ans and all("f1" in r for r in ans) else "-",
                        f"{sum(r['tokens'] for r in rs) / len(rs):.0f}", f"{sum(r['wall_s'] for r in rs) / len(rs):.1f}",
                        _chosen(rs) if route == AUTO else "-"])
        console.print(table(f"read bench: {name}", ["route", "items", "accuracy", "answerable: gold contained",
                                                    "answerable: verifier", "unanswerable: abstained",
                                                    "answerable: token F1", "tokens/item", "s/item", "actions chosen"],
                      out))


def _chosen(rows: list[dict]) -> str:
    counts: dict[str, int] = {}
    for r in rows:
        counts[r.get("chosen", "?")] = counts.get(r.get("chosen", "?"), 0) + 1
    return ", ".join(f"{a} {n}" for a, n in sorted(counts.items(), key=lambda kv: -kv[1]))


def main() -> None:
    ap = parser(__doc__)
    ap.add_argument("--families", default="squad,docs,hotpotqa-index,hotpotqa")
    ap.add_argument("--routes", default=",".join(ROUTES))
    ap.add_argument("--limit", type=int, default=20, help="items per family")
    ap.add_argument("--plan-limit", type=int, default=10, help="items per family the plan route runs on")
    ap.add_argument("--budget", type=int, default=1500)
    ap.add_argument("--pool", type=int, default=200, help="hotpotqa: questions whose paragraphs are indexed")
    ap.add_argument("--cache", default="read_bench.jsonl")
    ap.add_argument("--workdir", default=str(DEFAULT_HOME / "bench" / "read_bench"))
    ap.add_argument("--report-only", action="store_true", help="print the tables from the cache, run nothing")
    ap.add_argument("--tier", action="append", metavar="NAME=SPEC",
                    help="a model tier beside the policy; then route ROUTE@NAME runs on it (read@large) (default: the "
                         "default policy's tiers, the second embedded model when installed; none: the policy alone)")
    args = ap.parse_args()
    from agentrt.app.commands.run import tier_overrides
    from agentrt.core.config import Settings

    tiers = tier_overrides(args).get("tiers", Settings().tiers)
    families = [f for f in args.families.split(",") if f]
    routes = [r for r in args.routes.split(",") if r]
    from evals.devsets import FAMILIES, HELDOUT

    known = [*FAMILIES, *HELDOUT, "hotpotqa"]
    if unknown := [f for f in families if f not in known]:
        ap.error(f"unknown family {', '.join(unknown)}: choose from {', '.join(known)}")
    if unknown := [r for r in routes if r != AUTO and (r.partition("@")[0] not in ROUTES or (r.partition("@")[2] or "base")
                                                        not in {"base", *tiers})]:
        ap.error(f"unknown route {', '.join(unknown)}: choose from {', '.join(ROUTES)}, ROUTE@TIER with --tier TIER=SPEC, "
                 f"or {AUTO} (the router decides)")
    console, cache = Console(), Path(args.cache)
    done = {(r["family"], r["id"], r["route"]): r for r in read_jsonl(cache)}
    if not args.report_only:
        import os

        from agentrt import Agent

        reuse_converted_model()
        os.environ["AGENTRT_HOME"] = args.workdir
        for name in families:
            settings = Settings(home=args.workdir, tiers=tiers)
            settings.corpus = index_family(settings, name, args.pool)
            items = hotpot_items(args.limit) if name == "hotpotqa" else family_items(name, args.limit)
            agent = Agent(settings)
            asyncio.run(run_family(agent, name, items, routes, args, done, cache))
    report(list(done.values()), families, routes, console)


if __name__ == "__main__":
    main()
