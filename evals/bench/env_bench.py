"""Environments bench (issue 36): what training on an environment changed, on held-out questions.

    python -m evals.bench.env_bench --part search --trained OUT [--corpus squad] [-n 33]

``search``: greedy episodes (``agentrt.envs.trl.play``: the policy writes, its tool calls run on the index, a reply
without a tool call is its answer) on the held-out side of ``agentrt train-policy --env search:CORPUS``'s split
(the same ``--holdout`` hash rule: questions training never saw), for the base policy and the trained one
(``--trained``, the ``--out`` of ``train-policy``), and, when ``train-policy --warm-start`` wrote one, the
warm-start policy alone (what imitation did before GRPO). Printed: accuracy (the verifier's verdict), the share of
episodes that searched before answering, the mean reward and tool calls per episode, each with a 95% bootstrap
interval over questions, and the trained - base difference with a paired interval. The acceptance bar (issue 36):
accuracy >= base + 5 points, or searched-before-answering up >= 20 points with accuracy not lower.

``strategy``: the self-routing policy beside the learned router, in distribution and leave-one-suite-out
(``evals/bench/env_strategy.py``: its flags and method). Results are kept in
``$AGENTRT_HOME/bench/env_bench.json`` (a part not run keeps its last figures).
"""

from __future__ import annotations

import argparse
import json
import random
import sys
import time
from typing import Any

from evals.bench.common import parser, results_file, show, table
from agentrt.core.config import Settings

PARTS = ("search", "strategy")


def _interval(values: list[float], rounds: int = 1000, seed: int = 0) -> tuple[float, float]:
    from agentrt.train.router_eval import bootstrap  # one question, one term: resample questions

    return bootstrap(values, [str(i) for i in range(len(values))], rounds=rounds, seed=seed)


def _policy(path: str | None, settings: Settings) -> tuple[Any, Any]:
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from agentrt.envs.trl import use_tool_template

    if path is None:
        from agentrt.backends.embedded import embedded_model_path

        path = str(embedded_model_path(settings.models_dir))
    torch.set_num_threads(settings.torch_threads)
    model = AutoModelForCausalLM.from_pretrained(path, dtype=torch.float32).eval()
    tokenizer = AutoTokenizer.from_pretrained(path)
    use_tool_template(tokenizer)
    return model, tokenizer


def run_search(args: argparse.Namespace) -> dict[str, Any]:
    """Base vs trained on the held-out questions of ``search:CORPUS``; the table's figures."""
    from agentrt.app.commands.train_env import search_questions
    from agentrt.core.config import load_settings
    from agentrt.envs.trl import SearchTools, play, rows_for, split_questions

    settings = load_settings()
    ns = argparse.Namespace(holdout=args.holdout, env_max_steps=args.max_turns, env_budget=args.budget, k=args.k)
    questions, make_episode = search_questions(args.corpus, ns, settings)
    _, held = split_questions(questions, args.holdout)
    held = held[: args.n] if args.n else held
    table_ = {q.id: q for q in held}
    rows = rows_for(held)
    per: dict[str, list[Any]] = {}
    for name, path in _policies(args):
        model, tokenizer = _policy(path, settings)
        started = time.perf_counter()
        envs = [SearchTools(table_, make_episode) for _ in rows]
        per[name] = play(model, tokenizer, envs, rows, max_new_tokens=args.max_new_tokens, max_turns=args.max_turns)
        print(f"env_bench: {name}: {len(rows)} episodes in {time.perf_counter() - started:.0f} s", file=sys.stderr)
    out: dict[str, Any] = {"corpus": args.corpus, "n": len(rows), "holdout": args.holdout, "trained": args.trained,
                           "policies": {}, "difference": {}}
    metrics = {"accuracy": lambda p: float(p.correct), "searched_before_answer": lambda p: float(p.searched),
               "reward": lambda p: p.reward, "tool_calls": lambda p: float(p.tool_calls)}
    for name, played in per.items():
        out["policies"][name] = {m: _summary([f(p) for p in played]) for m, f in metrics.items()}
        out["policies"][name]["answers"] = [p.answer for p in played[:5]]
    for m, f in metrics.items():
        out["difference"][m] = _summary([f(t) - f(b) for b, t in zip(per["base"], per["trained"])])
    if "warm start only" in per:  # what GRPO did after the imitation
        out["grpo_difference"] = {m: _summary([f(t) - f(w) for w, t in zip(per["warm start only"], per["trained"])])
                                  for m, f in metrics.items()}
    acc, searched = out["difference"]["accuracy"]["mean"], out["difference"]["searched_before_answer"]["mean"]
    out["acceptance"] = bool(acc >= 0.05 or (searched >= 0.20 and acc >= 0.0))
    return out


def _policies(args: argparse.Namespace) -> list[tuple[str, str | None]]:
    """base, the warm start alone when there is one (``--warm-start``, default TRAINED/warm-start), trained."""
    from pathlib import Path

    warm = args.warm_start or str(Path(args.trained) / "warm-start")
    middle = [("warm start only", warm)] if (Path(warm) / "config.json").is_file() else []
    return [("base", args.base), *middle, ("trained", args.trained)]


def _summary(values: list[float]) -> dict[str, Any]:
    lo, hi = _interval(values) if values else (0.0, 0.0)
    return {"mean": sum(values) / max(1, len(values)), "ci95": [round(lo, 4), round(hi, 4)]}


def _fmt(s: dict[str, Any]) -> str:
    return f"{s['mean']:.3f} [{s['ci95'][0]:.3f}, {s['ci95'][1]:.3f}]"


def print_search(res: dict[str, Any]) -> None:
    cols = ("policy", "accuracy", "searched before answering", "reward", "tool calls / episode")
    rows = [(name, *(_fmt(p[m]) for m in ("accuracy", "searched_before_answer", "reward", "tool_calls")))
            for name, p in res["policies"].items()]
    d = res["difference"]
    names = ("accuracy", "searched_before_answer", "reward", "tool_calls")
    rows.append(("trained - base", *(_fmt(d[m]) for m in names)))
    if "grpo_difference" in res:
        rows.append(("trained - warm start", *(_fmt(res["grpo_difference"][m]) for m in names)))
    show(table(f"search:{res['corpus']}: {res['n']} held-out questions (95% bootstrap intervals); acceptance "
               f"{'met' if res['acceptance'] else 'not met'}", cols, rows), width=160)


def main(argv: list[str] | None = None) -> int:
    ap = parser(__doc__)
    ap.add_argument("--part", choices=(*PARTS, "all"), default="all", help="which section to run (default all)")
    ap.add_argument("--corpus", default="squad", help="search: the corpus the policy was trained on (default squad)")
    ap.add_argument("--trained", help="search: the trained policy folder (train-policy --out)")
    ap.add_argument("--base", help="search: the base policy folder (default: the embedded SmolLM2-135M)")
    ap.add_argument("--warm-start", help="search: the warm-start policy, shown between base and trained (default: "
                    "TRAINED/warm-start when train-policy --warm-start wrote one)")
    ap.add_argument("-n", type=int, default=0, help="search: first N held-out questions (default: all of them)")
    ap.add_argument("--holdout", type=float, default=0.2, help="the held-out share train-policy used (default 0.2)")
    ap.add_argument("--max-turns", type=int, default=6, help="search: actions per episode (default 6)")
    ap.add_argument("--max-new-tokens", type=int, default=64, help="search: tokens per policy turn (default 64)")
    ap.add_argument("--budget", type=int, default=1024, help="search: token budget of an episode (default 1024)")
    ap.add_argument("--k", type=int, default=3, help="search: passages a search shows (default 3)")
    ap.add_argument("--seed", type=int, default=0)
    from evals.bench.env_strategy import add_arguments as strategy_arguments

    strategy_arguments(ap)
    args = ap.parse_args(argv)
    random.seed(args.seed)
    path, results = results_file("env_bench")
    if args.part in ("search", "all"):
        if not args.trained:
            ap.error("--part search needs --trained OUT (agentrt train-policy --grpo --env search:CORPUS --out OUT)")
        results["search"] = run_search(args)
        print_search(results["search"])
    if args.part in ("strategy", "all"):  # evals/bench/env_strategy.py
        from evals.bench.env_strategy import run as run_strategy

        if not args.trajectories:
            ap.error("--part strategy needs --trajectories DIR... (exploration runs: agentrt learn --explore-only)")
        results["strategy"] = run_strategy(args)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(results, indent=1))
    print(f"results: {path}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
