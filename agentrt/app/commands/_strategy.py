"""``agentrt train-policy --grpo --env strategy --outcomes DIR...``: the policy learns its own route (agentrt.train.strategy).

The flags only this mode reads are added here (``add_arguments``); the shared ones (--steps, --out, --watch-every,
--checkpoint-every, ...) are train-policy's."""

from __future__ import annotations

import argparse
import json
from pathlib import Path


def add_arguments(t: argparse.ArgumentParser) -> None:
    """The strategy environment's flags on the train-policy parser."""
    g = t.add_argument_group("--env strategy")
    g.add_argument("--outcomes", nargs="+", metavar="DIR", help="strategy: exploration trajectory folders/files "
                   "(or *.cells.jsonl outcome caches) the rewards are read from")
    g.add_argument("--leave-out", nargs="+", default=[], metavar="FAMILY",
                   help="strategy: hold out every question of these suites (leave-one-suite-out)")
    g.add_argument("--lambda", dest="lam", type=float, help="strategy: token price (default: settings.router_lambda)")
    g.add_argument("--no-watch", action="store_true", help="strategy: skip the watch on the held-out questions")
    g.add_argument("--explore-share", type=float, default=None, metavar="S",
                   help="strategy: share of each GRPO group whose labels are dealt uniformly over the six routes, "
                        "the rest from the policy (default 1: every label once in a group of 6, the cache prices "
                        "them all; 0 = on-policy only, where a label the policy gives ~1%% is never tried)")
    g.add_argument("--save-outcomes", metavar="FILE", help="strategy: also write the outcome cache (.cells.jsonl)")


def cmd_strategy(args: argparse.Namespace) -> int:
    """Train on the strategy environment; print where the policy is and how to route with it."""
    from agentrt.core.config import load_settings
    from agentrt.core.errors import InputError
    from agentrt.train.outcomes import load_outcomes
    from agentrt.train.strategy import EXPLORE_SHARE, StrategyHeldOut, rows, split, train_strategy

    if not args.outcomes:
        raise InputError("--env strategy needs --outcomes DIR... (exploration trajectories: agentrt learn --explore-only)")
    settings = load_settings(args.config)
    lam = settings.router_lambda if args.lam is None else args.lam
    cache = load_outcomes(args.outcomes)
    if args.save_outcomes:
        cache.save(args.save_outcomes)
    train_q, held_q = split(cache, holdout=args.holdout, leave_out=tuple(args.leave_out))
    out = args.out or str(settings.home / "strategy-policy")
    watch = None
    if held_q and not args.no_watch:
        import torch
        from transformers import AutoModelForCausalLM, AutoTokenizer

        from agentrt.train.watch import make_watch

        from agentrt.train.grpo import model_folder

        model_dir = model_folder(args.model_dir, settings.models_dir)
        ref = AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch.float32).requires_grad_(False)
        held = StrategyHeldOut(rows(held_q), AutoTokenizer.from_pretrained(model_dir), reference=ref,
                               cache=cache, lam=lam, means=cache.means(train_q, lam))
        watch = make_watch(held, Path(out) / "watch", every=args.watch_every, stop_early=not args.no_stop_early,
                           keep_best=not args.keep_last)
    report, extras = train_strategy(
        cache, out, train_questions=train_q, lam=lam, model_dir=args.model_dir, steps=args.steps,
        # full-information groups by default: each of the six labels once per group (EXPLORE_SHARE)
        num_generations=args.num_generations or 6, batch_size=args.batch_size or 12,
        max_completion_length=args.max_completion_length or 3, learning_rate=args.learning_rate,
        temperature=args.temperature, callbacks=[watch] if watch else [], save_steps=args.checkpoint_every,
        resume=args.checkpoint_every > 0, train_layers=args.train_layers,
        explore_share=EXPLORE_SHARE if args.explore_share is None else args.explore_share,
        provenance={"outcomes": [str(p) for p in args.outcomes], "leave_out": list(args.leave_out),
                    "holdout": args.holdout, "explore_share": args.explore_share})
    log = watch.log if watch else None
    if args.json:
        print(json.dumps({**report.to_dict(), **extras, "training_questions": len(train_q), "held_out": len(held_q),
                          **({"watch_best_step": log.best_step, "watch_restored": log.restored,
                              "watch_stopped": log.stopped} if log else {})}))
        return 0
    print(f"GRPO (strategy): {report.steps} steps in {report.wall_s} s on {len(train_q)} questions "
          f"({len(held_q)} held out); mean reward per step: {', '.join(f'{r:.3f}' for r in report.rewards)}")
    print("reward sources: " + ", ".join(f"{k} {v}" for k, v in extras["sources"].items()))
    if log:
        print(f"watch: {len(log.entries)} evaluations (OUT/watch.png); saved policy: "
              f"{log.restored or f'the last step (best held-out value at step {log.best_step})'}")
    print(f"policy saved: route with --router self:{report.output_dir} (or --policy hf:{report.output_dir})")
    return 0
