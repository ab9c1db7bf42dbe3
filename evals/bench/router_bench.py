"""Benchmark: every router's accuracy, tokens and calibration on a mixed dev suite (issue 7).

    .venv/bin/python evals/bench/router_bench.py [--per-suite 100] [--actions direct,reason] [--folds 2] [--out DIR]

1. Collect: every fixed action on every question, with the embedded model, resumably: each finished
   (question, action) is appended to DIR/runs.jsonl and never redone (a killed run resumes).
   The rewarded trajectories (reward = verifier score) are appended to DIR/rewarded.jsonl.
2. K-fold cross-fitting (default 2: train / held-out halves, then swapped): the learned router of each fold
   is fit on the other folds' rewarded runs, so every question is scored by a router that never saw it.
3. Evaluate on all questions: fixed actions, rules, cascade, learned and the oracle, counterfactually
   from the exhaustive cache (each router's chosen action is looked up, so every router sees the same runs).
Prints one table: accuracy, tokens per item, ECE of p_success, decision overhead p50.
Acceptance (issue 7): learned >= best fixed accuracy with <= 60% of its tokens; ECE <= 0.05; overhead p50 <= 5 ms.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import random
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from rich.console import Console  # noqa: E402
from rich.progress import Progress  # noqa: E402
from rich.table import Table  # noqa: E402

SUITES = ("gsm8k", "simpleqa", "ifeval", "hotpotqa")


def load_items(per_suite: int, seed: int) -> list:
    from evals.suites import load_suite

    items = []
    for name in SUITES:
        suite = load_suite(name)
        chosen = suite.items[:per_suite]
        for it in chosen:
            it.id = f"{name}/{it.id}"
        items += chosen
    random.Random(seed).shuffle(items)
    return items


async def collect(items, actions, out: Path, budget: int, workers: int) -> dict:
    from agentrt import Agent
    from agentrt.trajectory import find_record
    from evals.verifiers import score_item

    runs_path, rewarded_path = out / "runs.jsonl", out / "rewarded.jsonl"
    done = {}
    if runs_path.exists():
        for line in runs_path.read_text().splitlines():
            if line.strip():
                r = json.loads(line)
                done[(r["id"], r["action"])] = r
    todo = [(it, a) for it in items for a in actions if (it.id, a) not in done]
    agent = Agent(home=out / "home")
    sem = asyncio.Semaphore(workers)

    async def one(item, action, progress, task):
        async with sem:
            res = await agent.arun(item.question, budget=budget, route=action)
        scored = score_item(item, res.answer, res.route)
        rec = find_record(agent.writer.path, res.trajectory_id)
        answer_lp = [s for s in rec.steps if s.get("kind") == "model_call" and s.get("name") == "answer"]
        lps = (answer_lp[-1]["completion_logprobs"][0] or []) if answer_lp else []
        row = {"id": item.id, "action": action, "question": item.question, "answer": res.answer,
               "score": scored.score, "correct": scored.correct, "tokens": res.usage.total_tokens,
               "confidence": sum(lps) / len(lps) if lps else None}
        rewarded = rec.model_copy(update={"reward": max(0.0, scored.score)})
        with open(rewarded_path, "a") as f:
            f.write(rewarded.model_dump_json() + "\n")
        with open(runs_path, "a") as f:
            f.write(json.dumps(row) + "\n")
        done[(item.id, action)] = row
        progress.advance(task)

    with Progress() as progress:
        task = progress.add_task(f"collecting {len(todo)} runs", total=len(todo))
        await asyncio.gather(*(one(it, a, progress, task) for it, a in todo))
    return done


def _train_fold(items, train_ids: set, out: Path, lam: float, fold: int):
    """The learned router fit on the rewarded runs of ``train_ids`` only."""
    from agentrt.routing.train import train_router

    train_q = {it.question for it in items if it.id in train_ids}
    lines = [ln for ln in (out / "rewarded.jsonl").read_text().splitlines()
             if ln.strip() and json.loads(ln)["question"] in train_q]
    train_file = out / f"rewarded-train-fold{fold}.jsonl"
    train_file.write_text("\n".join(lines) + "\n")
    model = train_router([train_file], lam=lam)
    model.save(out / f"router-fold{fold}.json")
    return model


def evaluate(items, actions, runs, out: Path, budget: int, lam: float, folds: int) -> tuple[list[tuple], int, list]:
    """K-fold cross-fitting: every question is scored by a learned router that never saw it, and the
    held-out predictions of all folds are pooled (one random split's base rate would sway ECE)."""
    from agentrt.config import Settings
    from agentrt.routing import extract, make_router
    from agentrt.routing.train import calibration

    questions = sorted({it.id for it in items})
    random.Random(1).shuffle(questions)
    fold_of = {q: i % folds for i, q in enumerate(questions)}
    settings = Settings(home=out / "home", router_lambda=lam)
    per_fold = {}
    for k in range(folds):
        model = _train_fold(items, {q for q in questions if fold_of[q] != k}, out, lam, k)
        per_fold[k] = (make_router(f"learned:{out / f'router-fold{k}.json'}", settings), model.metrics)
    routers = {f"fixed:{a}": make_router(f"fixed:{a}", settings) for a in actions}
    routers["rules"] = make_router("rules", settings)
    routers["cascade"] = make_router("cascade", settings)
    routers["learned"] = None  # the fold's own router, below
    rows = []
    for name, router in routers.items():
        correct, tokens, probs, outcomes, overhead = [], [], [], [], []
        for it in items:
            r = router if router is not None else per_fold[fold_of[it.id]][0]
            t = time.perf_counter()
            d = asyncio.run(r.decide(it.question, extract(it.question), budget))
            overhead.append((time.perf_counter() - t) * 1000)
            action = d.action if d.action in actions else None
            if action is None:  # ask / abstain: no answer to score on these suites
                correct.append(0.0)
                tokens.append(0 if d.action == "abstain" else 60)
                continue
            run = runs[(it.id, action)]
            spent = run["tokens"]
            if name == "cascade":
                for stronger in d.escalation:
                    if stronger not in actions or run["confidence"] is None or run["confidence"] >= settings.cascade_threshold:
                        break
                    run = runs[(it.id, stronger)]
                    spent += run["tokens"]
            correct.append(float(run["correct"]))
            tokens.append(spent)
            if d.p_success.get(action) is not None:
                probs.append(d.p_success[action])
                outcomes.append(float(run["correct"]))
        cal = calibration(probs, outcomes) if probs else {"ece": None}
        rows.append((name, statistics.mean(correct), statistics.mean(tokens), cal["ece"], statistics.median(overhead)))
    oracle_c, oracle_t = [], []
    for it in items:
        best = max(actions, key=lambda a: (runs[(it.id, a)]["correct"], -runs[(it.id, a)]["tokens"]))
        oracle_c.append(float(runs[(it.id, best)]["correct"]))
        oracle_t.append(runs[(it.id, best)]["tokens"])
    rows.append(("oracle", statistics.mean(oracle_c), statistics.mean(oracle_t), None, 0.0))
    return rows, len(items), [m for _, m in per_fold.values()]


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--per-suite", type=int, default=100)
    ap.add_argument("--actions", default="direct,reason")
    ap.add_argument("--budget", type=int, default=1024)
    ap.add_argument("--lambda", dest="lam", type=float, default=0.3)
    ap.add_argument("--workers", type=int, default=8)
    ap.add_argument("--folds", type=int, default=2, help="cross-fitting folds for the learned router")
    ap.add_argument("--out", default=str(Path.home() / ".cache" / "agentrt" / "bench" / "router"))
    args = ap.parse_args()
    import os

    from agentrt.config import default_home

    os.environ.setdefault("AGENTRT_MODELS_DIR", str(default_home() / "models"))  # reuse the converted model
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    actions = args.actions.split(",")
    items = load_items(args.per_suite, seed=0)
    runs = asyncio.run(collect(items, actions, out, args.budget, args.workers))
    rows, n_held, metrics = evaluate(items, actions, runs, out, args.budget, args.lam, args.folds)
    table = Table(title=f"routers on {n_held} questions ({', '.join(SUITES)}), each held out from the learned "
                        f"router that scores it ({args.folds}-fold), budget {args.budget}, lambda {args.lam}")
    for col in ("router", "accuracy", "tokens / item", "ECE", "decision p50 ms"):
        table.add_column(col)
    for name, acc, tok, ece, ms in rows:
        table.add_row(name, f"{acc:.3f}", f"{tok:.0f}", "-" if ece is None else f"{ece:.3f}", f"{ms:.2f}")
    Console().print(table)
    for k, m in enumerate(metrics):
        print(f"fold {k} training report: {json.dumps({key: v for key, v in m.items() if key != 'reliability'})}")


if __name__ == "__main__":
    main()
