"""Benchmark: the router on a document family it never saw, then after `agentrt learn` on part of it (issues 38, 39).

    .venv/bin/python -m evals.bench.family_bench X/H/trajectories X/S/trajectories X/D/trajectories \
        X/A/trajectories X/B2/trajectories [--train 100] [--n 25 50 100] [--out family.json]

No model runs: it reads explorations' trajectories (each run's suite is in its task key). For each document
family (``evals.devsets.FAMILIES``) found there:

1. **Zero-shot**: a router trained as `agentrt learn` trains one (kernel evidence sample included) on every run
   neither of the family nor over its corpus (``left_in``: a user's own documents have no runs at all; with
   ``--keep-corpus-runs`` other suites' runs over the family's corpus stay in, the definition before) decides
   the family's runs as the runtime does (its estimate where the action it would take has evidence, else the
   fallback: ``router_eval.deciding_estimator``), scored off-policy (doubly robust, 95%
   bootstrap by question): value, success, tokens; ECE over all decisions and over those marked ``calibrated``
   (each with its noise floor; a run counts as calibrated when the estimate it is scored against has evidence,
   the state a decision for its action would carry: for abstain, runs over the same corpus), and over the abstain
   estimates apart from the answering actions'; beside every
   fixed action, abstain included. Where one answering action beats
   the others by >= 10 points of success, the share of the questions it wins that the router sends to it.
2. **Adaptation**: the family's questions in a stable hash order: the first ``--train`` (<= 100) are what a user
   runs `agentrt learn` on, the rest are held out. For each N in ``--n``: ``learn_round`` (what `agentrt learn`
   calls after exploring; its gate judges the candidate against the zero-shot router, the incumbent)
   on the runs of the first N questions (``--gate``: cross-fitted over them, or a 30% slice of them held out);
   the router in use afterwards (promoted or not) is scored on the held-out questions, and so is the candidate
   (what the gate kept out, when it was not promoted). A candidate trained on the
   same runs with their rewards shuffled is judged by the same gate (on the true rewards): it must be refused.
   ``--learn-from FOLDER``: the runs learned on come from FOLDER instead (`agentrt learn --every-action` on the
   first ``--train`` questions, written as a suite by ``--pool-suite FILE``); the held-out questions and the
   zero-shot router are unchanged.

Acceptance (issue 38): zero-shot value >= best fixed - 0.02 per family; after learning on <= 100 items, promoted,
held-out ECE <= 0.10 and value >= best fixed - 0.02, the shuffled candidate refused. Issue 39: zero-shot ECE <= 0.15
over all decisions and <= 0.08 over the calibrated ones.
"""

from __future__ import annotations

import hashlib
import json
import os
import random
import tempfile
from dataclasses import asdict, replace
from pathlib import Path

from evals.bench.common import parser, show, table
from evals.bench.learn_bench import load_runs, suite_of

os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")
ANSWERING = ("direct", "reason", "plan", "read")


def _order(questions: set[str]) -> list[str]:
    return sorted(questions, key=lambda q: hashlib.blake2b(q.encode(), digest_size=4).digest())


def _ece(pairs: list[tuple[float, float]]) -> tuple[float | None, float | None]:
    from agentrt.train.router import calibration, ece_floor

    if not pairs:
        return None, None
    ps = [p for p, _ in pairs]
    return calibration(ps, [y for _, y in pairs])["ece"], ece_floor(ps)


def score(name, model, runs, actions, settings, lam):
    """A router as the runtime runs it, on ``runs``: its PolicyEval, the ECE rows, its choice per run and the
    (estimate, outcome) pairs the ECE is over (to pool them across folds)."""
    from agentrt.train.router_eval import config, deciding_estimator, evaluate, greedy, model_estimator

    from agentrt.router.evidence import MIN_EVIDENCE

    estimate, calibrated = deciding_estimator(model, settings)
    minimum = float(getattr(settings, "router_min_evidence", MIN_EVIDENCE))
    cfg = config(lam, actions)
    result = evaluate(name, estimate, model_estimator(model), runs, cfg)

    def evidenced(e) -> bool:
        # the state of the estimate this run is scored against: a decision for that action would be marked
        # calibrated (its own evidence, over the run's corpus for a corpus-bound action) or not
        return model.effective_sizes(e.x, e.corpus)[0].get(e.action, 0.0) >= minimum

    pairs = [(estimate(e)[0].get(e.action), e.success, evidenced(e), e.action == "abstain") for e in runs]
    pairs = [(p, y, c, a) for p, y, c, a in pairs if p is not None]
    picks = {id(e): greedy(name, estimate, e, cfg)[0] for e in runs}
    # the abstain estimate (is this question unanswerable here?) apart from the others (does this action answer
    # it?): a family's share of unanswerable questions is a property of its corpus, which no feature carries
    return {"eval": result, "ece": _ece([(p, y) for p, y, *_ in pairs]),
            "ece_calibrated": _ece([(p, y) for p, y, c, _ in pairs if c]),
            "ece_abstain": _ece([(p, y) for p, y, _, a in pairs if a]),
            "ece_answering": _ece([(p, y) for p, y, _, a in pairs if not a]),
            "calibrated_share": sum(c for _, _, c, _ in pairs) / max(1, len(pairs)),
            "decided_calibrated": sum(calibrated(e) for e in runs) / max(1, len(runs)), "picks": picks,
            "pairs": [(p, y) for p, y, *_ in pairs]}


def left_in(examples, family: str, keep_corpus_runs: bool = False):
    """The runs a router that never saw ``family`` is trained on: every run of another suite and over another
    corpus. A family is its documents as much as its questions: the runs of other suites asked over the family's
    corpus (B2: easy, arithmetic, unanswerable ... with hotpotqa-index's corpus attached) are evidence about those
    documents that a user's new corpus never has (the abstain estimate is corpus-bound), so they leave with it.
    ``keep_corpus_runs``: only the family's own suite leaves (the definition before 2026-12-04, late)."""
    from agentrt.router.evidence import UNKNOWN_CORPUS

    corpora = set() if keep_corpus_runs else {e.corpus for e in examples if suite_of(e) == family} - {"", UNKNOWN_CORPUS}
    return [e for e in examples if suite_of(e) != family and e.corpus not in corpora]


def fixed_rows(runs, actions, q, lam):
    from agentrt.train.router_eval import config, evaluate, fixed_estimator

    ran = [a for a in actions if sum(e.action == a for e in runs) >= 3]
    return {a: evaluate(f"fixed:{a}", fixed_estimator(a), q, runs, config(lam, (a,))) for a in ran}


def wins(runs, fixed, picks) -> dict | None:
    """Where one answering action's success beats every other answering action's by >= 0.10: the share of the
    questions it wins (a logged run of it succeeded) that the router sends to it."""
    answering = sorted((p for a, p in fixed.items() if a in ANSWERING), key=lambda p: -p.success)
    if len(answering) < 2 or answering[0].success - answering[1].success < 0.10:
        return None
    best = answering[0].name.split(":", 1)[1]
    won = [e for e in runs if e.action == best and e.success >= 0.5]
    if not won:
        return None
    return {"action": best, "margin": round(answering[0].success - answering[1].success, 3), "questions": len(won),
            "picked": round(sum(picks[id(e)] == best for e in won) / len(won), 3)}


def shuffled(rows, seed: int = 0):
    """The same runs with their (success, reward) pairs permuted: a candidate that learns nothing true."""
    outcomes = [(e.success, e.reward) for e in rows]
    random.Random(seed).shuffle(outcomes)
    return [replace(e, success=s, reward=r) for e, (s, r) in zip(rows, outcomes)]


def shuffled_verdict(rows, incumbent, settings, lam: float, gate: str = "crossfit"):
    """The gate's verdict on a deliberately worse candidate: fit (as `agentrt learn` fits one, the incumbent's
    base rates as its prior) on ``rows`` with their rewards shuffled, judged on their true rewards."""
    from agentrt.train.learn import judge
    from agentrt.train.router import train_router
    from agentrt.train.router_eval import deciding_estimator

    def fit(train):
        return train_router([], lam=lam, examples=shuffled(train), prior=incumbent.base_rates)

    return judge(rows, fit, deciding_estimator(incumbent, settings)[0], settings, gate=gate, lam=lam,
                 name="shuffled").verdict


def pool_of(fam, train: int) -> list[str]:
    """The questions a user learns on: the first ``train`` of the family in a stable hash order (at most 65%)."""
    order = _order({e.question for e in fam})
    return order[:min(train, int(0.65 * len(order)))]


def adapt(family, fam, zero, settings, fingerprint, args, actions, learn_runs=None):
    """learn_round on the first N questions of the family (their runs in ``learn_runs`` when given, else the
    family's explored ones), the router in use after it scored on the rest."""
    from agentrt.router import registry
    from agentrt.router.learned import RouterModel
    from agentrt.train.learn import Incumbent, learn_round

    pool = pool_of(fam, args.train)
    held = [e for e in fam if e.question not in set(pool)]
    out = []
    for n in args.n:
        if n <= 0 or n > len(pool):  # N = 0 is the zero-shot row, always printed
            continue
        chosen = set(pool[:n])
        rows = [e for e in (fam if learn_runs is None else learn_runs) if e.question in chosen]
        if len({e.question for e in rows}) < n:
            print(f"{family} N={n}: only {len({e.question for e in rows})} of its questions have runs to learn from")
            continue
        with tempfile.TemporaryDirectory() as home:
            s = settings.model_copy(update={"home": home})
            entry = registry.add(Path(home), zero)
            registry.promote(Path(home), entry.version)
            report = learn_round(rows, Incumbent(entry), s, fingerprint, suites=[family], lam=args.lam, gate=args.gate)
            candidate = RouterModel.load(registry.find(Path(home), report.version).path)  # registered either way
        in_use = candidate if report.promoted else zero
        after = score(f"N={n}", in_use, held, actions, settings, args.lam)
        own = after if report.promoted else score(f"candidate N={n}", candidate, held, actions, settings, args.lam)
        # the deliberately worse candidate: fit with its rewards shuffled, judged on the true rewards by the same gate
        verdict = shuffled_verdict(rows, zero, settings, args.lam, args.gate)
        out.append({"n": n, "runs": len(rows), "promoted": report.promoted, "verdict": report.verdict.lines()
                    + report.verdict.reasons, "after": after, "candidate": own, "shuffled_refused": not verdict.promote,
                    "shuffled_reasons": verdict.reasons})
    return held, out


def _write_pool(examples, family: str, train: int, path: Path) -> None:
    """The family's learning pool as a suite file (its items, the corpus an absolute path)."""
    from evals.multiturn import suite_corpus
    from evals.suites import load_suite

    pool = set(pool_of([e for e in examples if suite_of(e) == family], train))
    items = load_suite(family).items
    corpus = suite_corpus(items)
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("w") as f:
        for it in items:
            if it.question in pool:
                row = {k: v for k, v in asdict(it).items() if v not in (None, [], "", False)}
                if corpus:  # resolved: the suite file is written elsewhere
                    row["corpus"] = corpus
                f.write(json.dumps(row) + "\n")
    print(f"wrote {len(pool)} questions of {family} to {path}")


def main() -> None:
    ap = parser(__doc__)
    ap.add_argument("trajectories", nargs="+", help="trajectory folders of `agentrt learn --explore-only` runs")
    ap.add_argument("--families", nargs="+", help="families to leave out (default: every one found)")
    ap.add_argument("--train", type=int, default=100, help="questions a user learns on (at most 100)")
    ap.add_argument("--n", nargs="+", type=int, default=[25, 50, 100], help="learn on the first N of them")
    ap.add_argument("--lambda", dest="lam", type=float, default=0.3)
    ap.add_argument("--gate", choices=("crossfit", "holdout"), default="crossfit", help="learn_round's gate")
    ap.add_argument("--keep-corpus-runs", action="store_true", help="leave out the family's own suite only, keeping "
                    "other suites' runs over its corpus in training (the definition before 2026-12-04, late)")
    ap.add_argument("--evidence", choices=("numeric", "all"), help="the evidence kernel's inputs (default: the "
                    "trainer's): the numeric features only, or the hashed words too")
    ap.add_argument("--abstain-floor", type=float, help="the learned router's abstain floor (default: the "
                    "runtime's, agentrt.router.learned.DEFAULT_FLOORS): what it costs and gains where the policy "
                    "rarely answers right")
    ap.add_argument("--learn-from", nargs="+", help="trajectory folders the adaptation learns from (e.g. `agentrt "
                    "learn POOL --every-action --explore-only`) instead of the family's explored runs")
    ap.add_argument("--pool-suite", help="write the family's first --train questions (the --families one) as a "
                    "suite FILE.jsonl, for `agentrt learn FILE --every-action`, and stop")
    ap.add_argument("--out", default="family.json")
    args = ap.parse_args()
    if args.abstain_floor is not None:
        from agentrt.router.learned import DEFAULT_FLOORS

        DEFAULT_FLOORS["abstain"] = args.abstain_floor
    if args.evidence:
        from agentrt.router.features import NUMERIC_FEATURES
        from agentrt.train import router as trainer

        trainer.EVIDENCE_DIMS = len(NUMERIC_FEATURES) if args.evidence == "numeric" else None

    from agentrt.core.config import Settings
    from agentrt.router import registry
    from agentrt.train.router import train_router
    from agentrt.train.router_eval import model_estimator
    from evals.devsets import FAMILIES

    examples = load_runs(args.trajectories)
    found = sorted({suite_of(e) for e in examples})
    families = args.families or [f for f in FAMILIES if f in found]
    if args.pool_suite:
        _write_pool(examples, families[0], args.train, Path(args.pool_suite))
        return
    learn_runs = load_runs(args.learn_from) if args.learn_from else None
    actions = tuple(sorted({e.action for e in examples}))
    settings = Settings()
    fingerprint = registry.settings_fingerprint(settings)
    zero_rows, adapt_rows, record = [], [], []
    f3 = lambda x: "-" if x is None else f"{x:.3f}"  # noqa: E731
    for family in families:
        fam = [e for e in examples if suite_of(e) == family]
        zero = train_router([], lam=args.lam, examples=left_in(examples, family, args.keep_corpus_runs))
        zero.provenance = {"policy": fingerprint.to_dict(), "suites": [s for s in found if s != family]}
        z = score("zero-shot", zero, fam, actions, settings, args.lam)
        fixed = fixed_rows(fam, actions, model_estimator(zero), args.lam)
        best = max(fixed.values(), key=lambda p: p.value)
        w = wins(fam, fixed, z["picks"])
        ev = z["eval"]
        zero_rows.append([family, f"{len(fam)} / {len({e.question for e in fam})}",
                          f"{ev.value:+.3f} [{ev.interval[0]:+.3f}, {ev.interval[1]:+.3f}]",
                          f"{best.name[6:]} {best.value:+.3f}", "yes" if ev.value >= best.value - 0.02 else "NO",
                          f"{ev.success:.3f} / {ev.tokens:.0f}",
                          f"{f3(z['ece'][0])} ({f3(z['ece'][1])})",
                          f"{f3(z['ece_calibrated'][0])} ({f3(z['ece_calibrated'][1])}) {z['calibrated_share']:.0%}",
                          f"{f3(z['ece_abstain'][0])} / {f3(z['ece_answering'][0])}",
                          "-" if w is None else f"{w['action']} +{w['margin']:.2f}: {w['picked']:.0%} of {w['questions']}",
                          " ".join(f"{a}:{k}" for a, k in sorted(ev.actions.items())),
                          " ".join(f"{a} {p.value:+.2f}/{p.success:.2f}/{p.tokens:.0f}" for a, p in sorted(fixed.items()))])
        held, rounds = adapt(family, fam, zero, settings, fingerprint, args, actions, learn_runs)
        hfixed = fixed_rows(held, actions, model_estimator(zero), args.lam)
        hbest = max(hfixed.values(), key=lambda p: p.value) if hfixed else None
        base = score("zero-shot", zero, held, actions, settings, args.lam)
        for r in [{"n": 0, "runs": 0, "promoted": None, "after": base, "shuffled_refused": None}] + rounds:
            a = r["after"]
            adapt_rows.append([family, r["n"], len({e.question for e in held}),
                               "-" if r["promoted"] is None else ("promoted" if r["promoted"] else "kept"),
                               f"{a['eval'].value:+.3f} [{a['eval'].interval[0]:+.3f}, {a['eval'].interval[1]:+.3f}]",
                               "-" if hbest is None else f"{hbest.name[6:]} {hbest.value:+.3f}",
                               f"{f3(a['ece'][0])} ({f3(a['ece'][1])})",
                               f"{f3(a['ece_calibrated'][0])} {a['calibrated_share']:.0%}",
                               f"{f3(a['ece_abstain'][0])} / {f3(a['ece_answering'][0])}",
                               f"{a['eval'].tokens:.0f}",
                               "-" if r.get("candidate") is None else f"{r['candidate']['eval'].value:+.3f}, "
                               f"{f3(r['candidate']['ece'][0])}",
                               "-" if r["shuffled_refused"] is None else ("refused" if r["shuffled_refused"] else "PROMOTED"),
                               " ".join(f"{k}:{v}" for k, v in sorted(a["eval"].actions.items()))])
            record.append({"family": family, "n": r["n"], "promoted": r["promoted"], "value": a["eval"].value,
                           "interval": a["eval"].interval, "ece": a["ece"], "ece_calibrated": a["ece_calibrated"],
                           "ece_abstain": a["ece_abstain"], "ece_answering": a["ece_answering"],
                           "calibrated_share": a["calibrated_share"], "tokens": a["eval"].tokens,
                           "best_fixed": None if hbest is None else [hbest.name, hbest.value],
                           "shuffled_refused": r["shuffled_refused"], "verdict": r.get("verdict"),
                           "candidate": None if r.get("candidate") is None else {
                               "value": r["candidate"]["eval"].value, "interval": r["candidate"]["eval"].interval,
                               "ece": r["candidate"]["ece"], "ece_calibrated": r["candidate"]["ece_calibrated"]},
                           "shuffled_reasons": r.get("shuffled_reasons")})
        record.append({"family": family, "zero_shot": {"value": ev.value, "interval": ev.interval, "ece": z["ece"],
                                                       "ece_calibrated": z["ece_calibrated"],
                                                       "ece_abstain": z["ece_abstain"],
                                                       "ece_answering": z["ece_answering"],
                                                       "calibrated_share": z["calibrated_share"], "wins": w,
                                                       "best_fixed": [best.name, best.value], "actions": ev.actions}})
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(json.dumps(record, indent=1, default=str))
    show(table(f"zero-shot on a family left out of training ({len(examples)} runs; value = DR estimate of score - "
               f"{args.lam}*tokens/budget [95%]; ECE (its noise floor))",
               ["family", "runs / questions", "router value", "best fixed value", ">= best - 0.02", "success / tokens",
                "ECE all", "ECE calibrated, share", "ECE abstain / others", "one action wins: router picks it", "router's actions",
                "fixed: value/success/tokens"], zero_rows), width=260)
    show(table("after `agentrt learn` on the family's first N questions (learn_round, incumbent = the zero-shot router); "
               "scored on the family's held-out questions",
               ["family", "N", "held-out questions", "gate", "value [95%]", "best fixed", "ECE all (floor)",
                "ECE calibrated, share", "ECE abstain / others", "tokens", "the candidate: value, ECE all",
                "shuffled-reward candidate", "actions"],
               adapt_rows), width=260)


if __name__ == "__main__":
    main()
