"""Benchmark: the learned router from `agentrt learn`'s exploration runs, leave-one-suite-out (issue 20).

    .venv/bin/python -m evals.bench.learn_bench A/trajectories B1/trajectories B2/trajectories \
        [--lambda 0.3] [--folds 5] [--without index]

No model runs: it reads the exploration's trajectories (each run's suite is in its task key
``explore|SUITE|ITEM|SAMPLE``). For each suite S, a router is trained on the other suites' runs and scored
on S's runs (off-policy, doubly robust, as `agentrt learn` scores its held-out slice): value with a 95%
bootstrap interval, success, tokens, ECE and AUROC of p_success, abstain precision/recall; next to the
rules and every fixed action. Then the question split (30% held out) that `agentrt learn` uses: all of it, and
each suite's held-out questions alone (the router trained on 70% of every suite, as the shipped one is); then
the same with every question held out once (``--crossfit`` folds by question: each suite scored on all its
questions, ~3x the runs of the 30% split). ECE is printed with its noise floor: the mean ECE a perfectly
calibrated router would show on the same runs (``agentrt.train.router.ece_floor``).
``--without index`` zeroes the index features (has_index, index_bm25, ...) before training: what they add. "Most accurate fixed" is the
fixed action with the highest DR success rate among those run at least 5 times on the scored items (by value
alone abstain would win wherever the policy rarely succeeds: it costs no tokens).
Acceptance (issue 20): ECE <= 0.05 per suite; learned beats rules on value on every suite at <= 60% of the
best fixed action's tokens; abstain precision >= 0.8, recall >= 0.5 on the unanswerable suite.
"""

from __future__ import annotations

import os
from pathlib import Path

from evals.bench.common import parser

os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")


def load_runs(paths: list[str]) -> list:
    """The explorations' runs, one per (folder, task key): a resumed run logged twice counts once."""
    from agentrt.train.router import load_examples

    last = {}
    for i, e in enumerate(load_examples([Path(t) for t in paths])):
        last[(e.source, e.key) if e.key else f"#{i}"] = e
    return list(last.values())


def suite_of(e) -> str:
    """The suite of an exploration run (its task key is ``explore|SUITE|ITEM|SAMPLE``), else "logged"."""
    return e.key.split("|")[1] if e.key.count("|") == 3 else "logged"


def crossfit(examples, k: int, lam: float, folds: int) -> dict[int, object]:
    """For each run (by ``id``), a router trained on the questions of the other k-1 folds (a stable hash)."""
    import hashlib

    from agentrt.train.router import train_router

    fold = {e.question: int.from_bytes(hashlib.blake2b(e.question.encode(), digest_size=4).digest(), "little") % k
            for e in examples}
    out: dict[int, object] = {}
    for i in range(k):
        model = train_router([], lam=lam, folds=folds, examples=[e for e in examples if fold[e.question] != i])
        out.update({id(e): model for e in examples if fold[e.question] == i})
    return out


def main() -> None:
    ap = parser(__doc__)
    ap.add_argument("trajectories", nargs="+", help="trajectory folders of `agentrt learn` explorations")
    ap.add_argument("--without", choices=("index",), help="train without these features (zeroed)")
    ap.add_argument("--lambda", dest="lam", type=float, default=0.3)
    ap.add_argument("--folds", type=int, default=5)
    ap.add_argument("--holdout", type=float, default=0.3)
    ap.add_argument("--crossfit", type=int, default=5, help="folds of the cross-fit rows (by question)")
    args = ap.parse_args()

    from rich.console import Console
    from rich.table import Table

    from agentrt.core.config import Settings
    from agentrt.router.decision import UtilityConfig
    from agentrt.train.router import train_router
    from agentrt.train.router_eval import (config, evaluate, fixed_estimator, model_estimator, rules_estimator,
                                           split)

    from agentrt.router.features import INDEX_FEATURES, NUMERIC_FEATURES

    examples = load_runs(args.trajectories)
    if args.without == "index":
        for e in examples:
            for name in INDEX_FEATURES:
                e.x[NUMERIC_FEATURES.index(name)] = 0.0
    suites = sorted({suite_of(e) for e in examples})
    actions = tuple(sorted({e.action for e in examples}))
    settings = Settings()
    table = Table(title=f"learned router, leave-one-suite-out ({len(examples)} runs, lambda {args.lam}"
                        f"{', without ' + args.without + ' features' if args.without else ''}); "
                        "value = DR estimate of score - lambda*tokens/budget [95% bootstrap]")
    for col in ("held out", "runs", "learned value", "rules value", "most accurate fixed (value)", "success L / rules / best",
                "tokens L / best", "answering fixed: success, tokens L/it", "ECE L (floor) / rules", "AUROC L", "abstain P/R",
                "learned's actions"):
        table.add_column(col)

    def row(name, train, held, model=None, estimate=None):
        """One table row: ``held`` scored by a router trained on ``train`` (or by ``model``, or by ``estimate``:
        a per-run estimator, for the cross-fit rows where each question has its own fold's model)."""
        if estimate is None and (len({e.question for e in train}) < 2 or not held):
            print(f"{name}: too few runs to train on or to score ({len(train)} / {len(held)})")
            return
        if estimate is None:
            estimate = model_estimator(model or train_router([], lam=args.lam, folds=args.folds, examples=train))
        q = estimate
        cand = evaluate("learned", q, q, held, config(args.lam, actions))
        rules = evaluate("rules", rules_estimator(settings), q, held, UtilityConfig(lam=args.lam, actions=actions))
        # only actions run on these items at least a few times: elsewhere a fixed action's "success" would be
        # the reward model's extrapolation, not a measurement
        ran = [a for a in actions if sum(e.action == a for e in held) >= 5]
        fixed = [evaluate(f"fixed:{a}", fixed_estimator(a), q, held, config(args.lam, (a,))) for a in ran]
        best = max(fixed, key=lambda p: (round(p.success, 3), p.value))  # the most accurate fixed action
        # the most accurate one that answers (abstain costs 0 tokens: "60% of its tokens" means nothing there)
        answering = max((p for p in fixed if p.name != "fixed:abstain"), key=lambda p: (round(p.success, 3), p.value),
                        default=None)
        f = lambda x, d=3: "-" if x is None else f"{x:.{d}f}"  # noqa: E731
        table.add_row(name, str(len(held)), f"{cand.value:+.3f} [{cand.interval[0]:+.3f}, {cand.interval[1]:+.3f}]",
                      f"{rules.value:+.3f}", f"{best.name} ({best.value:+.3f})",
                      f"{cand.success:.3f} / {rules.success:.3f} / {best.success:.3f}",
                      f"{cand.tokens:.0f} / {best.tokens:.0f} ({cand.tokens / best.tokens:.0%})" if best.tokens > 0 else
                      f"{cand.tokens:.0f} / {best.tokens:.0f}",
                      "-" if answering is None else f"{answering.name[6:]} {answering.success:.3f}, "
                      f"{cand.tokens / max(1.0, answering.tokens):.0%}",
                      f"{f(cand.ece)} ({f(cand.ece_floor)}) / {f(rules.ece)}", f(cand.auroc),
                      f"{f(cand.abstain_precision, 2)} / {f(cand.abstain_recall, 2)}",
                      " ".join(f"{a}:{n}" for a, n in sorted(cand.actions.items())))

    loso = {}  # suite -> the router trained on the other suites
    for s in suites:
        train = [e for e in examples if suite_of(e) != s]
        if len({e.question for e in train}) >= 2:
            loso[s] = train_router([], lam=args.lam, folds=args.folds, examples=train)
        row(s, train, [e for e in examples if suite_of(e) == s], loso.get(s))
    train, held = split(examples, args.holdout, 0)
    model = train_router([], lam=args.lam, folds=args.folds, examples=train)
    row(f"questions ({args.holdout:.0%})", train, held, model)
    for s in suites:
        row(f"  {s} (split)", train, [e for e in held if suite_of(e) == s], model)
    # every question held out once: k routers, each trained (as the shipped one is) on the other folds'
    # questions of every suite; each suite is then scored on all its questions, not on its 30% alone
    fold_model = crossfit(examples, args.crossfit, args.lam, args.folds)
    cross = lambda e: fold_model[id(e)].predict(e.x)  # noqa: E731
    row(f"questions ({args.crossfit}-fold cross-fit)", [], examples, estimate=cross)
    for s in suites:
        row(f"  {s} (cross-fit)", [], [e for e in examples if suite_of(e) == s], estimate=cross)
    console = Console(width=280)
    console.print(table)
    # calibration in the large per suite and action: mean p_success against the success rate, with the suite
    # left out and with it cross-fit. A gap far above the noise floor is bias (the features cannot tell this
    # suite's questions from others' that fare differently), not sampling noise
    large = Table(title="mean p_success / success rate (runs) per suite and action: leave-one-suite-out | cross-fit")
    large.add_column("suite")
    for a in actions:
        large.add_column(a)
    for s in suites:
        cells = []
        for a in actions:
            rows = [e for e in examples if suite_of(e) == s and e.action == a]
            if not rows:
                cells.append("-")
                continue
            rate = sum(e.success for e in rows) / len(rows)
            held_out = "-" if s not in loso else f"{sum(loso[s].predict(e.x)[0][a] for e in rows) / len(rows):.2f}"
            cells.append(f"{held_out} | {sum(cross(e)[0][a] for e in rows) / len(rows):.2f} / {rate:.2f} ({len(rows)})")
        large.add_row(s, *cells)
    console.print(large)


if __name__ == "__main__":
    main()
