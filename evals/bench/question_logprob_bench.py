"""Benchmark: does the policy's own log-probability of the question make the learned router transfer?

    .venv/bin/python evals/bench/question_logprob_bench.py A/trajectories B1/trajectories B2/trajectories \
        C/trajectories [--lambda 0.3]

The one signal measured to tell what the embedded model knows from what it does not (mean token log-prob of the
question: easy-dev vs SimpleQA at AUROC 0.82) is computed for every question of the explorations with the
embedded SmolLM2-135M (one forward pass each, ~0.1-0.5 s on these cores) and given to the router as two numeric
features: the mean and the minimum token log-prob. They take the slots of ``past_success`` / ``past_runs``, which
are 0 in every exploration run (no episodic memory), so the router's layout is unchanged. Then, with and without
them, the same routers as ``learn_bench.py``: leave-one-suite-out and 5-fold cross-fit by question, ECE per suite.
Measured 2026-12-02 (docs/routing.md): no suite's left-out ECE came near its floor; the feature is not shipped.
"""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
sys.path.insert(0, str(Path(__file__).resolve().parent))
os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")


def question_logprobs(questions: list[str]) -> dict[str, tuple[float, float]]:
    """(mean, min) token log-prob of each question under the embedded model, raw text after BOS."""
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from agentrt.backends._embedded import embedded_model_path
    from agentrt.core.config import Settings

    torch.set_num_threads(1)
    folder = embedded_model_path(Settings().models_dir)
    tok = AutoTokenizer.from_pretrained(folder)
    model = AutoModelForCausalLM.from_pretrained(folder, dtype=torch.float32).eval()
    out = {}
    with torch.no_grad():
        for q in questions:
            ids = tok(q, return_tensors="pt").input_ids[:, :256]
            ids = torch.cat([torch.tensor([[tok.bos_token_id or 0]]), ids], 1)
            lp = torch.log_softmax(model(ids).logits[0, :-1], -1).gather(1, ids[0, 1:, None])[:, 0]
            out[q] = (float(lp.mean()), float(lp.min()))
    return out


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("trajectories", nargs="+", help="trajectory folders of `agentrt learn` explorations")
    ap.add_argument("--lambda", dest="lam", type=float, default=0.3)
    args = ap.parse_args()

    from rich.console import Console
    from rich.table import Table

    from agentrt.routing.features import NUMERIC_FEATURES
    from agentrt.train.router import train_router
    from agentrt.train.router_eval import config, evaluate
    from learn_bench import crossfit, load_runs, suite_of

    base = load_runs(args.trajectories)
    if any(e.x[NUMERIC_FEATURES.index(k)] for e in base for k in ("past_success", "past_runs")):
        sys.exit("these runs used episodic memory (past_success/past_runs are set): the slots are not free")
    logprob = question_logprobs(sorted({e.question for e in base}))
    with_lp = load_runs(args.trajectories)
    for e in with_lp:
        e.x[NUMERIC_FEATURES.index("past_success")], e.x[NUMERIC_FEATURES.index("past_runs")] = logprob[e.question]
    suites = sorted({suite_of(e) for e in base})
    actions = tuple(sorted({e.action for e in base}))
    cfg = config(args.lam, actions)

    table = Table(title="ECE per suite (noise floor): without / with the question's log-prob features")
    for col in ("suite", "runs", "left out: without", "left out: with", "cross-fit: without", "cross-fit: with",
                "cross-fit value: without / with"):
        table.add_column(col)
    scored = {}
    for name, rows in (("without", base), ("with", with_lp)):
        fold = crossfit(rows, 5, args.lam, 5)
        cross = lambda e, fold=fold: fold[id(e)].predict(e.x)  # noqa: E731
        for s in suites:
            held = [e for e in rows if suite_of(e) == s]
            model = train_router([], lam=args.lam, examples=[e for e in rows if suite_of(e) != s])
            left = lambda e, model=model: model.predict(e.x)  # noqa: E731
            scored[(name, s)] = (evaluate("left", left, left, held, cfg), evaluate("cross", cross, cross, held, cfg))
        scored[(name, "all")] = (None, evaluate("cross", cross, cross, rows, cfg))
    f = lambda p: "-" if p is None or p.ece is None else f"{p.ece:.3f} ({p.ece_floor:.3f})"  # noqa: E731
    for s in [*suites, "all"]:
        (lo0, cf0), (lo1, cf1) = scored[("without", s)], scored[("with", s)]
        table.add_row(s, str(len(cf0.terms)), f(lo0), f(lo1), f(cf0), f(cf1), f"{cf0.value:+.3f} / {cf1.value:+.3f}")
    Console(width=200).print(table)


if __name__ == "__main__":
    main()
