"""``agentrt eval``: run an eval suite under one or more routing policies and write a report.

    agentrt eval --suite gsm8k --router fixed:direct --router fixed:reason --router rules \\
        --budget 512 --limit 40 --workers 4 --out runs/gsm8k

Without ``--router``: ``auto`` (what a user's runs get), ``rules``, ``fixed:direct``, ``fixed:reason``, and
``fixed:read`` when the suite names a corpus or ``--corpus`` is given. Resumable: run the same command again after
a kill and it continues where it stopped.
"""

from __future__ import annotations

import argparse
import sys


# What a user's runs get first (auto: the promoted or shipped router), then what it is judged against
DEFAULT_ROUTERS = ("auto", "rules", "fixed:direct", "fixed:reason")


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("eval", help="evaluate routing policies on a suite (gsm8k, math500, ifeval, simpleqa, "
                                    "humaneval, hotpotqa, hotpotqa-multiturn, or a .jsonl file)")
    p.add_argument("--suite", action="append", required=True, help="built-in suite name or FILE.jsonl (repeatable)")
    p.add_argument("--router", action="append",
                   help="auto | rules | self | cascade | learned:PATH | fixed:ROUTE (repeatable; default: "
                        f"{', '.join(DEFAULT_ROUTERS)}, and fixed:read when the suite names a corpus or --corpus is "
                        "given)")
    p.add_argument("--budget", type=int, default=1024, help="token budget per run (default 1024)")
    p.add_argument("--limit", type=int, help="first K items of each suite")
    p.add_argument("--samples", type=int, default=1, help="runs per item and router, for pass@k (default 1)")
    p.add_argument("--workers", type=int, default=4, help="concurrent runs sharing the model (default 4)")
    p.add_argument("--seed", type=int, default=0, help="base seed: each sample's seed derives from it (default 0)")
    p.add_argument("--temperature", type=float, help="sampling temperature of the runs (default: 0 = greedy with "
                   "--samples 1, 0.7 with more samples, so samples differ)")
    p.add_argument("--policy", help="policy backend spec (default hf:embedded)")
    from agentrt.app.commands.run import add_confidence_arg, add_corpus_arg, add_tier_arg, add_tools_args

    add_tier_arg(p)

    add_tools_args(p)  # as `agentrt run`: default the safe tools a user's run gets, --tools, --no-tools
    add_confidence_arg(p)  # each run's stated confidence (recorded in its trajectory): off by default
    add_corpus_arg(p)  # default: the suite's own corpus file, when its items name one
    p.add_argument("--out", required=True, help="output folder (results.jsonl, report.md/json, PNGs); reused to resume")
    p.add_argument("--no-progress", action="store_true", help="no progress bar")
    from agentrt.batch.executors import add_executor_args

    add_executor_args(p)  # --executor local|ray, --ray-address, --actors, --max-inflight
    p.set_defaults(func=cmd_eval)


def cmd_eval(args: argparse.Namespace) -> int:
    from agentrt.app.agent import Agent
    from agentrt.app.commands.run import preflight, tier_overrides
    from agentrt.core.config import load_settings
    from agentrt.core.errors import InputError
    # The eval harness sits above the runtime: imported here, lazily, and only by this command.
    from evals.runner import EvalConfig, evaluate, resolve_temperature, runtime_specs, suite_corpus, validate

    config = EvalConfig(suites=args.suite, routers=args.router or list(DEFAULT_ROUTERS),
                        budget=args.budget, limit=args.limit, samples=args.samples, workers=args.workers,
                        seed=args.seed, temperature=resolve_temperature(args.temperature, args.samples),
                        tools=args.tools, out=args.out)
    routers, suites = validate(config)  # bad input fails before the model loads
    settings = load_settings(args.config, policy=args.policy, **tier_overrides(args))
    for spec in config.routers:  # fixed:ROUTE@TIER names a tier these settings must have
        tier = spec.partition(":")[2].partition("@")[2] if spec.startswith("fixed:") else ""
        if tier and tier not in settings.tiers:
            raise InputError(f"router {spec}: no tier {tier!r} (tiers: {', '.join(settings.tiers) or 'none'}); "
                             f"add it with --tier {tier}=SPEC")
    if args.confidence:
        settings.confidence = args.confidence
    # The plan route searches --corpus, else the suite's corpus file (indexed here, once), else the setting.
    own = suite_corpus([item for s in suites for item in s.items[:args.limit]])
    corpus = args.corpus or (own if own and settings.corpus == "default" else None)
    if not args.router and corpus:  # over an index the cheap document route is a baseline too (and the oracle's)
        config.routers.append("fixed:read")
        routers, suites = validate(config)
    preflight(settings, budget=args.budget, routers=runtime_specs(routers), corpus=corpus)
    agent = Agent(settings)
    config.policy = agent.settings.policy
    from agentrt.batch.executors import executor_from_args

    executor = executor_from_args(args)
    try:
        report = evaluate(config, agent=agent, progress=not args.no_progress and sys.stderr.isatty(), executor=executor)
    finally:
        executor.close()
    for name, per_suite in report["policies"].items():
        m = per_suite["all"]
        print(f"{name:>16}  accuracy {m['accuracy']:.3f}  tokens {m['total_tokens'] or 0:.0f}  items {m['items']}")
    print(f"report: {args.out}/report.md")
    return 0
