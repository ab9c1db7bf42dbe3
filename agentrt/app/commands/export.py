"""``agentrt export`` (trajectories -> trainer files) and ``agentrt train-policy --grpo`` (TRL GRPO on the CPU).

``train-policy --grpo --reward rlcr`` trains the policy to state a calibrated confidence (docs/rlcr.md)."""

from __future__ import annotations

import argparse
import json
import sys


def register(sub: argparse._SubParsersAction) -> None:
    from agentrt.trajectory.export import FORMATS

    p = sub.add_parser("export", help="export trajectories for RL/SFT trainers (verl, TRL, OpenAI, GRPO, ...)")
    p.add_argument("--format", required=True, choices=list(FORMATS), help="what to write")
    p.add_argument("--out", required=True, help="output file (.parquet or .jsonl)")
    p.add_argument("--filter", action="append", default=[], metavar="KEY=VALUE",
                   help="keep runs matching, e.g. status=ok, route=reason, reward>=0.5, task.data_source=gsm8k "
                        "(repeatable: all must match)")
    p.add_argument("--trajectories", nargs="+", metavar="FILE", help="trajectory files or directories "
                   "(default: the trajectories under $AGENTRT_HOME)")
    p.add_argument("--min-group", type=int, default=2, help="grpo: smallest group of rollouts kept (default 2)")
    p.add_argument("--check-continuity", action="store_true",
                   help="also re-tokenize each run with the tokenizer of the model that wrote it and report token "
                        "mismatches")
    p.add_argument("--policy", metavar="SPEC", help="--check-continuity: the model whose tokenizer re-tokenizes every "
                   "run, hf:FOLDER or hf:embedded[:NAME] (default: the embedded model each run names, else the "
                   "policy setting)")
    p.add_argument("--strict", action="store_true",
                   help="fail on a corrupt trajectory line (default: skip it and say how many were skipped)")
    p.add_argument("--sft-status", action="append", metavar="STATUS",
                   help="trl-sft: run statuses to keep (repeatable; default ok: no cancelled, failed or empty runs)")
    p.add_argument("--min-reward", type=float, help="trl-sft: keep only runs whose reward is at least this")
    p.add_argument("--include-failed", action="store_true",
                   help="keep runs without a real answer (status no_answer, failed, cancelled, or an empty / raw tool "
                        "output answer); by default they are left out and counted in the summary")
    p.set_defaults(func=cmd_export)

    t = sub.add_parser("train-policy", help="train the policy from exported data (GRPO with TRL, CPU)")
    t.add_argument("--grpo", action="store_true", required=True, help="use GRPO (the only method for now)")
    t.add_argument("--data", help="a trl-prompts export (.parquet/.jsonl); default: a built-in toy task (capitals, F1 reward)")
    t.add_argument("--out", default=None, help="output folder for the trainer (default: $AGENTRT_HOME/grpo)")
    t.add_argument("--steps", type=int, default=2, help="optimizer steps (default 2)")
    t.add_argument("--num-generations", type=int, default=None, help="completions sampled per prompt: the GRPO group "
                   "(default 4; --env strategy: 6, each of the six labels once: docs/environments.md)")
    t.add_argument("--batch-size", type=int, default=None, help="completions per device batch (default 4; --env "
                   "strategy: 12, two groups)")
    t.add_argument("--max-completion-length", type=int, default=None,
                   help="new tokens per completion (default 16; with --env a whole episode, tool results included: 256)")
    t.add_argument("--learning-rate", type=float, default=1e-4, help="learning rate (default 1e-4)")
    t.add_argument("--model-dir", help="the policy to train: a Hugging Face folder, a .gguf file, or embedded[:NAME] "
                   "(e.g. embedded:qwen2.5-coder-0.5b; default: the embedded SmolLM2-135M)")
    t.add_argument("--reward", choices=["verifier", "rlcr"], default="verifier",
                   help="verifier: each row's verifier score; rlcr: the verifier's score minus the Brier term of the "
                        "stated <confidence> (the confidence instruction is appended to every prompt; docs/rlcr.md)")
    t.add_argument("--confidence", choices=["tail", "free"], default="tail",
                   help="rlcr: 'tail' adds the grammar-constrained <confidence> tail when the policy states none "
                        "(as routes do), 'free' leaves it to the policy (default tail)")
    t.add_argument("--confidence-temperature", type=float, metavar="T",
                   help="rlcr tail: sampling temperature of the confidence number alone (default 1.0; a small model "
                        "prompted with one example number rarely samples others: 2.0 explores)")
    t.add_argument("--train", choices=["all", "confidence"], default="all", dest="train_part",
                   help="rlcr with the tail: 'confidence' trains only the stated number, rewarded by its calibration "
                        "part (the answers do not move), 'all' the whole completion with the full reward (default all)")
    t.add_argument("--train-layers", type=int, default=0, metavar="N",
                   help="train only the top N decoder layers and the final norm; the rest stays frozen (default 0: all)")
    t.add_argument("--temperature", type=float, default=1.0, metavar="T",
                   help="sampling temperature of the rollouts' answers (default 1.0)")
    t.add_argument("--watch", metavar="HELDOUT", help="rlcr: a trl-prompts file of held-out rows the overoptimization "
                   "watch scores every --watch-every steps (curves: OUT/watch.png, OUT/watch.json)")
    t.add_argument("--watch-every", type=int, default=10, help="steps between watch evaluations (default 10)")
    t.add_argument("--no-stop-early", action="store_true", help="the watch reports but never stops training")
    t.add_argument("--keep-last", action="store_true",
                   help="save the policy of the last step; by default, with --watch, the policy of the watch "
                        "evaluation with the best held-out RLCR reward is saved (so report on other items)")
    t.add_argument("--checkpoint-every", type=int, default=0, metavar="N",
                   help="keep a checkpoint every N steps (model + optimizer); a later run with the same --out resumes")
    t.add_argument("--env", metavar="ENV", help="train on an environment's episodes instead of --data: search:CORPUS "
                   "(multi-turn search, TRL's environment_factory; docs/environments.md) or strategy")
    t.add_argument("--holdout", type=float, default=0.2, help="--env: share of the questions never trained on "
                   "(a stable hash split; the watch and env_bench score them; default 0.2)")
    t.add_argument("--env-budget", type=int, default=1024, help="--env search: token budget of an episode (default 1024)")
    t.add_argument("--env-max-steps", type=int, default=6, help="--env search: actions per episode (default 6)")
    t.add_argument("--k", type=int, default=3, help="--env search: passages a search shows (default 3)")
    t.add_argument("--warm-start", type=int, default=0, metavar="EPOCHS",
                   help="--env search: first imitate EPOCHS epochs of demonstrations the environment builds from the "
                        "training questions (search with the question, answer with the answer it shows), then GRPO "
                        "from there; saved in OUT/warm-start (default 0: none; a small model writes no tool call "
                        "without it)")
    t.add_argument("--warm-start-lr", type=float, default=3e-5, help="--warm-start: learning rate (default 3e-5)")
    t.add_argument("--suite", action="append", help="--env search:NAME|PATH over a corpus of your own: its questions "
                   "(a suite name or FILE.jsonl; repeatable)")
    t.add_argument("--json", action="store_true", help="print the report as JSON")
    from agentrt.app.commands._strategy import add_arguments as strategy_arguments

    strategy_arguments(t)  # --outcomes, --leave-out, --lambda, ...
    t.set_defaults(func=cmd_train_policy)


def cmd_export(args: argparse.Namespace) -> int:
    from agentrt.trajectory.export import apply_filters, export, read_runs

    read = read_runs(args.trajectories, strict=args.strict)
    records, problems = apply_filters(read.records, args.filter), read.problems
    if args.min_group < 1:
        from agentrt.core.errors import InputError

        raise InputError("--min-group must be >= 1")
    report = export(records, args.format, args.out, min_group=args.min_group,
                    sft_statuses=args.sft_status or ("ok",), min_reward=args.min_reward,
                    include_failed=args.include_failed)
    for line in problems + report.problems:
        print(f"agentrt: warning: {line}", file=sys.stderr)
    if read.quarantined:
        print(f"agentrt: warning: {read.quarantine_summary()}; pass --strict to fail on them", file=sys.stderr)
    if args.check_continuity:
        _report_continuity(records, args.policy)
    print(report.summary())
    return 0


def _report_continuity(records, policy: str | None = None) -> None:
    """Re-tokenize each run with the tokenizer of the model that wrote it (its vocabulary: a Qwen run's ids
    mean nothing to SmolLM2's tokenizer): the embedded model its model calls name, else ``policy`` (default:
    the policy setting). Only the tokenizer is loaded, not the model."""
    from agentrt.core.config import load_settings
    from agentrt.trajectory.export import check_continuity

    settings = load_settings()
    checks: dict[str, tuple] = {}
    bad = 0
    for r in records:
        spec = policy or _recorded_spec(r) or settings.policy
        if spec not in checks:
            checks[spec] = folder_tokenize(spec, settings.models_dir)
        tokenize, eos = checks[spec]
        result = check_continuity(r, tokenize, eos)
        if not result.ok:
            bad += 1
            print(f"agentrt: continuity: run {r.run_id} ({spec}): {result.detail}", file=sys.stderr)
    print(f"token continuity: {len(records) - bad}/{len(records)} runs match their re-tokenized conversation")


def _recorded_spec(record) -> str | None:
    """``hf:embedded:KEY`` when the run's model calls name an embedded model, else None."""
    from agentrt.backends.embedded import MODELS

    names = {step.get("model") for step in record.steps if step.get("kind") == "model_call"}
    return next((f"hf:embedded:{m.key}" for m in MODELS.values() if m.name in names), None)


def folder_tokenize(spec: str, models_dir):
    """A ``tokenize`` for ``check_continuity`` and the end-of-turn ids, from the tokenizer of the local model
    ``spec`` names (``hf:``/``vllm:`` a folder, a .gguf or ``embedded[:NAME]``), rendered as the backend renders."""
    from agentrt.backends import parse_spec
    from agentrt.backends.embedded import resolve
    from agentrt.backends.hf.lean_tok import lean_tokenizer
    from agentrt.core.errors import InputError
    from agentrt.core.types import as_messages

    kind, arg = parse_spec(spec.strip())
    if kind not in ("hf", "vllm"):
        raise InputError(f"--check-continuity re-tokenizes with a local model's tokenizer, and {spec} names none; "
                         "pass --policy hf:FOLDER (or hf:embedded[:NAME])")
    path, _ = resolve(arg, models_dir, kind=kind)
    tokenizer = lean_tokenizer(path)
    if tokenizer is None:
        from transformers import AutoTokenizer

        tokenizer = AutoTokenizer.from_pretrained(path)
    eos = {tokenizer.eos_token_id}
    try:  # the generation config may end a turn on more ids than the tokenizer's eos (HFBackend.eos_ids)
        listed = json.loads((path / "generation_config.json").read_text()).get("eos_token_id")
        eos.update(listed if isinstance(listed, list) else [listed])
    except (OSError, ValueError):
        pass

    def tokenize(messages: list[dict]) -> list[int]:
        chat = [m.to_dict() for m in as_messages(messages)]
        prefill = bool(chat) and chat[-1]["role"] == "assistant"  # rendered as HFBackend.render does
        text = tokenizer.apply_chat_template(chat, tokenize=False, add_generation_prompt=not prefill,
                                             continue_final_message=prefill)
        return list(tokenizer(text, add_special_tokens=False).input_ids)

    return tokenize, {int(i) for i in eos if isinstance(i, int)}


def cmd_train_policy(args: argparse.Namespace) -> int:
    from agentrt.core.config import load_settings
    from agentrt.train.grpo import read_prompt_rows, toy_capital_rows, train_grpo

    out = args.out or str(load_settings(args.config).home / "grpo")
    if args.warm_start and not str(args.env or "").startswith("search:"):
        from agentrt.core.errors import InputError

        raise InputError("--warm-start imitates search demonstrations: use it with --env search:CORPUS")
    if args.env == "strategy":  # the strategy environment: agentrt/app/commands/_strategy.py
        from agentrt.app.commands._strategy import cmd_strategy

        return cmd_strategy(args)
    if args.env:
        from agentrt.app.commands.train_env import train_env

        report, watch = train_env(args, out)
        return _print_report(args, report, watch)
    rows = read_prompt_rows(args.data) if args.data else toy_capital_rows()
    watch = _watch(args, out) if args.watch else None
    report = train_grpo(rows, out, model_dir=args.model_dir, steps=args.steps, num_generations=args.num_generations or 4,
                        batch_size=args.batch_size or 4, max_completion_length=args.max_completion_length or 16,
                        learning_rate=args.learning_rate, reward=args.reward, confidence=args.confidence,
                        callbacks=[watch] if watch else [], save_steps=args.checkpoint_every, resume=args.checkpoint_every > 0,
                        confidence_temperature=args.confidence_temperature, train=args.train_part,
                        train_layers=args.train_layers, temperature=args.temperature)
    return _print_report(args, report, watch)


def _print_report(args: argparse.Namespace, report, watch) -> int:
    log = watch.log if watch else None
    if args.json:
        print(json.dumps({**report.to_dict(), **({"watch_best_step": log.best_step, "watch_restored": log.restored,
                                                   "watch_stopped": log.stopped} if log else {})}))
    else:
        print(f"GRPO: {report.steps} steps in {report.wall_s} s; mean reward per step: "
              f"{', '.join(f'{r:.3f}' for r in report.rewards)}; parameters changed: "
              f"{report.changed_tensors}/{report.total_tensors} tensors (max |delta| {report.max_abs_delta:.2e}); "
              f"policy saved: --policy hf:{report.output_dir}")
        if report.components and args.reward == "rlcr":
            last = report.components[-1]
            print("last step: " + ", ".join(f"{k} {v:.3f}" for k, v in last.items()))
        env = [e for e in report.log if "env/searched_before_answer" in e]
        if env:
            print(f"last step: searched before answering {env[-1]['env/searched_before_answer']:.2f}, "
                  f"answered with the tool {env[-1]['env/answer_tool']:.2f}, steps {env[-1]['env/steps']:.2f}")
        if log:
            print(f"watch: {len(log.entries)} evaluations (OUT/watch.png); saved policy: "
                  f"{log.restored or f'the last step (best held-out value at step {log.best_step})'}")
    return 0


def _watch(args: argparse.Namespace, out: str):
    """The overoptimization watch on the --watch rows (the reference model: the starting policy)."""
    from pathlib import Path

    from agentrt.core.config import load_settings
    from agentrt.core.errors import InputError
    from agentrt.train.grpo import read_prompt_rows, rlcr_rows
    from agentrt.train.watch import HeldOut, make_watch

    if args.reward != "rlcr":
        raise InputError("--watch scores stated confidences: use it with --reward rlcr")
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from agentrt.train.grpo import model_folder

    model_dir = model_folder(args.model_dir, load_settings(args.config).models_dir)
    ref = AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch.float32).requires_grad_(False)
    held = HeldOut(rlcr_rows(read_prompt_rows(args.watch)), AutoTokenizer.from_pretrained(model_dir), reference=ref,
                   max_answer_tokens=args.max_completion_length or 16)
    return make_watch(held, Path(out) / "watch", every=args.watch_every, stop_early=not args.no_stop_early,
                      keep_best=not args.keep_last)
