"""Benchmark: every router's accuracy, tokens and calibration on a mixed dev suite (issue 7).

    .venv/bin/python -m evals.bench.router_bench [--per-suite 200,hotpotqa=500] [--actions direct,reason,plan] [--folds 2]
        [--budget 4096] [--pool 500] [--lambda 0.3,0.1,0.05] [--split-seeds 1,2,3,4,5] [--skip-self] [--out DIR]

1. Collect: every action on every question with the embedded model, resumably: each finished
   (question, action) is appended to DIR/runs.jsonl and never redone (a killed run resumes); the rewarded
   trajectories (reward = verifier score, verdict = pass/fail) go to DIR/rewarded.jsonl. The private index
   is the pooled paragraphs of the first --pool HotpotQA dev questions, so plan runs on HotpotQA only;
   elsewhere no router may choose plan, and fixed:plan answers with direct. A plan run records its --pool,
   and only runs over the same index are reused.
2. K-fold cross-fitting (default 2: train / held-out halves, then swapped): the learned router of each fold
   is fit on the other folds' rewarded runs, so every question is scored by a router that never saw it.
   The split is repeated with each --split-seeds seed.
3. Evaluate on all questions: fixed actions, rules, cascade, self, learned (at each lambda) and the oracle,
   counterfactually from the exhaustive cache (each router's chosen action is looked up, so every router
   sees the same runs). The self router's label scoring is run once per question (a model call) and cached.
Prints: accuracy, tokens per item, ECE of p_success (against the verifier's pass/fail verdict) and decision
p50 per router; where the learned router's accuracy comes from, per suite; the learned router on every split.
Acceptance (issue 7): learned >= best fixed accuracy with <= 60% of its tokens; ECE <= 0.05; overhead p50 <= 5 ms.
"""

from __future__ import annotations

import asyncio
import json
import random
import statistics
import time
from pathlib import Path


from rich.console import Console
from rich.progress import Progress
from rich.table import Table

from evals.bench.common import DEFAULT_HOME, parser, read_jsonl

SUITES = ("gsm8k", "simpleqa", "ifeval", "hotpotqa")


def suite_sizes(spec: str) -> dict[str, int]:
    """``"200"`` -> 200 questions from every suite; ``"200,hotpotqa=500"`` -> 500 from HotpotQA."""
    sizes: dict[str, int] = {}
    try:
        for part in spec.split(","):
            name, _, n = part.rpartition("=")
            for suite in [name] if name else SUITES:
                if suite not in SUITES:
                    raise SystemExit(f"--per-suite: unknown suite {suite!r}; the suites are {', '.join(SUITES)}")
                sizes[suite] = int(n)
    except ValueError:
        raise SystemExit(f"--per-suite: {spec!r} is not N or N,suite=N (e.g. 200,hotpotqa=500)") from None
    missing = [s for s in SUITES if s not in sizes]
    if missing:
        raise SystemExit(f"--per-suite: no size for {', '.join(missing)}; start with a default N (e.g. 200,hotpotqa=500)")
    return sizes


def load_items(sizes: dict[str, int], seed: int) -> list:
    from evals.suites import load_suite

    items = []
    for name in SUITES:
        suite = load_suite(name)
        chosen = suite.items[: sizes[name]]
        for it in chosen:
            it.id = f"{name}/{it.id}"
        items += chosen
    random.Random(seed).shuffle(items)
    return items


CORPUS_SUITES = ("hotpotqa",)  # the suites whose questions the private index covers: plan runs only there


def plan_agent(out: Path, pool: int):
    """An agent whose private index is the pooled HotpotQA paragraphs (the plan route searches it)."""
    from agentrt import Agent
    from agentrt.core.config import load_settings
    from evals.bench.plan_bench import hotpot_corpus

    home = out / "plan-home"
    corpus = hotpot_corpus(home, pool)
    return Agent(load_settings(home=home, corpus=corpus.name))


def covered(item) -> bool:
    """Does the private index cover this question?"""
    return item.id.split("/")[0] in CORPUS_SUITES


def available(item, actions) -> list[str]:
    """The actions a question can take: plan needs a private index that covers it."""
    return [a for a in actions if a != "plan" or covered(item)]


def utility_config(lam: float, on_index: bool):
    """The routers' choice set on (all five actions) and off (no plan) the private index."""
    from agentrt.router import ACTIONS, UtilityConfig

    return UtilityConfig(lam=lam, actions=tuple(a for a in ACTIONS if on_index or a != "plan"))


async def collect(items, actions, out: Path, budget: int, workers: int, pool: int) -> dict:
    from agentrt import Agent
    from agentrt.trajectory import RewardBreakdown, find_record
    from evals.verifiers import score_item

    runs_path, rewarded_path = out / "runs.jsonl", out / "rewarded.jsonl"
    done = {}
    for r in read_jsonl(runs_path):
        if "run_id" not in r:
            raise SystemExit(f"{runs_path} predates run ids; delete {out} or pass another --out")
        if r["action"] == "plan" and r.get("pool") != pool:
            continue  # searched another index: run it again over this one
        done[(r["id"], r["action"])] = r
    asked = sum(covered(it) for it in items)  # the suite's questions are the first dev questions, in order
    if "plan" in actions and pool < asked:
        raise SystemExit(f"--pool {pool} leaves some of the {asked} HotpotQA questions out of the index; "
                         f"pass --pool {asked} or more")
    todo = [(it, a) for it in items for a in available(it, actions) if (it.id, a) not in done]
    agent = Agent(home=out / "home")
    planner = plan_agent(out, pool) if any(a == "plan" for _, a in todo) else None
    sem = asyncio.Semaphore(workers)

    async def one(item, action, progress, task):
        runner = planner if action == "plan" else agent
        async with sem:
            res = await runner.arun(item.question, budget=budget, route=action)
        scored = score_item(item, res.answer, res.route)
        rec = find_record(runner.writer.path, res.trajectory_id)
        answer_lp = [s for s in rec.steps if s.get("kind") == "model_call" and s.get("name") in ("answer", "synthesize")]
        lps = (answer_lp[-1]["completion_logprobs"][0] or []) if answer_lp else []
        row = {"id": item.id, "run_id": rec.run_id, "action": action, "question": item.question, "answer": res.answer,
               "score": scored.score, "correct": scored.correct, "tokens": res.usage.total_tokens,
               "budget": budget, "confidence": sum(lps) / len(lps) if lps else None}
        if action == "plan":
            row["pool"] = pool
        verdict = RewardBreakdown(score=scored.score, correct=scored.correct, verifier=item.verifier)
        rewarded = rec.model_copy(update={"reward": max(0.0, scored.score), "rewards": {"eval": verdict}})
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


def training_records(items, actions, runs: dict, out: Path, budget: int) -> list[tuple[str, str]]:
    """(question id, JSON line) of the rewarded trajectories of the runs in use, ready to train on, in the
    cache's order (read once: every fold of every split picks its questions from them)."""
    id_of = {it.question: it.id for it in items}
    in_use = {r["run_id"] for r in runs.values()}  # e.g. not the plan runs over another index
    records = []
    for ln in (out / "rewarded.jsonl").read_text().splitlines():
        rec = json.loads(ln) if ln.strip() else None
        if rec is None or rec["question"] not in id_of or rec["route"] not in actions or rec["run_id"] not in in_use:
            continue
        if "eval" not in rec.get("rewards", {}):  # cached before verdicts were recorded: add it from runs.jsonl
            run = runs[(id_of[rec["question"]], rec["route"])]
            rec["rewards"] = {"eval": {"score": run["score"], "correct": bool(run["correct"])}}
        # direct / reason runs cached at budget 1024 spend the same at the decision budget (their caps bind
        # first), so every run is priced against the one budget the routers decide with
        rec["budget"]["total"] = budget
        records.append((id_of[rec["question"]], json.dumps(rec)))
    return records


def _train_fold(records: list[tuple[str, str]], train_ids: set, out: Path, lam: float, fold: int):
    """The learned router fit on the rewarded runs of ``train_ids`` only."""
    from agentrt.train.router import train_router

    train_file = out / f"rewarded-train-fold{fold}.jsonl"
    train_file.write_text("".join(line + "\n" for q, line in records if q in train_ids))
    model = train_router([train_file], lam=lam)
    model.save(out / f"router-fold{fold}.json")
    return model


class Replay:
    """Replays decisions made before: the self router's cost model calls and do not depend on the split."""

    name = "self"

    def __init__(self, decisions: dict) -> None:
        self.decisions = decisions  # question -> (RouteDecision, ms, tokens its scoring cost)

    async def decide(self, question: str, features: dict, budget: int):
        return self.decisions[question][0]


async def self_decisions(items, out: Path, budget: int, lam: float) -> dict:
    """The self router on every question (the policy scores the action labels), one at a time so that
    its decision time is one model call's, not a queue's. Cached resumably like the runs."""
    from agentrt import Agent
    from agentrt.core.config import Settings
    from agentrt.router import RouteDecision, extract, make_router

    cache = out / f"self-lambda{lam}-budget{budget}.jsonl"
    decisions = {}
    for r in read_jsonl(cache):
        cost = r.get("cost_tokens", r["decision"].get("cost_tokens", 0))
        decisions[(r["question"], r["on_index"])] = (RouteDecision.model_validate(r["decision"]), r["ms"], cost)
    todo = [it for it in items if (it.question, covered(it)) not in decisions]
    if todo:
        policy = Agent(home=out / "home").policy
        settings = Settings(home=out / "home", router_lambda=lam)
        cost = {"tokens": 0}

        async def scorer(_name, messages, continuations):  # what RunContext.score does in a run, minus the record
            scores, cost["tokens"] = await policy.score(messages, continuations)
            return scores

        routers = {on: make_router("self", settings, policy=policy, scorer=scorer, cfg=utility_config(lam, on))
                   for on in (True, False)}
        with Progress() as progress, open(cache, "a") as f:
            task = progress.add_task("self router: scoring the action labels", total=len(todo))
            for it in todo:
                t = time.perf_counter()
                d = await routers[covered(it)].decide(it.question, extract(it.question), budget)
                ms = (time.perf_counter() - t) * 1000
                decisions[(it.question, covered(it))] = (d, ms, cost["tokens"])
                f.write(json.dumps({"question": it.question, "on_index": covered(it), "ms": ms,
                                    "cost_tokens": cost["tokens"], "decision": d.model_dump()}) + "\n")
                f.flush()
                progress.advance(task)
    return {it.question: decisions[(it.question, covered(it))] for it in items}


def evaluate(items, actions, runs, records: list[tuple[str, str]], out: Path, budget: int, lams: list[float],
             folds: int, seed: int = 1, self_made: dict | None = None) -> tuple[list[tuple], dict, list]:
    """K-fold cross-fitting: every question is scored by a learned router that never saw it, and the
    held-out predictions of all folds are pooled (one random split's base rate would sway ECE).
    The learned router is scored at each lambda in ``lams`` (the first one is also the other routers').
    Off the private index (every suite but HotpotQA) routers choose without plan, and fixed:plan answers
    with direct: a plan needs passages to search."""
    from agentrt.core.config import Settings
    from agentrt.router import extract, make_router
    from agentrt.train.router import calibration

    questions = sorted({it.id for it in items})
    random.Random(seed).shuffle(questions)
    fold_of = {q: i % folds for i, q in enumerate(questions)}
    settings = {lam: Settings(home=out / "home", router_lambda=lam) for lam in lams}

    def build(spec: str, lam: float) -> dict[bool, object]:
        """The router for questions on (True) and off (False) the private index."""
        return {on: make_router(spec, settings[lam], cfg=utility_config(lam, on)) for on in (True, False)}

    per_fold, metrics = {}, []
    for k in range(folds):
        model = _train_fold(records, {q for q in questions if fold_of[q] != k}, out, lams[0], k)
        metrics.append(model.metrics)
        for lam in lams:
            per_fold[(k, lam)] = build(f"learned:{out / f'router-fold{k}.json'}", lam)
    routers = {f"fixed:{a}": build(f"fixed:{a}", lams[0]) for a in actions}
    routers["rules"] = build("rules", lams[0])
    routers["cascade"] = build("cascade", lams[0])
    if self_made:
        routers["self"] = {True: Replay(self_made), False: Replay(self_made)}
    for lam in lams:
        routers[f"learned (lambda {lam})"] = lam  # the fold's own router, below
    rows, picks = [], {}
    for name, router in routers.items():
        correct, tokens, probs, outcomes, overhead = [], [], [], [], []
        for it in items:
            acts = available(it, actions)
            r = (per_fold[(fold_of[it.id], router)] if isinstance(router, float) else router)[covered(it)]
            t = time.perf_counter()
            d = asyncio.run(r.decide(it.question, extract(it.question), budget))
            overhead.append(r.decisions[it.question][1] if isinstance(r, Replay) else (time.perf_counter() - t) * 1000)
            spent = r.decisions[it.question][2] if isinstance(r, Replay) else 0  # the self router's scoring
            action = d.action if d.action in acts else "direct" if d.action in actions else None
            picks[(name, it.id)] = (action or d.action, d.p_success.get(action or d.action))
            if action is None:  # ask / abstain: no answer to score on these suites
                correct.append(0.0)
                tokens.append(spent + (0 if d.action == "abstain" else 60))
                continue
            run = runs[(it.id, action)]
            spent += run["tokens"]
            if name == "cascade":
                for stronger in d.escalation:
                    if stronger not in acts or run["confidence"] is None or run["confidence"] >= settings[lams[0]].cascade_threshold:
                        break
                    run = runs[(it.id, stronger)]
                    spent += run["tokens"]
            correct.append(float(run["correct"]))
            tokens.append(spent)
            if d.action == action and d.p_success.get(action) is not None:
                probs.append(d.p_success[action])
                outcomes.append(float(run["correct"]))
        cal = calibration(probs, outcomes) if probs else {"ece": None}
        rows.append((name, statistics.mean(correct), statistics.mean(tokens), cal["ece"], statistics.median(overhead)))
    oracle_c, oracle_t = [], []
    for it in items:
        best = max(available(it, actions), key=lambda a: (runs[(it.id, a)]["correct"], -runs[(it.id, a)]["tokens"]))
        oracle_c.append(float(runs[(it.id, best)]["correct"]))
        oracle_t.append(runs[(it.id, best)]["tokens"])
    rows.append(("oracle", statistics.mean(oracle_c), statistics.mean(oracle_t), None, 0.0))
    return rows, picks, metrics


def per_suite_table(items, actions, runs, picks: dict, router: str) -> Table:
    """Where the learned router's accuracy comes from: per suite, each fixed action's accuracy, the
    router's picks, its accuracy, and its mean p_success next to the observed success rate."""
    table = Table(title=f"per suite: {router}")
    for col in ("suite", "n", *(f"fixed:{a}" for a in actions), "picks", "accuracy", "tokens", "mean p_success",
                "observed"):
        table.add_column(col)

    def fixed(mine, a) -> str:
        if any((it.id, a) not in runs for it in mine):
            return "-"  # not available here (plan off the private index)
        return f"{statistics.mean(float(runs[(it.id, a)]['correct']) for it in mine):.3f}"

    for suite in SUITES:
        mine = [it for it in items if it.id.startswith(suite + "/")]
        chosen = [picks[(router, it.id)] for it in mine]
        hits = [float(runs[(it.id, a)]["correct"]) if a in actions else 0.0 for it, (a, _) in zip(mine, chosen)]
        spent = [runs[(it.id, a)]["tokens"] if a in actions else 0 for it, (a, _) in zip(mine, chosen)]
        scored = [(p, h) for (_, p), h in zip(chosen, hits) if p is not None]
        counts = {a: sum(1 for c, _ in chosen if c == a) for a in sorted({c for c, _ in chosen})}
        table.add_row(suite, str(len(mine)), *(fixed(mine, a) for a in actions),
                      " ".join(f"{a} {n}" for a, n in counts.items()), f"{statistics.mean(hits):.3f}",
                      f"{statistics.mean(spent):.0f}",
                      f"{statistics.mean(p for p, _ in scored):.3f}" if scored else "-",
                      f"{statistics.mean(h for _, h in scored):.3f}" if scored else "-")
    return table


def splits_table(results: dict[int, list[tuple]], actions, n: int) -> Table:
    """The learned router against the best fixed action on every random half-split (the split alone moves
    the learned router by a few questions, so one split's figure is not the whole story)."""
    table = Table(title=f"the learned router on {len(results)} random splits (questions correct of {n}, "
                        "tokens per item as % of the best fixed action's, ECE)")
    learned = [r[0] for r in next(iter(results.values())) if r[0].startswith("learned")]
    for seed, rows in results.items():
        by_name = {r[0]: r for r in rows}
        fixed = max((by_name[f"fixed:{a}"] for a in actions), key=lambda r: (r[1], -r[2]))
        if not table.columns:
            for col in ("split seed", f"best fixed ({fixed[0]})", *learned):
                table.add_column(col)
        cells = [f"{round(r[1] * n)}  {100 * r[2] / fixed[2]:.0f}%  {r[3]:.3f}" for r in rows if r[0] in learned]
        table.add_row(str(seed), f"{round(fixed[1] * n)}", *cells)
    return table


def main() -> None:
    ap = parser(__doc__)
    ap.add_argument("--per-suite", default="200,hotpotqa=500",
                    help="questions per suite: N, or N,suite=N to size one suite apart (e.g. 200,hotpotqa=500)")
    ap.add_argument("--actions", default="direct,reason,plan")
    ap.add_argument("--budget", type=int, default=4096, help="every run's and every decision's token budget")
    ap.add_argument("--pool", type=int, default=500,
                    help="the private index: the pooled paragraphs of the first N HotpotQA dev questions")
    ap.add_argument("--lambda", dest="lams", default="0.3,0.1,0.05",
                    help="token prices to score the learned router at, comma-separated; the first is the headline "
                         "and the other routers' price")
    ap.add_argument("--workers", type=int, default=8)
    ap.add_argument("--folds", type=int, default=2, help="cross-fitting folds for the learned router")
    ap.add_argument("--skip-self", action="store_true", help="leave out the self router (it scores every question with the model)")
    ap.add_argument("--split-seeds", default="1,2,3,4,5",
                    help="seeds of the question-to-fold assignment, comma-separated; the first gets the full tables")
    ap.add_argument("--out", default=str(DEFAULT_HOME / "bench" / "router"))
    args = ap.parse_args()
    import os

    from agentrt.core.config import default_home

    os.environ.setdefault("AGENTRT_MODELS_DIR", str(default_home() / "models"))  # reuse the converted model
    os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")  # small solves; see agentrt/app/commands/route.py
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    actions = args.actions.split(",")
    lams = [float(x) for x in args.lams.split(",")]
    items = load_items(suite_sizes(args.per_suite), seed=0)
    runs = asyncio.run(collect(items, actions, out, args.budget, args.workers, args.pool))
    records = training_records(items, actions, runs, out, args.budget)
    seeds = [int(x) for x in args.split_seeds.split(",")]
    self_made = None if args.skip_self else asyncio.run(self_decisions(items, out, args.budget, lams[0]))
    results = {}
    for seed in seeds:
        results[seed], picks, metrics = evaluate(items, actions, runs, records, out, args.budget, lams, args.folds,
                                                 seed, self_made)
        if seed == seeds[0]:
            first = (picks, metrics)
    picks, metrics = first
    table = Table(title=f"routers on {len(items)} questions ({', '.join(SUITES)}), each held out from the learned "
                        f"router that scores it ({args.folds}-fold, split seed {seeds[0]}), budget {args.budget}, "
                        f"lambda {lams[0]}")
    for col in ("router", "accuracy", "tokens / item", "ECE", "decision p50 ms"):
        table.add_column(col)
    for name, acc, tok, ece, ms in results[seeds[0]]:
        table.add_row(name, f"{acc:.3f}", f"{tok:.0f}", "-" if ece is None else f"{ece:.3f}", f"{ms:.2f}")
    console = Console(width=150)
    console.print(table)
    console.print(per_suite_table(items, actions, runs, picks, f"learned (lambda {lams[0]})"))
    for k, m in enumerate(metrics):
        print(f"fold {k} training report: {json.dumps({key: v for key, v in m.items() if key != 'reliability'})}")
    if len(seeds) > 1:
        console.print(splits_table(results, actions, len(items)))

if __name__ == "__main__":
    main()
