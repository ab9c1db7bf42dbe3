"""Benchmark: the learned router from `agentrt learn`'s exploration runs, leave-one-suite-out (issue 20).

    .venv/bin/python evals/bench/learn_bench.py A/trajectories B1/trajectories B2/trajectories \
        [--lambda 0.3] [--folds 5] [--without index]

No model runs: it reads the exploration's trajectories (each run's suite is in its task key
``explore|SUITE|ITEM|SAMPLE``). For each suite S, a router is trained on the other suites' runs and scored
on S's runs (off-policy, doubly robust, as `agentrt learn` scores its held-out slice): value with a 95%
bootstrap interval, success, tokens, ECE and AUROC of p_success, abstain precision/recall; next to the
rules and every fixed action. Then the question split (30% held out) that `agentrt learn` uses: all of it, and
each suite's held-out questions alone (the router trained on 70% of every suite, as the shipped one is).
``--without index`` zeroes the index features (has_index, index_bm25, ...) before training: what they add. "Most accurate fixed" is the
fixed action with the highest DR success rate among those run at least 5 times on the scored items (by value
alone abstain would win wherever the policy rarely succeeds: it costs no tokens).
Acceptance (issue 20): ECE <= 0.05 per suite; learned beats rules on value on every suite at <= 60% of the
best fixed action's tokens; abstain precision >= 0.8, recall >= 0.5 on the unanswerable suite.
"""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("trajectories", nargs="+", help="trajectory folders of `agentrt learn` explorations")
    ap.add_argument("--without", choices=("index",), help="train without these features (zeroed)")
    ap.add_argument("--lambda", dest="lam", type=float, default=0.3)
    ap.add_argument("--folds", type=int, default=5)
    ap.add_argument("--holdout", type=float, default=0.3)
    args = ap.parse_args()

    from rich.console import Console
    from rich.table import Table

    from agentrt.core.config import Settings
    from agentrt.routing.decision import UtilityConfig
    from agentrt.train.router import load_examples, train_router
    from agentrt.train.router_eval import (config, evaluate, fixed_estimator, model_estimator, rules_estimator,
                                           split)

    from agentrt.routing.features import INDEX_FEATURES, NUMERIC_FEATURES

    examples = load_examples([Path(t) for t in args.trajectories])
    last = {}
    for i, e in enumerate(examples):
        last[(e.source, e.key) if e.key else f"#{i}"] = e
    examples = list(last.values())
    if args.without == "index":
        for e in examples:
            for name in INDEX_FEATURES:
                e.x[NUMERIC_FEATURES.index(name)] = 0.0
    suite_of = lambda e: e.key.split("|")[1] if e.key.count("|") == 3 else "logged"  # noqa: E731
    suites = sorted({suite_of(e) for e in examples})
    actions = tuple(sorted({e.action for e in examples}))
    settings = Settings()
    table = Table(title=f"learned router, leave-one-suite-out ({len(examples)} runs, lambda {args.lam}"
                        f"{', without ' + args.without + ' features' if args.without else ''}); "
                        "value = DR estimate of score - lambda*tokens/budget [95% bootstrap]")
    for col in ("held out", "runs", "learned value", "rules value", "most accurate fixed (value)", "success L / rules / best",
                "tokens L / best", "answering fixed: success, tokens L/it", "ECE L / rules", "AUROC L", "abstain P/R",
                "learned's actions"):
        table.add_column(col)

    def row(name, train, held, model=None):
        if len({e.question for e in train}) < 2 or not held:
            print(f"{name}: too few runs to train on or to score ({len(train)} / {len(held)})")
            return
        model = model or train_router([], lam=args.lam, folds=args.folds, examples=train)
        q = model_estimator(model)
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
                      f"{f(cand.ece)} / {f(rules.ece)}", f(cand.auroc),
                      f"{f(cand.abstain_precision, 2)} / {f(cand.abstain_recall, 2)}",
                      " ".join(f"{a}:{n}" for a, n in sorted(cand.actions.items())))

    for s in suites:
        row(s, [e for e in examples if suite_of(e) != s], [e for e in examples if suite_of(e) == s])
    train, held = split(examples, args.holdout, 0)
    model = train_router([], lam=args.lam, folds=args.folds, examples=train)
    row(f"questions ({args.holdout:.0%})", train, held, model)
    for s in suites:
        row(f"  {s} (split)", train, [e for e in held if suite_of(e) == s], model)
    Console(width=280).print(table)


if __name__ == "__main__":
    main()
