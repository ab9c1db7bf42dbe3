"""``agentrt learn``: explore, train a router off-policy, evaluate it on a held-out slice, promote or refuse.

    agentrt learn gsm8k simpleqa unanswerable my-suite.jsonl ~/.cache/agentrt/trajectories \\
        --limit 40 --budget 384 --out learn-out

1. Explore: every item of the named suites (built-in names, the dev sets ``easy``, ``unanswerable``, ``ambiguous``,
   ``arith``, ``hotpotqa-index`` = evals/data/NAME-dev.jsonl, custom JSONL) runs once under the incumbent router
   with exploration (softmax ``--temperature`` over its utilities mixed with ``--epsilon`` uniform; the chosen
   action's propensity is logged), and once more as a token-free abstain run (``FREE_ACTIONS``). The runs are
   trajectories under OUT/trajectories and OUT/explore/results.jsonl; a rerun skips every item already done.
   ``--every-action`` runs each item once with every action instead (a fixed logger per action, propensity 1/K).
   A folder of logged trajectories with rewards is used as is (no runs).
2. Learn (agentrt.train.learn): train on the training slice, evaluate candidate vs incumbent on the held-out
   slice, promote only when the DR value's lower bound beats the incumbent and ECE does not regress.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path
from typing import Any
from agentrt.core.config import Settings


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("learn", help="explore, train the router off-policy, evaluate it held out, promote if better")
    p.add_argument("suites", nargs="*", metavar="SUITE",
                   help="built-in suite (gsm8k, simpleqa, ifeval, math500, unanswerable, ...), FILE.jsonl, "
                        "or a folder of logged trajectories with rewards")
    p.add_argument("--limit", type=int, help="first K items of each suite")
    p.add_argument("--budget", type=int, default=512, help="token budget per explore run (default 512)")
    p.add_argument("--samples", type=int, default=1, help="explore runs per item (default 1; raise it for more data)")
    p.add_argument("--epsilon", type=float, default=0.3, help="uniform exploration share (default 0.3)")
    p.add_argument("--temperature", type=float, default=0.1,
                   help="softmax temperature over the incumbent's utilities (default 0.1)")
    p.add_argument("--lambda", dest="lam", type=float, default=0.3, help="token price in the utility (default 0.3)")
    p.add_argument("--min-runs", type=int, default=None,
                   help="runs each action should reach: exploration gives the short ones a minimum share of the "
                        "runs to come (default 30, what the trainer wants per action; 0: no shares)")
    p.add_argument("--gate", choices=("crossfit", "holdout"), default="crossfit",
                   help="how the candidate is judged against the router in use: crossfit (default: every question, "
                        "each by a candidate fit on the other folds' questions) or holdout (a --holdout share of the "
                        "questions, never fit on)")
    p.add_argument("--holdout", type=float, default=0.3,
                   help="--gate holdout: share of questions held out for evaluation (default 0.3)")
    p.add_argument("--folds", type=int, default=5,
                   help="cross-fitting folds by question, of the gate and of each fit's calibration (default 5)")
    p.add_argument("--bootstrap", type=int, default=1000, help="bootstrap rounds of the intervals (default 1000)")
    p.add_argument("--workers", type=int, default=2, help="concurrent explore runs sharing the model (default 2)")
    p.add_argument("--seed", type=int, default=0, help="seed of exploration and of the held-out split (default 0)")
    p.add_argument("--logging-router", help="router spec that explores (default: the incumbent, else rules)")
    p.add_argument("--policy", help="policy backend spec (default hf:embedded)")
    from agentrt.app.commands.run import add_tier_arg

    add_tier_arg(p)
    p.add_argument("--out", default="learn-out", help="output folder, reused to resume (default learn-out)")
    p.add_argument("--every-action", action="store_true",
                   help="run every action on each item instead of one explored action (full information: the gate "
                        "then values both routers from runs of their own choices, not from the few an explorer made: "
                        "50-100 items settle what one explored run per item leaves open; as many runs per item as "
                        "there are actions)")
    p.add_argument("--actions", type=_action_list, metavar="A,B,...",
                   help="only these actions: explored, trained and judged (default: every action this policy has; "
                        "e.g. abstain,direct,read,read@large leaves plan and reason out, the slow ones on a CPU); "
                        "runs of other actions in the folders given are not used, and the router trained decides "
                        "among these alone")
    p.add_argument("--no-free-abstain", dest="free_abstain", action="store_false",
                   help="do not log a (token-free) abstain run of every item beside the exploring run")
    p.add_argument("--explore-only", action="store_true", help="run the exploration, do not train")
    p.add_argument("--no-promote", action="store_true", help="register the candidate but never promote it")
    p.add_argument("--no-progress", action="store_true", help="no progress bar")
    p.add_argument("--traffic", action="store_true",
                   help="learn from this home's own runs with feedback instead of suites: train a candidate and "
                        "observe it in shadow, or judge the observed one and promote it (agentrt.train.traffic)")
    p.set_defaults(func=cmd_learn)


def _check(args: argparse.Namespace) -> None:
    from agentrt.core.errors import InputError

    for name in ("budget", "samples", "workers", "folds", "bootstrap"):
        if getattr(args, name) < 1:
            raise InputError(f"--{name} must be a positive integer, got {getattr(args, name)}")
    if args.limit is not None and args.limit < 1:
        raise InputError(f"--limit must be a positive integer, got {args.limit}")
    if not 0 <= args.epsilon <= 1 or args.temperature < 0 or args.lam < 0:
        raise InputError("--epsilon must be in [0, 1]; --temperature and --lambda must be >= 0")
    if not 0 < args.holdout < 1:
        raise InputError(f"--holdout must be between 0 and 1 (a share of questions), got {args.holdout}")
    if getattr(args, "min_runs", None) is not None and args.min_runs < 0:
        raise InputError(f"--min-runs must be 0 (no shares) or more, got {args.min_runs}")
    if args.folds < 2:
        raise InputError("--folds must be at least 2")


def _action_list(text: str) -> tuple[str, ...]:
    """``--actions``: a comma-separated list, each name once (checked against the policy's once it is known)."""
    names = tuple(dict.fromkeys(a.strip() for a in text.split(",") if a.strip()))
    if not names:
        raise argparse.ArgumentTypeError("give at least one action, e.g. abstain,read,read@large")
    return names


def chosen_actions(available: tuple[str, ...], wanted: tuple[str, ...] | None,
                   among: str = "this policy's actions") -> tuple[str, ...]:
    """``available`` (the policy's actions, in their order) cut to ``wanted`` (``--actions``); a name it does not
    have is one clear error."""
    from agentrt.core.errors import InputError

    if not wanted:
        return available
    unknown = [a for a in wanted if a not in available]
    if unknown:
        raise InputError(f"--actions: {', '.join(unknown)} not among {among} ({', '.join(available) or 'none'}); "
                         "plan needs an index for the suites' corpus, a tier action a --tier")
    return tuple(a for a in available if a in wanted)


def _load_suites(names: list[str]) -> tuple[list[Any], list[Path]]:
    """The suites to explore and the trajectory folders/files to learn from as they are."""
    from agentrt.core.errors import InputError
    from evals.suites import BUILTIN, dev_sets, load_jsonl, load_suite

    suites, logged = [], []
    for name in dict.fromkeys(names):
        path = Path(name).expanduser()
        if name in BUILTIN or name in dev_sets():
            suites.append(load_suite(name))
        elif path.is_dir() or (path.is_file() and path.suffix == ".jsonl" and _is_trajectories(path)):
            logged.append(path)
        elif path.is_file():
            suites.append(load_jsonl(path))
        else:
            raise InputError(f"{name!r} is neither a built-in suite ({', '.join(BUILTIN + dev_sets())}), a suite "
                             "file nor a trajectory folder")
    return suites, logged


def _is_trajectories(path: Path) -> bool:
    with path.open(encoding="utf-8", errors="replace") as f:
        first = f.readline()
    try:
        return isinstance(obj := json.loads(first), dict) and "run_id" in obj and "steps" in obj
    except json.JSONDecodeError:
        return False


# The budget the exploring router believes it has: the incumbent never considers an action it expects to
# overrun the run's budget (with the rules' a-priori costs, reason at a budget under ~700), so a small-budget
# exploration would never try it. Exploring must try every action; the propensities logged are those of
# the distribution actually sampled, so the off-policy estimates stay unbiased.
EXPLORE_BUDGET_VIEW = 4096


class _Exploring:
    """The incumbent router, deciding as if the budget were at least EXPLORE_BUDGET_VIEW."""

    def __init__(self, router: Any) -> None:
        self.router = router
        self.name = getattr(router, "name", "explore")

    async def decide(self, question: str, features: dict[str, float], budget: int) -> Any:
        return await self.router.decide(question, features, max(budget, EXPLORE_BUDGET_VIEW))


class ExploreRouter:
    """The eval harness's router protocol: every item decided by one router object (``router``)."""

    fixed = False

    def __init__(self, router: Any, name: str = "explore") -> None:
        self.router = router
        self.name = name

    def choose(self, item: Any) -> Any:
        from evals.routers import Choice

        return Choice(None, router=self.router)


# Abstaining costs no token and its reward is the verifier's verdict on "I don't know", known without a
# model call: exploration logs it for every item (a second, fixed logger), so the abstain model learns from
# every question instead of the few the exploring router happened to abstain on. Its runs go through the
# router like any other (the features are logged), and the propensities are the two loggers' mixture
# (agentrt.train.router._logging_propensities), so the off-policy estimates stay unbiased.
FREE_ACTIONS = ("abstain",)


def explore(args: argparse.Namespace, settings: Settings, suites: list[Any], out: Path, incumbent: str,
            have: dict[str, int] | None = None) -> Path:
    """Run (or resume) the exploration; returns the trajectory folder. ``have``: runs per action already
    logged (the folders given beside the suites): the actions short of ``--min-runs`` get a minimum share."""
    import asyncio

    from agentrt.app.agent import Agent
    from agentrt.core.types import INDEX_ROUTES
    from agentrt.router import ACTIONS, UtilityConfig, make_router
    from agentrt.router.rules import FixedRouter
    from agentrt.router.tiers import tiered_actions
    from agentrt.routes.index import corpus_signals
    from agentrt.trajectory import TrajectoryWriter
    from evals.runner import EvalConfig, plan_tasks, prepare_corpus, run_tasks

    # plan searches the private index: explore it only when one exists for settings.corpus (the suites' own
    # corpus file is indexed first, so a fresh home explores plan on a suite that names one)
    prepare_corpus(settings, [item for s in suites for item in s.items[:args.limit]])
    actions = tuple(a for a in ACTIONS if a not in INDEX_ROUTES or corpus_signals(settings) is not None)
    actions = tiered_actions(actions, settings)  # a tiered policy: each answering route on each tier too
    actions = chosen_actions(actions, getattr(args, "actions", None))
    from agentrt.train.router import MIN_RUNS_PER_ACTION, explore_shares

    planned = sum(len(s.items[:args.limit]) for s in suites) * args.samples
    agent = Agent(settings)
    if args.every_action:  # one fixed logger per action: mu(a|x) = 1/K (_logging_propensities), the DR value is exact
        loggers = [ExploreRouter(FixedRouter(a, settings), f"every:{a}") for a in actions]
        print(f"running every action on each item: {', '.join(actions)} ({len(actions) * planned} runs)",
              file=sys.stderr)
    else:
        minimum = MIN_RUNS_PER_ACTION if getattr(args, "min_runs", None) is None else args.min_runs
        free = tuple(a for a in FREE_ACTIONS if a in actions) if args.free_abstain else ()
        shares = explore_shares(have or {}, planned, actions, free=free, minimum=minimum)
        if shares:
            print("exploring: minimum shares so every action gets runs (want >= "
                  f"{minimum} each): " + ", ".join(f"{a} {v:.0%} (~{v * planned:.0f} runs)" for a, v in shares.items()),
                  file=sys.stderr)
        cfg = UtilityConfig(lam=args.lam, temperature=args.temperature, epsilon=args.epsilon, actions=actions,
                            floors={a: 0.0 for a in actions},  # exploring: every action stays possible
                            min_share=shares)
        loggers = [ExploreRouter(_Exploring(make_router(incumbent, settings, policy=agent.policy, cfg=cfg)))]
        loggers += [ExploreRouter(FixedRouter(a, settings), f"free:{a}") for a in free]
    trajectories = out / "trajectories"
    agent.writer = TrajectoryWriter(trajectories)
    config = EvalConfig(suites=[s.name for s in suites], routers=["explore"], budget=args.budget, limit=args.limit,
                        samples=args.samples, workers=args.workers, seed=args.seed, policy=settings.policy,
                        out=str(out / "explore"))
    tasks = plan_tasks(suites, loggers, args.samples, args.limit)
    progress = not args.no_progress and sys.stderr.isatty()
    records = asyncio.run(run_tasks(agent, tasks, config, progress=progress, label="explore"))
    if not progress:
        keys = {t.key for t in tasks}
        print(f"explored: {sum(1 for r in records if r.get('key') in keys)} of {len(tasks)} runs done "
              f"({len(records)} in {out / 'explore'})", file=sys.stderr)
    return trajectories


def _examples(paths: list[Path]) -> list[Any]:
    """Rewarded runs from the trajectory folders; a task run twice in one folder (a resumed kill) counts once
    (the last). The same task in two folders (two rounds of exploration) is two runs."""
    from agentrt.trajectory import ReadReport
    from agentrt.train.router import load_examples

    read = ReadReport()
    examples = load_examples(paths, read_report=read)
    if read.quarantined:
        print(f"agentrt: warning: {read.quarantine_summary()}", file=sys.stderr)
    last: dict[tuple[str, str] | str, Any] = {}
    for i, e in enumerate(examples):
        last[(e.source, e.key) if e.key else f"#{i}"] = e
    return list(last.values())


def _provenance_extra(args: argparse.Namespace, suites: list[Any], logged: list[Path], incumbent: str) -> dict[str, Any]:
    """What the candidate's provenance says of its data: the exploration this command ran (only when it ran
    one: learning from logged folders alone explores nothing) and the logged folders it read."""
    extra: dict[str, Any] = {}
    if suites:
        extra["explore"] = {"suites": [s.name for s in suites], "budget": args.budget, "epsilon": args.epsilon,
                            "every_action": args.every_action, "actions": list(args.actions or []) or None,
                            "temperature": args.temperature, "limit": args.limit, "samples": args.samples,
                            "min_runs": args.min_runs,
                            "free_abstain": args.free_abstain, "logging_router": args.logging_router or incumbent}
    if logged:
        extra["logged"] = [str(p) for p in logged]
    return extra


def cmd_learn(args: argparse.Namespace) -> int:
    os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")  # small solves next to a busy model: one thread is faster
    from agentrt.app.commands.run import tier_overrides
    from agentrt.core.config import load_settings
    from agentrt.router import registry
    from agentrt.train.learn import Incumbent, learn_round, reliability_markdown

    _check(args)
    if args.traffic or not args.suites:
        if args.actions:
            from agentrt.core.errors import InputError

            raise InputError("--actions applies to learning from suites or folders; --traffic learns over the "
                             "actions your runs took")
        from agentrt.app.commands._traffic import cmd_traffic

        return cmd_traffic(args)
    suites, logged = _load_suites(args.suites)  # bad input fails before the model loads
    settings = load_settings(args.config, policy=args.policy, **tier_overrides(args))
    fingerprint = registry.settings_fingerprint(settings)
    entry = registry.resolve_default(Path(settings.home), fingerprint)
    # the router in use: the policy's own, or for a tiered policy with none, its base model's (judged over the base
    # tier's actions, as it decides: agentrt.train.learn.learn_round)
    base = registry.tier_base(settings)
    incumbent = Incumbent(entry if entry and entry.fingerprint_id in (fingerprint.id, base and base.id) else None)
    out = Path(args.out)
    paths = list(logged)
    if suites:
        spec = args.logging_router or (f"learned:{entry.path}" if incumbent.entry else "rules")
        have: dict[str, int] = {}
        for e in (_examples(logged) if logged else []):
            have[e.action] = have.get(e.action, 0) + 1
        paths.append(explore(args, settings, suites, out, spec, have))
    if args.explore_only:
        print(f"exploration done: trajectories in {out / 'trajectories'}")
        return 0
    examples = _examples(paths)
    if args.actions:  # the candidate learns and is judged over these actions alone, the router in use too
        chosen_actions(tuple(sorted({e.action for e in examples})), args.actions, "the actions with runs")
        examples = [e for e in examples if e.action in args.actions]
    if not args.no_progress and sys.stderr.isatty():  # the fits take ~40 s on 2,000 runs: say what is happening
        how = (f"{args.folds} cross-fitted folds" if args.gate == "crossfit"
               else f"a {args.holdout:.0%} held-out slice")
        print(f"training a candidate on {len(examples)} runs and judging it against {incumbent.name} "
              f"({how})...", file=sys.stderr, flush=True)
    report = learn_round(examples, incumbent, settings, fingerprint,
                         suites=[s.name for s in suites] + [str(p) for p in logged], lam=args.lam,
                         holdout=args.holdout, folds=args.folds, seed=args.seed, rounds=args.bootstrap,
                         promote=not args.no_promote, gate=args.gate, extra=_provenance_extra(args, suites, logged, incumbent.name))
    out.mkdir(parents=True, exist_ok=True)
    (out / "report.json").write_text(json.dumps(report.to_dict(), indent=1))
    (out / "report.md").write_text(reliability_markdown(report))
    _print(report, incumbent.name, every=args.every_action)
    return 0


def _print(report: Any, incumbent: str, every: bool = False) -> None:
    from rich.console import Console
    from rich.table import Table

    from agentrt.train.router_eval import undecided

    for line in report.warnings:
        print(f"agentrt: warning: {line}", file=sys.stderr)
    r = report.runs
    if r.get("gate") == "holdout":
        title = (f"held-out slice: {r['heldout']} runs on {r['heldout_questions']} questions "
                 f"(trained on {r['train']} runs)")
    else:
        title = (f"cross-fitted: {r['heldout']} runs on {r['heldout_questions']} questions, each judged by a candidate "
                 f"fit on the other {r['folds'] - 1} of {r['folds']} folds (the candidate in use: fit on all of them)")
    table = Table(title=title)
    for col in ("router", "DR value [95%]", "success", "tokens", "ECE (noise floor)", "AUROC", "abstain P/R", "actions"):
        table.add_column(col)

    def fmt(x: Any, d: int = 3) -> str:
        return "-" if x is None else f"{x:.{d}f}"

    for p in [report.candidate, report.incumbent, *report.fixed.values()]:
        table.add_row(p.name, f"{p.value:+.3f} [{p.interval[0]:+.3f}, {p.interval[1]:+.3f}]", fmt(p.success),
                      f"{p.tokens:.0f}", fmt(p.ece) + ("" if p.ece_floor is None else f" ({p.ece_floor:.3f})"),
                      fmt(p.auroc), f"{fmt(p.abstain_precision, 2)}/{fmt(p.abstain_recall, 2)}",
                      " ".join(f"{a}:{n}" for a, n in sorted(p.actions.items())))
    Console(width=max(140, Console().width)).print(table)
    print(f"value on train {report.train_value:+.4f} vs judged {report.candidate.value:+.4f}; "
          f"action mix drift from {incumbent}: {report.drift:.2f}")
    v = report.verdict
    print(f"candidate {report.version} vs {incumbent}: " + "; ".join(v.lines()))
    if report.promoted:
        print(f"promoted {report.version}: it is now the default router for this policy (undo: agentrt router rollback)")
    elif v.promote:
        print(f"kept {incumbent}: {report.version} would be promoted, but --no-promote was given")
    else:
        print(f"kept {incumbent}; {report.version} not promoted: " + "; ".join(v.reasons))
        if undecided(v):  # not clearly worse: more questions may settle it
            lo, hi = v.interval
            print(f"undecided: {report.version} is not clearly worse (difference {v.difference:+.3f}, interval "
                  f"[{lo:+.3f}, {hi:+.3f}] on {r['heldout_questions']} questions): rerun learn on more items (--limit, "
                  "the same --out: the runs done are kept; the interval narrows about as 1/sqrt(questions))"
                  + ("" if every else " or with --every-action (each item run with every action: the value of "
                     "either router's choice is then measured, not inferred from one explored run)"))
            if v.difference > 0 and not v.flags:
                print(f"{report.version} is better on average: to take it on your judgement, agentrt router promote "
                      f"{report.version} (undo: agentrt router rollback)")
