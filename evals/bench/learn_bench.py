"""Benchmark: the learned router from `agentrt learn`'s exploration runs, leave-one-suite-out (issue 20).

    .venv/bin/python evals/bench/learn_bench.py /tmp/learn-run/out/trajectories [--lambda 0.3] [--folds 5]

No model runs: it reads the exploration's trajectories (each run's suite is in its task key
``explore|SUITE|ITEM|SAMPLE``). For each suite S, a router is trained on the other suites' runs and scored
on S's runs (off-policy, doubly robust, as `agentrt learn` scores its held-out slice): value with a 95%
bootstrap interval, success, tokens, ECE and AUROC of p_success, abstain precision/recall; next to the
rules and every fixed action. A last row scores the question-split (30% held out) that `agentrt learn` uses. "Most accurate fixed" is the
fixed action with the highest DR success rate (by value alone abstain would win wherever the policy rarely
succeeds: it costs no tokens).
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
    ap.add_argument("trajectories", help="the trajectory folder of an `agentrt learn` exploration")
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

    examples = load_examples([Path(args.trajectories)])
    last = {}
    for i, e in enumerate(examples):
        last[e.key or f"#{i}"] = e
    examples = list(last.values())
    suite_of = lambda e: e.key.split("|")[1] if e.key.count("|") == 3 else "logged"  # noqa: E731
    suites = sorted({suite_of(e) for e in examples})
    actions = tuple(sorted({e.action for e in examples}))
    settings = Settings()
    table = Table(title=f"learned router, leave-one-suite-out ({len(examples)} runs, lambda {args.lam}); "
                        "value = DR estimate of score - lambda*tokens/budget [95% bootstrap]")
    for col in ("held out", "runs", "learned value", "rules value", "most accurate fixed (value)", "success L / rules / best",
                "tokens L / best", "ECE L / rules", "AUROC L", "abstain P/R", "learned's actions"):
        table.add_column(col)

    def row(name, train, held):
        if len({e.question for e in train}) < 2 or not held:
            print(f"{name}: too few runs to train on or to score ({len(train)} / {len(held)})")
            return
        model = train_router([], lam=args.lam, folds=args.folds, examples=train)
        q = model_estimator(model)
        cand = evaluate("learned", q, q, held, config(args.lam, actions))
        rules = evaluate("rules", rules_estimator(settings), q, held, UtilityConfig(lam=args.lam, actions=actions))
        fixed = [evaluate(f"fixed:{a}", fixed_estimator(a), q, held, config(args.lam, (a,))) for a in actions]
        best = max(fixed, key=lambda p: (round(p.success, 3), p.value))  # the most accurate fixed action
        f = lambda x, d=3: "-" if x is None else f"{x:.{d}f}"  # noqa: E731
        table.add_row(name, str(len(held)), f"{cand.value:+.3f} [{cand.interval[0]:+.3f}, {cand.interval[1]:+.3f}]",
                      f"{rules.value:+.3f}", f"{best.name} ({best.value:+.3f})",
                      f"{cand.success:.3f} / {rules.success:.3f} / {best.success:.3f}",
                      f"{cand.tokens:.0f} / {best.tokens:.0f} ({cand.tokens / best.tokens:.0%})" if best.tokens > 0 else
                      f"{cand.tokens:.0f} / {best.tokens:.0f}",
                      f"{f(cand.ece)} / {f(rules.ece)}", f(cand.auroc),
                      f"{f(cand.abstain_precision, 2)} / {f(cand.abstain_recall, 2)}",
                      " ".join(f"{a}:{n}" for a, n in sorted(cand.actions.items())))

    for s in suites:
        row(s, [e for e in examples if suite_of(e) != s], [e for e in examples if suite_of(e) == s])
    train, held = split(examples, args.holdout, 0)
    row(f"questions ({args.holdout:.0%})", train, held)
    Console(width=220).print(table)


if __name__ == "__main__":
    main()
