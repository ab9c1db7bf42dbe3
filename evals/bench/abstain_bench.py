"""Benchmark: does the router abstain when the private index lacks the answer — on questions it never saw?

    .venv/bin/python -m evals.bench.abstain_bench [-n 400] [--start 5000] [--budget 2048] [--router learned:FILE]
        [--store DIR]

A fresh test set, built the way ``evals/devsets.py`` builds ``hotpotqa-index-dev`` but from HotpotQA questions
far from every question the routers were explored or trained on (``--start``; the dev set uses 1,000-1,200):
``-n`` questions, alternately answerable (their paragraphs indexed) and not (their supporting paragraphs left
out of the whole index). Its paragraphs are indexed into a temporary memory store (MiniLM + BM25, as
``agentrt index`` does; about a minute for 400 questions), then every router decides each question with the
index features a run computes (``routes.index.corpus_signals``). No model runs: whether a router abstains is
decided before any model call, so precision and recall of abstention are measured exactly, on many more
questions than the explorations could afford. Intervals: 95% bootstrap over questions.
Acceptance (issue 20): abstain precision >= 0.8 and recall >= 0.5 on the unanswerable-from-index set.
"""

from __future__ import annotations

import asyncio
import json
import os
import random
import tempfile
import time
from pathlib import Path

from evals.bench.common import parser

os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")


def precision_recall(abstained: list[bool], unanswerable: list[bool]) -> tuple[float | None, float | None]:
    said = sum(abstained)
    hits = sum(a and u for a, u in zip(abstained, unanswerable))
    lacking = sum(unanswerable)
    return (hits / said if said else None), (hits / lacking if lacking else None)


def interval(abstained: list[bool], unanswerable: list[bool], which: int, rounds: int = 1000,
             seed: int = 0) -> tuple[float, float]:
    """95% bootstrap interval over questions of precision (which=0) or recall (which=1)."""
    rng = random.Random(seed)
    n = len(abstained)
    values = []
    for _ in range(rounds):
        idx = [rng.randrange(n) for _ in range(n)]
        v = precision_recall([abstained[i] for i in idx], [unanswerable[i] for i in idx])[which]
        if v is not None:
            values.append(v)
    values.sort()
    if not values:
        return (float("nan"), float("nan"))
    return values[int(0.025 * len(values))], values[min(len(values) - 1, int(0.975 * len(values)))]


def main() -> None:
    ap = parser(__doc__)
    ap.add_argument("-n", type=int, default=400, help="questions (half of them the index lacks)")
    ap.add_argument("--start", type=int, default=5000, help="first HotpotQA dev question to draw from")
    ap.add_argument("--budget", type=int, default=2048)
    ap.add_argument("--router", action="append", default=[], help="more router specs to compare (repeatable)")
    ap.add_argument("--store", help="memory store folder for the test index, kept and reused by a rerun with the same "
                                    "-n/--start (default: a temporary folder, removed)")
    args = ap.parse_args()

    from rich.console import Console
    from rich.table import Table

    from agentrt.app.corpus import index_path
    from agentrt.core.config import Settings
    from agentrt.routes.index import corpus_signals
    from agentrt.router import make_router
    from agentrt.router.features import extract
    from evals.devsets import build_index_dev
    from evals.multiturn import _source

    source = json.loads(_source().read_text(encoding="utf-8"))
    items, passages = build_index_dev(source, n=args.n, start=args.start)
    unanswerable = [i["type"] == "unanswerable" for i in items]
    with tempfile.TemporaryDirectory(prefix="abstain-bench-") as tmp:
        store = Path(args.store).expanduser() if args.store else Path(tmp) / "memory"
        store.mkdir(parents=True, exist_ok=True)
        corpus_file = store / f"abstain-test-{args.start}-{args.n}.jsonl"
        corpus_file.write_text("".join(json.dumps(p, ensure_ascii=False) + "\n" for p in passages), encoding="utf-8")
        # the routers come from the user's home (its registry, else the shipped file); the test index has its own store
        name = f"abstain-test-{args.start}-{args.n}"
        settings = Settings(memory_store=str(store), corpus=name)
        t0 = time.perf_counter()
        index_path(settings, corpus_file, name=name)
        index_s = time.perf_counter() - t0
        signals = corpus_signals(settings)
        t0 = time.perf_counter()
        features = [extract(i["question"], index=signals) for i in items]
        feature_ms = 1000 * (time.perf_counter() - t0) / len(items)

        table = Table(title=f"abstention on {len(items)} unseen HotpotQA questions (HotpotQA dev from #{args.start}; "
                            f"{sum(unanswerable)} the index lacks; {len(passages)} passages; budget {args.budget})")
        for col in ("router", "abstain P [95%]", "abstain R [95%]", "abstained", "on answerable", "actions"):
            table.add_column(col)
        for spec in ["auto", "rules", *args.router]:
            router = make_router(spec, settings)
            decisions = [asyncio.run(router.decide(i["question"], f, args.budget)) for i, f in zip(items, features)]
            abstained = [d.action == "abstain" for d in decisions]
            p, r = precision_recall(abstained, unanswerable)
            (plo, phi), (rlo, rhi) = interval(abstained, unanswerable, 0), interval(abstained, unanswerable, 1)
            mix: dict[str, int] = {}
            for d in decisions:
                mix[d.action] = mix.get(d.action, 0) + 1
            label = spec if spec != "auto" else f"auto ({getattr(router, 'version', '') or 'rules'})"
            fmt = lambda v, lo, hi: "-" if v is None else f"{v:.2f} [{lo:.2f}, {hi:.2f}]"  # noqa: E731
            table.add_row(label, fmt(p, plo, phi), fmt(r, rlo, rhi), str(sum(abstained)),
                          str(sum(a and not u for a, u in zip(abstained, unanswerable))),
                          " ".join(f"{a}:{n}" for a, n in sorted(mix.items())))
        Console(width=200).print(table)
        print(f"indexing {len(passages)} passages: {index_s:.0f} s; index features: {feature_ms:.1f} ms a question")


if __name__ == "__main__":
    main()
