"""``agentrt learn --traffic``: one step of the traffic loop (agentrt.train.traffic), printed."""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path


def cmd_traffic(args: argparse.Namespace) -> int:
    from agentrt.core.config import load_settings
    from agentrt.core.errors import InputError
    from agentrt.router import registry
    from agentrt.train.traffic import MAX_LOOKS, learn_traffic

    if not args.traffic:
        raise InputError("name the suites to learn from, or pass --traffic to learn from this home's runs with feedback")
    if args.suites:
        raise InputError("--traffic learns from this home's own runs: leave the suites out (or drop --traffic)")
    settings = load_settings(args.config, policy=args.policy)
    fingerprint = registry.settings_fingerprint(settings)
    report = learn_traffic(settings, fingerprint, lam=args.lam, holdout=args.holdout, folds=args.folds,
                           seed=args.seed, rounds=args.bootstrap, promote=not args.no_promote, gate=args.gate)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    (out / "traffic-report.json").write_text(json.dumps(report.to_dict(), indent=1))
    for line in report.warnings:
        print(f"agentrt: warning: {line}", file=sys.stderr)
    if report.step == "refused":
        what = f"refused {report.version}" if report.version else "refused to train a candidate"
        print(f"{what}: " + "; ".join(report.refused))
        return 1
    if report.step == "trained":
        c, i = report.candidate, report.incumbent
        judged = "cross-fitted" if args.gate == "crossfit" else "held out"
        print(f"trained {report.version} on {report.runs} runs with feedback ({judged}: {c.value:+.4f} "
              f"[{c.interval[0]:+.4f}, {c.interval[1]:+.4f}] vs {i.name} {i.value:+.4f})")
        print(f"observing {report.version}: it decides every request in shadow (no tokens); give feedback, then run "
              "`agentrt learn --traffic` again to judge it")
    elif report.step == "observing":
        print(f"still observing {report.version}: {report.observed} runs with feedback decided in shadow so far")
    else:
        c, i, v = report.candidate, report.incumbent, report.verdict
        print(f"{report.version} in shadow on {report.observed} runs with feedback (look {report.look} of "
              f"{MAX_LOOKS}): DR value {c.value:+.4f} [{c.interval[0]:+.4f}, {c.interval[1]:+.4f}] vs {i.name} "
              f"{i.value:+.4f} [{i.interval[0]:+.4f}, {i.interval[1]:+.4f}]; " + "; ".join(v.lines()))
        if report.step == "undecided":
            print(f"undecided: {report.version} stays under observation (not better by the interval, not clearly "
                  f"worse); keep serving and giving feedback until {2 * report.questions} questions have been decided in "
                  "shadow, then run `agentrt learn --traffic` again (the next look judges at a stricter level, so looking "
                  "again cannot promote a no-better router more often)")
        elif report.promoted:
            print(f"promoted {report.version}: it is now the default router for this policy "
                  "(undo: agentrt router rollback)")
        else:
            print(f"refused {report.version}: " + ("; ".join(v.reasons) or "--no-promote was given"))
    return 0
