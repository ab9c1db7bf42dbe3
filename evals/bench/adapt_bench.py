"""Benchmark: how fast the router adapts to a family of questions from traffic with feedback (issue 39).

    .venv/bin/python -m evals.bench.adapt_bench --family squad-heldout hotpotqa-heldout --n 0 25 50 100 200 \
        --heldout 60 --budget 2048 --out adapt-out

Per family (a built-in suite or dev set; ``squad-heldout`` and ``hotpotqa-heldout`` are the two no shipped router
was trained on, ``evals.devsets.HELDOUT``): its items are split by a stable hash into a traffic pool and a
held-out set, in a scratch home whose router is the shipped one.

* Traffic: the pool is run by ``agentrt learn --explore-only``, logged by the shipped router with
  exploration (``--epsilon``, no free abstain runs, no minimum shares); the verifier's verdict plays the user's
  feedback. An N larger than the pool takes more passes over it (a user asking again; each pass its own
  exploration seed): N counts runs, the first pass first.
* Held out: every held-out question is run once with each action of ``--grid`` (`agentrt eval`, fixed routers),
  so a router's choices are valued from runs of them (doubly robust, 95% bootstrap interval by question).

Then, for each N: what `agentrt learn` does with the first N traffic runs (``learn_round``: a candidate trained on
the runs, judged against the shipped router by its gate (cross-fitted by question), promoted or not); the router
in use afterwards decides the held-out questions as the runtime would (its estimate where the action has
evidence, else the fallback): value, success, tokens, ECE over all decisions and over those marked
``calibrated``; beside the best fixed action (by value, abstain included); where one answering action beats the
others by >= 10 points of success, the share of the questions it wins that the router sends to it (issue 38);
the candidate's own figures beside it. A candidate the gate kept then goes through observe mode on the traffic
runs that follow (``--observe``, 100): it decides them in shadow and ``traffic.judge_observed`` judges it as
`agentrt learn --traffic` would (a look at 10, 20, 40 and 80 questions, each at a stricter level): promoted,
refused, or still undecided when the runs ran out. Resumable: the runs are under
OUT/FAMILY/{traffic*,every,heldout-grid}.

``--every-action`` is issue 38's adaptation row instead: a user's suite with gold answers, learned with
`agentrt learn --every-action` (each pool question run once with every action, the gate's value then exact per
question); N counts questions, not runs, and there is no observe mode. ``--rotate K`` then also holds every
question of the family out once: the pool's and the held-out set's questions (each run with every action) in K
folds by a stable hash; per fold, ``learn_round`` on the first N of the other questions and the router in use
afterwards, the candidate and the shipped router scored on the fold; values pooled over all the questions, ECE over
all their runs (one held-out split of 40 moves the value by +-0.15; this is the figure to quote).
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
from evals.bench.family_bench import score, shuffled_verdict, wins

os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")
# the held-out grid: plan is left out (~1,800 tokens a run on a CPU; DR values a router's plan from its model)
GRID = ("abstain", "ask", "direct", "read", "reason")


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


def _log(suite: Path, out: Path, home: Path, args, seed: int = 0, every: bool = False) -> Path:
    """Run (or resume) one exploration of ``suite`` under the router in use in ``home`` (``every``: each item
    with every action instead, `learn --every-action`)."""
    env = reuse_converted_model({**os.environ, "AGENTRT_HOME": str(home)})
    cmd = [sys.executable, "-m", "agentrt.app.cli", "learn", str(suite), "--explore-only", "--no-free-abstain",
           "--min-runs", "0", "--epsilon", str(args.epsilon), "--temperature", "0", "--budget", str(args.budget),
           "--workers", str(args.workers), "--seed", str(seed), "--out", str(out), "--no-progress"]
    cmd += ["--every-action"] if every else []
    cmd += ["--actions", ",".join(args.actions)] if args.actions else []
    if args.limit:
        cmd += ["--limit", str(args.limit)]
    subprocess.run(cmd, env=env, cwd=ROOT, check=True)
    return out / "trajectories"


def _grid(suite: Path, out: Path, args) -> Path:
    """Run (or resume) every held-out question once with each action of ``args.grid`` (`agentrt eval`, fixed
    routers, in a home of its own): any router's choice is then valued from a run of it, not extrapolated from
    the few an exploring logger happened to make."""
    env = reuse_converted_model({**os.environ, "AGENTRT_HOME": str(out / "home")})
    cmd = [sys.executable, "-m", "agentrt.app.cli", "eval", "--suite", str(suite), "--budget", str(args.budget),
           "--workers", str(args.workers), "--out", str(out / "eval"), "--no-progress"]
    for action in args.grid:
        cmd += ["--router", f"fixed:{action}"]
    subprocess.run(cmd, env=env, cwd=ROOT, check=True)
    return out / "home" / "trajectories"


def main() -> None:
    ap = parser(__doc__)
    ap.add_argument("--family", nargs="+", default=["simpleqa"], help="suites left out of the shipped router's data")
    ap.add_argument("--n", nargs="+", type=int, default=[0, 25, 50], help="traffic sizes (runs with feedback)")
    ap.add_argument("--heldout", type=int, default=25, help="held-out questions per family")
    ap.add_argument("--limit", type=int, help="at most this many traffic questions (default: max of --n)")
    ap.add_argument("--epsilon", type=float, default=0.3, help="exploration share while logging (default 0.3)")
    ap.add_argument("--budget", type=int, default=384, help="token budget per run (default 384)")
    ap.add_argument("--workers", type=int, default=2)
    ap.add_argument("--grid", nargs="+", help="actions every held-out question is run with (default: "
                    f"{' '.join(GRID)}, and each answering one on every tier; a router's other choices are valued by "
                    "its reward model)")
    ap.add_argument("--tier", action="append", metavar="NAME=SPEC", help="the policy's tiers, as `agentrt learn "
                    "--tier` (default: the default policy's, the second embedded model when installed; none: the "
                    "policy alone)")
    ap.add_argument("--actions", nargs="+", help="the traffic explores (and `learn` trains over) these actions alone, "
                    "`agentrt learn --actions` (default: every action; the held-out grid defaults to these too)")
    ap.add_argument("--lambda", dest="lam", type=float, default=0.3)
    ap.add_argument("--gate", choices=("crossfit", "holdout"), default="crossfit", help="learn_round's gate")
    ap.add_argument("--observe", type=int, default=100, help="a candidate the gate kept decides the next this many "
                    "traffic runs in shadow and is judged as `learn --traffic` judges it (0: off)")
    ap.add_argument("--every-action", action="store_true", help="learn from the pool's first N questions each run "
                    "with every action (`agentrt learn --every-action` on a suite with gold; N counts questions)")
    ap.add_argument("--rotate", type=int, default=0, metavar="K", help="with --every-action: also hold every "
                    "question out once, in K folds (learn on N of the others), values pooled over all questions")
    ap.add_argument("--out", default="adapt-out")
    args = ap.parse_args()
    args.limit = args.limit or max(args.n)

    from agentrt.core.config import Settings
    from agentrt.router import registry
    from agentrt.router.learned import RouterModel
    from agentrt.train.router import load_examples
    from agentrt.train.router_eval import config, evaluate, fixed_estimator

    from agentrt.app.commands.run import tier_overrides
    from agentrt.core.types import TIER_ROUTES, tier_action

    out = Path(args.out).resolve()
    home = out / "home"  # scratch: nothing promoted, so the shipped router logs the traffic
    tiers = tier_overrides(args).get("tiers", Settings().tiers)
    os.environ["AGENTRT_TIERS"] = json.dumps(tiers)  # learn and eval (subprocesses) run the same tiered policy
    settings = Settings(tiers=tiers)
    args.grid = args.grid or args.actions or [*GRID, *(tier_action(r, t) for t in tiers for r in GRID if r in TIER_ROUTES)]
    # the router the runtime would use for this policy: the shipped one trained for it, else the base model's
    entry = registry.resolve_default(home, registry.settings_fingerprint(settings))
    shipped = RouterModel.load(entry.path)
    print(f"policy {registry.settings_fingerprint(settings).model}; the router in use: {entry.version}", file=sys.stderr)
    results = []
    for family in args.family:
        traffic_suite, heldout_suite = _split(family, out, args.heldout)
        pool = min(args.limit, sum(1 for line in traffic_suite.open() if line.strip()))
        traffic = []
        if args.every_action and max(args.n):  # --n 0 alone: the router in use zero-shot, no traffic to learn from
            traffic = load_examples([_log(traffic_suite, out / family / "every", home, args, every=True)])
        for k in range(0 if args.every_action or not max(args.n) else -(-max(args.n) // pool)):  # passes over the pool, each its own seed
            traffic += load_examples([_log(traffic_suite, out / family / ("traffic" if k == 0 else f"traffic-{k + 1}"),
                                           home, args, seed=k)])
        held = load_examples([_grid(heldout_suite, out / family / "heldout-grid", args)])
        traffic, held = _named(traffic, family), _named(held, family)
        actions = tuple(sorted({e.action for e in held}))
        ran = [a for a in actions if sum(e.action == a for e in held) >= 3]
        fixed = {a: evaluate(f"fixed:{a}", fixed_estimator(a), fixed_estimator(a), held, config(args.lam, (a,)))
                 for a in ran}
        best = max(fixed.values(), key=lambda p: p.value) if fixed else None
        for n in args.n:
            have = len({e.question for e in traffic}) if args.every_action else len(traffic)
            if n > have:
                print(f"{family} N={n}: only {have} traffic {'questions' if args.every_action else 'runs'}")
                continue
            rows = _first_questions(traffic, n) if args.every_action else traffic[:n]
            if n and len({e.question for e in rows}) < 2:
                print(f"{family} N={n}: too few traffic questions ({len(rows)} runs)")
                continue
            # what `agentrt learn --traffic` does with these runs: train a candidate, judge it against the
            # router in use (the shipped one) by its gate, promote it or keep the shipped one
            candidate = gate = None
            refused = None
            if n:
                candidate, gate = _learn(rows, shipped, settings, family, args.lam, args.gate)
                refused = not shuffled_verdict(rows, shipped, settings, args.lam, args.gate).promote
            in_use = candidate if gate and gate.promoted else shipped
            row = {"family": family, "n": n, "runs": len(rows), "heldout_runs": len(held),
                   "gate": None if gate is None else ("promoted" if gate.promoted else "kept"),
                   "verdict": None if gate is None else gate.verdict.lines() + gate.verdict.reasons,
                   "shuffled_refused": refused,
                   **_score(in_use, held, settings, args.lam, fixed, args.actions)}
            if candidate is not None:
                row["candidate"] = _score(candidate, held, settings, args.lam, fixed, args.actions)
            if candidate is not None and gate is not None and not gate.promoted and args.observe and not args.every_action:
                row["observe"] = _observe(candidate, rows, traffic[n:n + args.observe], settings, args.lam)
            row["best_fixed"] = None if best is None else {"action": best.name, "value": round(best.value, 4),
                                                           "success": round(best.success, 4),
                                                           "tokens": round(best.tokens, 1)}
            if n and args.every_action and args.rotate > 1:
                row["rotated"] = _rotated([*traffic, *held], shipped, settings, family, n, args)
            results.append(row)
    (out / "adapt.json").write_text(json.dumps(results, indent=1))
    f = lambda x: "-" if x is None else f"{x:.3f}"  # noqa: E731
    show(table(f"adaptation from traffic with feedback (held out: {args.heldout} questions per family; "
               "value = DR estimate of score - lambda*tokens/budget [95%]); the router in use after `learn` "
               "(the shipped one unless the gate promoted the candidate), and the candidate itself",
               ["family", "N", "gate", "value [95%]", "success", "tokens", "ECE all (floor)", "ECE calibrated (share)",
                "ECE abstain / others", "best fixed: value, success, tokens", "one action wins: router picks it", "actions",
                "candidate: value, ECE all, calibrated", "shuffled-reward candidate",
                f"kept candidate observed on the next {args.observe} runs"],
               [[r["family"], r["n"], r["gate"] or "-",
                 f"{r['value']:+.3f} [{r['interval'][0]:+.3f}, {r['interval'][1]:+.3f}]",
                 f(r["success"]), f"{r['tokens']:.0f}", f"{f(r['ece'])} ({f(r['ece_floor'])})",
                 f"{f(r['ece_calibrated'])} ({r['calibrated_share']:.0%})",
                 f"{f(r.get('ece_abstain'))} / {f(r.get('ece_answering'))}",
                 "-" if not r["best_fixed"] else f"{r['best_fixed']['action']} {r['best_fixed']['value']:+.3f}, "
                 f"{r['best_fixed']['success']:.3f}, {r['best_fixed']['tokens']:.0f}",
                 "-" if not r["wins"] else f"{r['wins']['action']} +{r['wins']['margin']:.2f}: "
                 f"{r['wins']['picked']:.0%} of {r['wins']['questions']}",
                 " ".join(f"{a}:{k}" for a, k in sorted(r["actions"].items())),
                 "-" if "candidate" not in r else f"{r['candidate']['value']:+.3f}, {f(r['candidate']['ece'])}, "
                 f"{f(r['candidate']['ece_calibrated'])}",
                 "-" if r["shuffled_refused"] is None else "refused" if r["shuffled_refused"] else "PROMOTED",
                 "-" if not r.get("observe") else f"{r['observe']['outcome']} at look {r['observe']['look']} "
                 f"({r['observe']['runs']} runs, {r['observe']['new_questions']} new questions): "
                 f"{r['observe']['difference']:+.3f} [{r['observe']['interval'][0]:+.3f}, "
                 f"{r['observe']['interval'][1]:+.3f}] at {r['observe']['level']}"]
                for r in results]), width=300)
    rotated = [r for r in results if r.get("rotated")]
    if rotated:
        cell = lambda d: f"{d['value']:+.3f}, {f(d['ece'])} ({f(d['ece_floor'])})"  # noqa: E731
        show(table("every question held out once (--rotate): value pooled over the questions, ECE (floor) over "
                   "their runs", ["family", "N", "questions", "gates per fold", "router in use after learn",
                                  "candidate", "shipped", "best fixed"],
                   [[r["family"], r["n"], r["rotated"]["questions"], " ".join(r["rotated"]["gates"]),
                     cell(r["rotated"]["in_use"]), cell(r["rotated"]["candidate"]), cell(r["rotated"]["shipped"]),
                     f"{r['rotated']['best_fixed'][0]} {r['rotated']['best_fixed'][1]:+.3f}"] for r in rotated]),
             width=200)


def _rotated(runs, shipped, settings, family: str, n: int, args) -> dict:
    """Every question held out once (``--rotate``): the router in use after ``learn_round`` on the first ``n``
    questions of the other folds, the candidate, the shipped router and each fixed action, scored fold by fold;
    values pooled over the questions (a mean of per-question values: every action was run on each), ECE over the
    runs of all folds."""
    from agentrt.train.router_eval import config, evaluate, fixed_estimator
    from evals.bench.family_bench import _ece

    order = sorted({e.question for e in runs}, key=lambda q: hashlib.blake2b(q.encode(), digest_size=4).digest())
    fold = {q: i % args.rotate for i, q in enumerate(order)}
    actions = tuple(sorted({e.action for e in runs}))
    values: dict[str, float] = {}
    pairs: dict[str, list] = {}
    gates = []
    for k in range(args.rotate):
        test = [e for e in runs if fold[e.question] == k]
        keep = set([q for q in order if fold[q] != k][:n])
        candidate, gate = _learn([e for e in runs if e.question in keep], shipped, settings, family, args.lam, args.gate)
        gates.append("promoted" if gate.promoted else "kept")
        share = len({e.question for e in test}) / len(order)
        routers = {"in_use": candidate if gate.promoted else shipped, "candidate": candidate, "shipped": shipped}
        for name, model in routers.items():
            if model is None:
                continue
            scored = score(name, model, test, tuple(a for a in model.actions if a in actions), settings, args.lam)
            values[name] = values.get(name, 0.0) + share * scored["eval"].value
            pairs.setdefault(name, []).extend(scored["pairs"])
        for a in actions:
            fixed = evaluate(a, fixed_estimator(a), fixed_estimator(a), test, config(args.lam, (a,))).value
            values[f"fixed:{a}"] = values.get(f"fixed:{a}", 0.0) + share * fixed
    best = max((a for a in values if a.startswith("fixed:")), key=values.get)
    eces = {name: _ece(p) for name, p in pairs.items()}
    return {"questions": len(order), "folds": args.rotate, "gates": gates, "best_fixed": [best, round(values[best], 4)],
            **{name: {"value": round(values[name], 4), "ece": ece, "ece_floor": floor}
               for name, (ece, floor) in eces.items()}}


def _first_questions(examples, n: int):
    """The runs of the first ``n`` questions, in the order their first run was logged."""
    order = list(dict.fromkeys(e.question for e in examples))[:n]
    keep = set(order)
    return [e for e in examples if e.question in keep]


def _observe(candidate, trained_on, after, settings, lam: float) -> dict | None:
    """Observe mode on a candidate the gate kept: it decides the traffic runs that follow in shadow (its greedy
    choice, as the runtime's shadow step records it) and `learn --traffic` judges it on them
    (``traffic.judge_observed``: a look each ``MIN_HELD_QUESTIONS`` new questions, stricter each time, until it
    promotes or refuses). Returns the last look's verdict, or None when the runs after it were too few to look."""
    import tempfile
    from dataclasses import replace

    from agentrt.router import registry
    from agentrt.train.router_eval import config, deciding_estimator, greedy
    from agentrt.train.traffic import judge_observed

    after = [e for e in after if e.logged]
    estimate, _ = deciding_estimator(candidate, settings)
    cfg = config(lam, tuple(candidate.actions), dict(getattr(settings, "router_floors", {}) or {}))
    fingerprint = registry.settings_fingerprint(settings)
    with tempfile.TemporaryDirectory() as home:
        entry = registry.add(Path(home), candidate)
        registry.set_observe(Path(home), fingerprint.id, {"version": entry.version, "status": "observing",
                                                          "since": 0, "incumbent": "shipped"})
        shadowed = []
        for e in after:
            pick, p = greedy("learned", estimate, e, cfg)
            shadowed.append(replace(e, shadow={"router_version": entry.version, "action": pick, "p_success": p}))
        report = None
        for m in range(1, len(shadowed) + 1):
            step = judge_observed(settings.model_copy(update={"home": home}), fingerprint, entry, shadowed[:m],
                                  lam=lam)
            if step.verdict is not None:
                report = step
            if step.step == "judged":
                break
    if report is None or report.verdict is None:
        return None
    v = report.verdict
    seen = {e.question for e in trained_on}
    return {"outcome": "promoted" if v.promote else "undecided" if report.step == "undecided" else "refused",
            "look": report.look, "runs": report.observed,
            "new_questions": len({e.question for e in after[:report.observed]} - seen),
            "difference": round(v.difference, 4), "interval": [round(x, 4) for x in v.interval],
            "level": f"{100 * (1 - v.alpha):.2f}%", "reasons": v.reasons}


def _named(examples, family: str):
    """Runs over the family's index logged before runs named their corpus ("?") get the collection `agentrt eval`
    and `learn` index its corpus file into (``collection_for``: name and content digest), the name newer runs log."""
    from dataclasses import replace

    from agentrt.app.corpus import collection_for
    from evals.multiturn import suite_corpus
    from evals.suites import load_suite

    path = suite_corpus(load_suite(family).items)
    name = collection_for(Path(path)) if path else ""
    return [replace(e, corpus=name) if e.corpus == "?" else e for e in examples]


def _learn(rows, shipped, settings, family: str, lam: float, gate: str = "crossfit"):
    """(candidate, RoundReport): ``learn_round`` on ``rows`` in a scratch home whose promoted router is ``shipped``."""
    import tempfile

    from agentrt.router import registry
    from agentrt.router.learned import RouterModel
    from agentrt.train.learn import Incumbent, learn_round

    fingerprint = registry.settings_fingerprint(settings)
    with tempfile.TemporaryDirectory() as home:
        entry = registry.add(Path(home), shipped)
        registry.promote(Path(home), entry.version)
        report = learn_round(rows, Incumbent(entry), settings.model_copy(update={"home": home}), fingerprint,
                             suites=[family], lam=lam, gate=gate)
        candidate = RouterModel.load(registry.find(Path(home), report.version).path) if report.version else None
    return candidate, report


def _score(model, held, settings, lam: float, fixed: dict, only=None) -> dict:
    """A router as the runtime runs it (its estimate where it has evidence, else the fallback), on the logged
    held-out runs: DR value with its interval, success, tokens, ECE over all runs, over the calibrated ones and
    over the abstain estimates apart from the others', and, where one answering action wins, the share of its
    wins the router sends to it. ``only``: it decides among these of its actions (``--actions``)."""
    s = score("router", model, held, tuple(a for a in model.actions if not only or a in only), settings, lam)
    ev = s["eval"]
    return {"value": round(ev.value, 4), "interval": [round(x, 4) for x in ev.interval],
            "success": round(ev.success, 4), "tokens": round(ev.tokens, 1), "ece": s["ece"][0],
            "ece_floor": s["ece"][1], "ece_calibrated": s["ece_calibrated"][0],
            "ece_abstain": s["ece_abstain"][0], "ece_answering": s["ece_answering"][0],
            "calibrated_share": round(s["calibrated_share"], 3), "actions": ev.actions,
            "wins": wins(held, fixed, s["picks"])}


if __name__ == "__main__":
    main()
