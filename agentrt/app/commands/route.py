"""``agentrt route`` (show a routing decision without running anything) and ``agentrt train-router``."""

from __future__ import annotations

import argparse
import asyncio
import json


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("route", help="show the router's decision table for a question (runs nothing)")
    p.add_argument("question", help="the question to route")
    p.add_argument("--router", help="auto, rules, self, cascade, learned:PATH, fixed:<action> (default: setting "
                   "router, $AGENTRT_ROUTER, else auto: the promoted or shipped router for the policy, else rules)")
    from agentrt.app.commands.run import add_tier_arg

    add_tier_arg(p)
    p.add_argument("--budget", type=int, default=1024, help="token budget the decision assumes (default 1024)")
    p.add_argument("--lambda", dest="lam", type=float, help="token price in the utility (default 0.3)")
    p.add_argument("--floor", action="append", default=[], metavar="ACTION=P",
                   help="minimum p_success for an action to be chosen (repeatable)")
    p.add_argument("--json", action="store_true", help="print the decision as JSON")
    p.set_defaults(func=cmd_route)

    t = sub.add_parser("train-router", help="fit the learned router from trajectories with rewards")
    t.add_argument("--trajectories", nargs="+", required=True, help="trajectory JSONL files or folders")
    t.add_argument("--out", required=True, help="where to write the router file (JSON)")
    t.add_argument("--lambda", dest="lam", type=float, default=0.3,
                   help="token price in the utility the router is trained for (default 0.3)")
    t.add_argument("--folds", type=int, default=5,
                   help="cross-fitting folds (by question) for choosing regularization and calibration, and the report")
    t.add_argument("--seed", type=int, default=0, help="seed of the fold assignment (default 0)")
    t.add_argument("--strict", action="store_true",
                   help="fail on a corrupt trajectory line (default: skip it and say how many were skipped)")
    t.set_defaults(func=cmd_train)


def _floors(items: list[str]) -> dict[str, float]:
    from agentrt.core.errors import InputError

    floors = {}
    for item in items:
        action, sep, value = item.partition("=")
        try:
            floors[action] = float(value)
        except ValueError:
            sep = ""
        if not sep:
            raise InputError(f"--floor wants ACTION=P (e.g. plan=0.4), got {item!r}")
    return floors


def cmd_route(args: argparse.Namespace) -> int:
    from rich.console import Console
    from rich.table import Table

    from agentrt.app.commands.run import tier_overrides
    from agentrt.core.config import load_settings
    from agentrt.core.errors import InputError
    from agentrt.router import extract, make_router

    if not args.question.strip():
        raise InputError("the question is empty; pass a non-empty question")
    if args.budget <= 0:
        raise InputError(f"budget must be a positive number of tokens, got {args.budget}")
    overrides = {"router_lambda": args.lam, "router_floors": _floors(args.floor) or None}
    settings = load_settings(args.config, router=args.router, **overrides, **tier_overrides(args))
    policy, scorer, ctx = None, None, None
    if settings.router == "self":  # it scores its labels with the model, paid from the budget like in a run
        from agentrt.backends import load_backend
        from agentrt.core.budget import Budget
        from agentrt.routes.context import RunContext

        policy = load_backend(settings.policy, settings)
        ctx = RunContext("route", args.question, Budget(args.budget), policy, settings)
        scorer = ctx.score
    from agentrt.router.evidence import corpus_key
    from agentrt.routes.index import corpus_signals, routable  # what a run's router sees and may choose

    router = make_router(settings.router, settings, policy=policy, scorer=scorer, actions=routable(settings))

    features = extract(args.question, index=corpus_signals(settings))
    decision = asyncio.run(router.decide(args.question, features, args.budget))
    decision.corpus = corpus_key(features, settings.corpus)  # as a run records it
    if args.json:
        print(decision.model_dump_json())
        return 0
    table = Table(title=f"router {decision.router} — budget {args.budget}, lambda {settings.router_lambda}")
    floors = getattr(getattr(router, "cfg", None), "floors", None) or settings.router_floors or {}
    for col in ("action", "p_success", "evidence (runs)", "floor", "expected tokens", "utility", "P(choose)",
                "excluded because"):
        table.add_column(col, justify="left" if col in ("action", "excluded because") else "right")
    for a in decision.probabilities:
        mark = " <" if a == decision.action else ""
        table.add_row(a + mark, _fmt(decision.p_success.get(a)), _fmt(decision.evidence.get(a), 1),
                      _fmt(floors.get(a)), _fmt(decision.expected_tokens.get(a), 0), _fmt(decision.utility.get(a)),
                      _fmt(decision.probabilities.get(a)), decision.excluded.get(a, ""))
    from rich.markup import escape

    from agentrt.app.terminal import printable

    console = Console()
    console.print(table)
    console.print(f"chosen: [bold]{decision.action}[/bold] (propensity {decision.propensity:.2f}) — "
                  f"{escape(printable(decision.reason))}")  # a reason may quote the question or a model
    higher = [a for a, u in decision.utility.items() if u > decision.utility.get(decision.action, 0.0)]
    if higher:  # say why a higher utility lost, or the table reads as a wrong choice
        console.print("not chosen despite a higher utility: " + "; ".join(
            f"{a}: {decision.excluded.get(a, 'not eligible')}" for a in higher), markup=False)
    console.print(f"state: {decision.state}" + (f"; fallback: {decision.fallback}" if decision.fallback else "")
                  + (f"; corpus: {decision.corpus}" if decision.corpus else "")
                  + (f"; shadow candidate {decision.shadow.get('router_version')} would choose "
                     f"{decision.shadow.get('action')}" if decision.shadow else ""), markup=False)
    if ctx is not None:
        console.print(f"the decision itself cost {ctx.budget.spent} tokens of the budget (label scoring)")
    cues = {k: v for k, v in decision.features.items() if v}
    console.print(f"features: {json.dumps(cues)}")
    return 0


def _fmt(value: float | None, digits: int = 2) -> str:
    return "-" if value is None else f"{value:.{digits}f}"


def cmd_train(args: argparse.Namespace) -> int:
    import os
    from pathlib import Path

    # numpy's OpenBLAS starts a spinning thread per core; next to a busy model on a shared 2-core
    # machine that made these small solves ~100x slower. One thread is as fast at this size.
    os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")
    import sys

    from agentrt.core.errors import InputError
    from agentrt.trajectory import ReadReport, trajectory_files
    from agentrt.train.router import train_router

    paths: list[Path] = []
    for p in args.trajectories:
        path = Path(p)
        if not path.exists():
            raise InputError(f"no trajectory file or folder at {path}")
        if path.is_dir() and trajectory_files(path):
            paths.append(path)  # a store's folder: its record files in order, never its index
        elif path.is_dir():
            paths += sorted(f for f in path.glob("*.jsonl") if not f.name.endswith(".index.jsonl"))
        else:
            paths.append(path)
    if args.folds < 2:
        raise InputError("--folds must be at least 2")
    read = ReadReport()
    try:
        model = train_router(paths, lam=args.lam, folds=args.folds, seed=args.seed, strict=args.strict,
                             read_report=read)
    finally:  # what was skipped is worth saying even when too little was left to train on
        for line in read.problems:
            print(f"agentrt: warning: {line}", file=sys.stderr)
        if read.quarantined:
            print(f"agentrt: warning: {read.quarantine_summary()}; pass --strict to fail on them", file=sys.stderr)
    model.save(args.out)
    m = model.metrics or {}
    for line in m.get("warnings", []):  # the data cannot support the fit: said before the numbers
        print(f"agentrt: warning: {line}", file=sys.stderr)
    print(f"router written to {args.out}")
    floor = "" if m.get("ece_floor") is None else f" (noise floor {m['ece_floor']:.4f})"
    print(f"out-of-fold ({m['folds']} folds): ECE {m['ece']:.4f}{floor}  Brier {m['brier']:.4f}  "
          f"policy value IPS {m['policy_value_ips']:.4f} DR {m['policy_value_dr']:.4f} "
          f"(logged policy {m['logged_policy_value']:.4f})  runs {m['examples']} on {m['questions']} questions  "
          f"choices {m['chosen_actions']}  temperature {m['temperature']}")
    return 0
