"""``agentrt train-policy --grpo --env search:CORPUS``: GRPO on multi-turn search episodes, through TRL's
``environment_factory`` (``agentrt.envs.trl``), with the overoptimization watch on held-out questions.

The questions are the corpus family's (``agentrt env serve search:CORPUS`` resolves them: the bundled
hotpotqa-index, squad, docs, or a collection / path with ``--suite``); a stable hash share ``--holdout`` of them
is never trained on (``agentrt.envs.trl.split_questions``): the watch scores those, and so does
``evals/bench/env_bench.py``.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any
from agentrt.core.config import Settings

ENV_COMPLETION_TOKENS = 256  # default --max-completion-length with --env: a whole episode, tool results included


def search_questions(corpus: str, args: argparse.Namespace, settings: Settings) -> tuple[list[Any], Any]:
    """(questions, make_episode) of ``search:corpus``: E1's ``build_spec`` (its questions, its corpus, its
    budgets; episodes recorded under ``$AGENTRT_HOME/trajectories``)."""
    from agentrt.app.commands.env import build_spec
    from agentrt.envs.trl import Question

    ns = argparse.Namespace(suite=getattr(args, "suite", None), limit=getattr(args, "limit", None), split="all",
                            holdout=args.holdout, max_steps=args.env_max_steps, budget=args.env_budget, k=args.k)
    spec = build_spec("search", corpus, ns, settings)
    return [Question(it.id, it.question, it.ground_truth, it.verifier) for it in spec.items], spec.make_episode


def train_env(args: argparse.Namespace, out: str) -> tuple[Any, Any]:
    """Train on ``--env search:CORPUS``; (the TrainReport, the watch or None)."""
    from agentrt.core.config import load_settings
    from agentrt.core.errors import InputError
    from agentrt.envs.trl import environment_run, rows_for, split_questions
    from agentrt.train.grpo import train_grpo

    kind, _, corpus = args.env.partition(":")
    if kind != "search" or not corpus:
        raise InputError(f"--env {args.env!r}: use search:CORPUS (hotpotqa-index, squad, docs, or a collection / "
                         "path with --suite) or strategy")
    if not 0 < args.holdout < 1 or args.env_budget < 1 or args.env_max_steps < 1 or args.k < 1:
        raise InputError("--holdout must be in (0, 1); --env-budget, --env-max-steps and --k must be >= 1")
    settings = load_settings(args.config)
    questions, make_episode = search_questions(corpus, args, settings)
    train, held = split_questions(questions, args.holdout)
    if not train:
        raise InputError(f"search:{corpus}: no training questions left after holding out {args.holdout:.0%}")
    print(f"agentrt: search:{corpus}: {len(train)} training questions, {len(held)} held out", file=sys.stderr)
    run = environment_run(train + held, make_episode, max_tool_calls=args.env_max_steps)
    model_dir = warm_start(args, out, train, run) if getattr(args, "warm_start", 0) else args.model_dir
    watch = _watch(args, out, held, run, model_dir) if args.watch else None
    report = train_grpo(rows_for(train), out, model_dir=model_dir, steps=args.steps,
                        num_generations=args.num_generations or 4, batch_size=args.batch_size or 4,
                        max_completion_length=args.max_completion_length or ENV_COMPLETION_TOKENS,
                        learning_rate=args.learning_rate, callbacks=[watch] if watch else [],
                        save_steps=args.checkpoint_every, resume=args.checkpoint_every > 0,
                        train_layers=args.train_layers, temperature=args.temperature, environment=run)
    return report, watch


def warm_start(args: argparse.Namespace, out: str, train: list[Any], run: Any) -> str:
    """``--warm-start EPOCHS``: imitate the environment's demonstrations on the training questions
    (``agentrt.envs.trl.demonstrations``, ``agentrt.train.sft``) into OUT/warm-start, where GRPO starts; a
    finished warm start there is reused (a rerun resumes GRPO, it does not imitate again)."""
    from agentrt.core.errors import InputError
    from agentrt.envs.trl import demonstrations
    from agentrt.train.sft import train_sft

    if args.warm_start < 0:
        raise InputError("--warm-start takes a number of epochs >= 0")
    folder = Path(out) / "warm-start"
    if (folder / "config.json").is_file():
        print(f"agentrt: warm start: reusing {folder}", file=sys.stderr)
        return str(folder)
    demos = demonstrations(train, run.factory)
    print(f"agentrt: warm start: {len(demos)} demonstrations from {len(train)} training questions (a search with "
          "the question showed the answer)", file=sys.stderr)
    report = train_sft(demos, folder, model_dir=args.model_dir, epochs=args.warm_start,
                       learning_rate=args.warm_start_lr, prepare_tokenizer=run.prepare_tokenizer)
    print(f"agentrt: {report.summary()}", file=sys.stderr)
    return str(folder)


def _watch(args: argparse.Namespace, out: str, held: list[Any], run: Any, model_dir: str | None) -> Any:
    """The overoptimization watch on the first ``--watch K`` held-out questions (greedy episodes; KL to the
    starting policy)."""
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from agentrt.core.config import load_settings
    from agentrt.core.errors import InputError
    from agentrt.envs.trl import SearchHeldOut, rows_for
    from agentrt.train.watch import make_watch

    try:
        k = int(args.watch)
    except ValueError:
        raise InputError(f"--watch with --env takes a number of held-out questions, got {args.watch!r}") from None
    if k < 1 or not held:
        raise InputError("--watch K needs K >= 1 and held-out questions (raise --holdout)")
    from agentrt.train.grpo import model_folder

    model_dir = model_folder(model_dir, load_settings(args.config).models_dir)
    tokenizer = AutoTokenizer.from_pretrained(model_dir)
    run.prepare_tokenizer(tokenizer)
    ref = AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch.float32).requires_grad_(False)
    scorer = SearchHeldOut(rows_for(held[:k]), tokenizer, run.factory, reference=ref,
                           max_turns=args.env_max_steps)
    return make_watch(scorer, Path(out) / "watch", every=args.watch_every, stop_early=not args.no_stop_early,
                      keep_best=not args.keep_last)


__all__ = ["ENV_COMPLETION_TOKENS", "search_questions", "train_env", "warm_start"]
