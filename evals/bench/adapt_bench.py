"""Benchmark: how fast the router adapts to a family of questions from traffic with feedback (issue 39).

    .venv/bin/python -m evals.bench.adapt_bench --family simpleqa --n 0 25 50 --heldout 25 --out adapt-out

Per family (a built-in suite or dev set): its items are split by a stable hash into a traffic pool and a
held-out set. Both are run once each by ``agentrt learn --explore-only`` in a scratch home, logged by the
router in use there (the shipped one, its evidence fallback included) with production-like exploration
(``--epsilon``, no free abstain runs, no minimum shares): the verifier's verdict plays the user's feedback.
Resumable: the runs are trajectories under OUT/FAMILY/{traffic,heldout}.

Then, for each N: a router trained on the first N traffic runs (what ``agentrt learn --traffic`` trains on; N = 0:
the shipped router, zero-shot) decides the held-out questions as the runtime would (the learned estimate when
the chosen action has evidence, ``router_min_evidence``; else the rules), scored off-policy on the logged
held-out runs (doubly robust, 95% bootstrap interval): value, success, tokens; ECE of the deciding estimate for
the action logged, over all runs and over those whose estimate was ``calibrated``; beside the best fixed action.
"""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
import sys
from dataclasses import asdict
from pathlib import Path

from evals.bench.common import ROOT, parser, reuse_converted_model, show, table

os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")


def _split(family: str, out: Path, heldout: int) -> tuple[Path, Path]:
    """The family's items as two suite files: the traffic pool and the held-out set (a stable hash order)."""
    from evals.suites import load_suite

    items = load_suite(family).items
    order = sorted(items, key=lambda it: hashlib.blake2b(it.id.encode(), digest_size=4).digest())
    folder = out / family
    folder.mkdir(parents=True, exist_ok=True)
    paths = []
    for name, part in (("heldout", order[:heldout]), ("traffic", order[heldout:])):
        path = folder / f"{family}-{name}.jsonl"
        path.write_text("".join(json.dumps({k: v for k, v in asdict(it).items() if v not in (None, [], "", False)})
                                + "\n" for it in part))
        paths.append(path)
    return paths[1], paths[0]


def _log(suite: Path, out: Path, home: Path, args) -> Path:
    """Run (or resume) one exploration of ``suite`` under the router in use in ``home``."""
    env = reuse_converted_model({**os.environ, "AGENTRT_HOME": str(home)})
    cmd = [sys.executable, "-m", "agentrt.app.cli", "learn", str(suite), "--explore-only", "--no-free-abstain",
           "--min-runs", "0", "--epsilon", str(args.epsilon), "--temperature", "0", "--budget", str(args.budget),
           "--workers", str(args.workers), "--out", str(out), "--no-progress"]
    if args.limit:
        cmd += ["--limit", str(args.limit)]
    subprocess.run(cmd, env=env, cwd=ROOT, check=True)
    return out / "trajectories"


def main() -> None:
    ap = parser(__doc__)
    ap.add_argument("--family", nargs="+", default=["simpleqa"], help="suites left out of the shipped router's data")
    ap.add_argument("--n", nargs="+", type=int, default=[0, 25, 50], help="traffic sizes (runs with feedback)")
    ap.add_argument("--heldout", type=int, default=25, help="held-out questions per family")
    ap.add_argument("--limit", type=int, help="at most this many traffic items (default: max of --n)")
    ap.add_argument("--epsilon", type=float, default=0.3, help="exploration share while logging (default 0.3)")
    ap.add_argument("--budget", type=int, default=384, help="token budget per run (default 384)")
    ap.add_argument("--workers", type=int, default=2)
    ap.add_argument("--lambda", dest="lam", type=float, default=0.3)
    ap.add_argument("--out", default="adapt-out")
    args = ap.parse_args()
    args.limit = args.limit or max(args.n)

    from agentrt.core.config import Settings
    from agentrt.router import registry
    from agentrt.router.learned import RouterModel
    from agentrt.train.router import calibration, load_examples, train_router
    from agentrt.train.router_eval import config, deciding_estimator, evaluate, fixed_estimator

    out = Path(args.out).resolve()
    home = out / "home"  # scratch: nothing promoted, so the shipped router logs the traffic
    settings = Settings()
    shipped = RouterModel.load(registry.shipped()[0].path)
    results = []
    for family in args.family:
        traffic_suite, heldout_suite = _split(family, out, args.heldout)
        traffic = load_examples([_log(traffic_suite, out / family / "traffic", home, args)])
        args_h = argparse_copy(args, limit=None)
        held = load_examples([_log(heldout_suite, out / family / "heldout", home, args_h)])
        order = sorted({e.question for e in traffic}, key=lambda q: next(i for i, e in enumerate(traffic) if e.question == q))
        actions = tuple(sorted({e.action for e in held}))
        ran = [a for a in actions if sum(e.action == a for e in held) >= 3]
        fixed = [evaluate(f"fixed:{a}", fixed_estimator(a), fixed_estimator(a), held, config(args.lam, (a,)))
                 for a in ran]
        for n in args.n:
            rows = [e for e in traffic if e.question in set(order[:n])]
            if n and len({e.question for e in rows}) < 2:
                print(f"{family} N={n}: too few traffic questions ({len(rows)} runs)")
                continue
            model = shipped if n == 0 else train_router([], lam=args.lam, folds=min(5, n), examples=rows)
            estimate, calibrated = deciding_estimator(model, settings)
            cand = evaluate(f"N={n}", estimate, estimate, held, config(args.lam, tuple(model.actions)))
            pairs = [(estimate(e)[0].get(e.action), e.success, calibrated(e)) for e in held]
            pairs = [(p, y, c) for p, y, c in pairs if p is not None]
            both = calibration([p for p, _, _ in pairs], [y for _, y, _ in pairs])
            cal = [(p, y) for p, y, c in pairs if c]
            ece_cal = calibration([p for p, _ in cal], [y for _, y in cal])["ece"] if cal else None
            best = max(fixed, key=lambda p: (round(p.success, 3), p.value)) if fixed else None
            results.append({"family": family, "n": n, "runs": len(rows), "heldout_runs": len(held),
                            "value": round(cand.value, 4), "interval": [round(x, 4) for x in cand.interval],
                            "success": round(cand.success, 4), "tokens": round(cand.tokens, 1),
                            "ece": both["ece"], "ece_calibrated": ece_cal, "calibrated_share": round(len(cal) / max(1, len(pairs)), 3),
                            "best_fixed": None if best is None else {"action": best.name, "value": round(best.value, 4),
                                                                     "success": round(best.success, 4),
                                                                     "tokens": round(best.tokens, 1)},
                            "actions": cand.actions})
    (out / "adapt.json").write_text(json.dumps(results, indent=1))
    f = lambda x: "-" if x is None else f"{x:.3f}"  # noqa: E731
    show(table(f"adaptation from traffic with feedback (held out: {args.heldout} questions per family; "
               "value = DR estimate of score - lambda*tokens/budget [95%])",
               ["family", "N", "value [95%]", "success", "tokens", "ECE all", "ECE calibrated (share)",
                "best fixed: value, success, tokens", "actions"],
               [[r["family"], r["n"], f"{r['value']:+.3f} [{r['interval'][0]:+.3f}, {r['interval'][1]:+.3f}]",
                 f(r["success"]), f"{r['tokens']:.0f}", f(r["ece"]), f"{f(r['ece_calibrated'])} ({r['calibrated_share']:.0%})",
                 "-" if not r["best_fixed"] else f"{r['best_fixed']['action']} {r['best_fixed']['value']:+.3f}, "
                 f"{r['best_fixed']['success']:.3f}, {r['best_fixed']['tokens']:.0f}",
                 " ".join(f"{a}:{k}" for a, k in sorted(r["actions"].items()))] for r in results]), width=200)


def argparse_copy(args, **changes):
    import argparse

    return argparse.Namespace(**{**vars(args), **changes})


if __name__ == "__main__":
    main()
