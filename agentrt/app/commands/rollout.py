"""``agentrt rollout``: generate scored trajectories for RL (S samples per item of a suite).

    agentrt rollout --suite gsm8k --samples 8 --limit 500 --budget 1024 --out /shared/rollouts/r1 \\
        --executor ray --ray-address auto
    agentrt export --format grpo --trajectories /shared/rollouts/r1/trajectories --out grpo.parquet

Writes ``OUT/trajectories/`` (one writer: this process; each record carries its task, ground truth,
verifier and reward, ``task.prompt_id`` groups the samples of an item) and ``OUT/results.jsonl``
(one line per rollout; resumable: run the same command again after a kill and it continues).
"""

from __future__ import annotations

import argparse
from pathlib import Path


def register(sub: argparse._SubParsersAction) -> None:
    from agentrt.batch.executors import add_executor_args

    p = sub.add_parser("rollout", help="generate scored trajectories for RL training (S samples per suite item)")
    p.add_argument("--suite", action="append", required=True, help="built-in suite name or FILE.jsonl (repeatable)")
    p.add_argument("--samples", type=int, default=4, help="rollouts per item (default 4)")
    p.add_argument("--limit", type=int, help="first K items of each suite")
    p.add_argument("--router", default="rules", help="rules (the Agent chooses the route; propensities logged) "
                   "or fixed:ROUTE (default rules)")
    p.add_argument("--budget", type=int, default=1024, help="token budget per rollout (default 1024)")
    p.add_argument("--seed", type=int, default=0, help="base seed: each sample's seed derives from it (default 0)")
    p.add_argument("--temperature", type=float, help="sampling temperature of the runs (default: 0 = greedy with "
                   "--samples 1, 0.7 with more samples, so samples differ)")
    p.add_argument("--workers", type=int, default=4, help="concurrent runs sharing the model (local executor)")
    p.add_argument("--policy", help="policy backend spec (default: the config's, else hf:embedded)")
    p.add_argument("--out", required=True, help="output folder (results.jsonl, trajectories/); reused to resume")
    p.add_argument("--trajectories", help="trajectory directory (default OUT/trajectories; a shared folder on a cluster)")
    p.add_argument("--no-progress", action="store_true", help="no progress bar")
    add_executor_args(p)
    p.set_defaults(func=cmd_rollout)


def cmd_rollout(args: argparse.Namespace) -> int:
    import asyncio
    import sys

    from agentrt.app.agent import Agent
    from agentrt.app.commands.run import preflight
    from agentrt.batch.executors import executor_from_args
    from agentrt.core.config import ensure_writable_dir, load_settings
    from agentrt.core.errors import InputError
    from agentrt.trajectory import TrajectoryWriter
    # The eval harness sits above the runtime: imported here, lazily, and only by this command.
    from evals.routers import make_router
    from evals.runner import EvalConfig, plan_tasks, resolve_temperature, run_tasks, runtime_specs, suite_corpus
    from evals.suites import load_suite

    for name in ("samples", "budget", "workers", "limit"):
        value = getattr(args, name)
        if value is not None and value < 1:
            raise InputError(f"--{name} must be a positive integer, got {value}")
    router = make_router(args.router)  # bad input fails before anything loads
    suites = [load_suite(s) for s in dict.fromkeys(args.suite)]
    settings = load_settings(args.config, policy=args.policy)
    # the plan route searches the suites' corpus file, indexed here (once), unless the settings name one
    own = suite_corpus([item for s in suites for item in s.items[:args.limit]])
    preflight(settings, budget=args.budget, routers=runtime_specs([router]),
              corpus=own if own and settings.corpus == "default" else None)
    executor = executor_from_args(args)
    config = EvalConfig(suites=args.suite, routers=[args.router], budget=args.budget, limit=args.limit,
                        samples=args.samples, workers=args.workers, seed=args.seed,
                        temperature=resolve_temperature(args.temperature, args.samples), policy=settings.policy,
                        out=args.out)
    agent = Agent(settings)
    traj_dir = ensure_writable_dir(Path(args.trajectories or Path(args.out) / "trajectories"), "trajectory directory")
    agent.writer = TrajectoryWriter(traj_dir)  # the rollout's own store (set before any run)
    tasks = plan_tasks(suites, [router], config.samples, config.limit)
    try:
        progress = not args.no_progress and sys.stderr.isatty()
        records = asyncio.run(run_tasks(agent, tasks, config, executor=executor, progress=progress, label="rollout"))
    finally:
        executor.close()
    keys = {t.key for t in tasks}
    records = [r for r in records if r["key"] in keys]
    scores = [r["score"] for r in records]
    errors = sum(1 for r in records if r.get("status") == "error")
    mean = sum(scores) / len(scores) if scores else 0.0
    print(f"rollouts: {len(records)} ({len({r['item_id'] for r in records})} items x {args.samples} samples), "
          f"mean reward {mean:.3f}, errors {errors}, executor {executor.name}")
    print(f"trajectories: {traj_dir}")
    print(f"next: agentrt export --format grpo --trajectories {traj_dir} --out grpo.parquet")
    return 0
