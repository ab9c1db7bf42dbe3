"""Benchmark: the policy's stated confidence vs the mean answer-token logprob, as the cascade's signal (issue 21).

    .venv/bin/python -m evals.bench.confidence_bench [--easy 20] [--gsm8k 20] [--budget 1024] [--out DIR]

(DIR defaults to ~/.cache/agentrt/bench/confidence; run it with AGENTRT_HOME set to keep its trajectories apart.)

On a small real slice (every other item of evals/data/easy-dev.jsonl, the first gsm8k items) with the
policy (default the embedded SmolLM2-135M), resumably (each finished (item, run) is appended to
DIR/runs.jsonl and never redone):

1. direct with ``confidence="grammar"``: the answer, its correctness (the suite's verifier; for qa items a
   gold answer said in a sentence counts too, see ``_correct``), the mean
   answer-token logprob, the stated confidence and the tokens of the answer call and of the confidence call;
2. reason with ``confidence="grammar"`` (the cascade's next rung), the same;
3. direct with ``confidence="tail"`` (qa items only): how often a base policy writes the tag itself, and its accuracy;
4. the direct answer's stated confidence read as the expectation over the 21 choices (one scoring pass, hf):
   what ``confidence="scored"`` computes.

Prints: AUROC of each signal for predicting correctness (direct and reason answers), ECE and Brier of the
stated confidence, and a two-rung cascade (direct -> reason) simulated from those runs for each signal
(accuracy, tokens per item, escalation rate); with the load average, since other processes share the CPU.
"""

from __future__ import annotations

import json
import os
import statistics
import sys
import time
from pathlib import Path

from evals.bench.common import DEFAULT_HOME, parser


RUNS = (("direct", "grammar"), ("reason", "grammar"), ("direct", "tail"))


def _items(easy: int, gsm8k: int) -> list:
    from evals.suites import DATA_DIR, load_jsonl, load_suite

    return load_jsonl(DATA_DIR / "easy-dev.jsonl").items[::2][:easy] + load_suite("gsm8k").items[:gsm8k]


def _mean_logprob(record) -> float | None:
    calls = [c for c in record.model_calls() if c.name == "answer"]
    lps = calls[-1].completion_logprobs[0] if calls else None
    return sum(lps) / len(lps) if lps else None


def _collect(agent, items: list, budget: int, path: Path) -> list[dict]:
    from evals.verifiers import score_item

    done = {}
    if path.exists():
        for line in path.read_text().splitlines():
            row = json.loads(line)
            done[(row["id"], row["route"], row["mode"])] = row
    for n, item in enumerate(items):
        for route, mode in _runs(item):
            if (item.id, route, mode) in done:
                continue
            t = time.perf_counter()
            r = agent.run(item.question, budget=budget, route=route, confidence=mode)
            conf_tokens = sum(c.usage["prompt_tokens"] + c.usage["completion_tokens"]
                              for c in r.record.model_calls() if c.name == "confidence")
            row = {"id": item.id, "route": route, "mode": mode, "answer": r.answer,
                   "correct": score_item(item, r.answer, r.route).correct, "logprob": _mean_logprob(r.record),
                   "stated": r.confidence, "status": r.confidence_status, "tokens": r.usage.total_tokens,
                   "confidence_tokens": conf_tokens, "wall_s": round(time.perf_counter() - t, 2)}
            done[(item.id, route, mode)] = row
            with path.open("a") as f:
                f.write(json.dumps(row) + "\n")
            print(f"[{n + 1}/{len(items)}] {item.id} {route}/{mode}: {row['correct']} stated={row['stated']} "
                  f"lp={row['logprob'] and round(row['logprob'], 3)} {row['wall_s']}s", file=sys.stderr, flush=True)
    return [done[(i.id, r, m)] for i in items for r, m in _runs(i)]


def _runs(item) -> tuple[tuple[str, str], ...]:
    """The runs of one item: tail mode only on the qa items (the base policy writes no tag on gsm8k either,
    and its answers there are long: the tail runs would double the bench's time for nothing)."""
    return RUNS if item.type == "qa" else RUNS[:2]


def _expected(agent, items: list, rows: list[dict], path: Path) -> dict[str, dict]:
    """For each direct answer: the policy's stated confidence read as the expectation over the 21 choices (one
    scoring pass of the same prompt as the grammar call, each choice closed by the tag) and what it costs."""
    import asyncio

    from agentrt.core.confidence import CLOSE_TAG, CONFIDENCE_CHOICES, OPEN_TAG
    from agentrt.core.types import Message
    from agentrt.core.confidence import with_instruction
    from agentrt.routes.direct import SYSTEM

    done = {json.loads(line)["id"]: json.loads(line) for line in path.read_text().splitlines()} if path.exists() else {}
    answers = {r["id"]: r["answer"] for r in rows if (r["route"], r["mode"]) == ("direct", "grammar")}
    for item in items:
        if item.id in done:
            continue
        messages = with_instruction([Message("system", SYSTEM), Message("user", item.question)])
        messages.append(Message("assistant", f"{answers[item.id]}\n{OPEN_TAG}"))
        scores, cost = asyncio.run(agent.policy.score(messages, [c + CLOSE_TAG for c in CONFIDENCE_CHOICES]))
        top = max(scores)
        weights = [2.718281828459045 ** (x - top) for x in scores]
        value = sum(w * float(c) for w, c in zip(weights, CONFIDENCE_CHOICES)) / sum(weights)
        done[item.id] = {"id": item.id, "expected": value, "tokens": cost}
        with path.open("a") as f:
            f.write(json.dumps(done[item.id]) + "\n")
    return done


def _correct(item, answer: str, verdict: bool) -> bool:
    """The verifier's verdict; for a qa item also a gold answer said in a sentence ("The capital of France is
    Paris." for "Paris": the qa verifier's exact match says no, a reader says yes)."""
    if verdict or item.type != "qa":
        return verdict
    import re

    norm = lambda t: " " + " ".join(re.sub(r"[^\w\s]", " ", t.lower()).split()) + " "  # noqa: E731
    return any(norm(gold) in norm(answer) for gold in item.answers)


def _fmt(x: float | None, d: int = 3) -> str:
    return "n/a" if x is None else f"{x:.{d}f}"


def report(rows: list[dict], items: list, expected: dict[str, dict] | None = None) -> str:
    from agentrt.train.router_eval import auroc
    from evals.metrics import brier, ece

    by = {(r["id"], r["route"], r["mode"]): r for r in rows}
    for item in items:
        for route, mode in _runs(item):
            row = by[(item.id, route, mode)]
            row["correct"] = _correct(item, row["answer"], row["correct"])
    lines = ["| answers | n | accuracy | AUROC stated | AUROC mean logprob | ECE stated | Brier stated | stated: distinct values (mean) | confidence call tokens/item |",
             "|---|---|---|---|---|---|---|---|---|"]
    for route, mode in RUNS[:2]:
        rs = [by[(i.id, route, mode)] for i in items]
        ok = [r for r in rs if r["stated"] is not None]
        lp = [r for r in rs if r["logprob"] is not None]
        y = [float(r["correct"]) for r in ok]
        lines.append(
            f"| {route} | {len(rs)} | {statistics.mean(r['correct'] for r in rs):.2f} | "
            f"{_fmt(auroc([r['stated'] for r in ok], y))} | "
            f"{_fmt(auroc([r['logprob'] for r in lp], [float(r['correct']) for r in lp]))} | "
            f"{_fmt(ece([r['stated'] for r in ok], [r['correct'] for r in ok]) if ok else None)} | "
            f"{_fmt(brier([r['stated'] for r in ok], [r['correct'] for r in ok]) if ok else None)} | "
            f"{len({r['stated'] for r in ok})} ({_fmt(statistics.mean(r['stated'] for r in ok) if ok else None, 2)}) | "
            f"{statistics.mean(r['confidence_tokens'] for r in rs):.0f} |")
    if expected:
        rs = [by[(i.id, "direct", "grammar")] for i in items]
        ex = [expected[i.id]["expected"] for i in items]
        y = [float(r["correct"]) for r in rs]
        lines.append(
            f"| direct, stated read as the expectation over the choices (one scoring pass) | {len(rs)} | "
            f"{statistics.mean(y):.2f} | {_fmt(auroc(ex, y))} | - | {_fmt(ece(ex, [r['correct'] for r in rs]))} | "
            f"{_fmt(brier(ex, [r['correct'] for r in rs]))} | {len({round(v, 3) for v in ex})} "
            f"({statistics.mean(ex):.2f}) | {statistics.mean(expected[i.id]['tokens'] for i in items):.0f} |")
    tailed = [i for i in items if (i.id, "direct", "tail") in by]
    tail = [by[(i.id, "direct", "tail")] for i in tailed]
    statuses = {s: sum(r["status"] == s for r in tail) for s in ("ok", "missing", "malformed")}
    lines += ["", f"direct, tail mode (the base policy asked to write the tag itself), on the {len(tailed)} qa items: "
              f"accuracy {statistics.mean(r['correct'] for r in tail):.2f} (grammar-mode direct, no instruction in "
              f"the answer call: {statistics.mean(by[(i.id, 'direct', 'grammar')]['correct'] for i in tailed):.2f}); "
              f"statuses {statuses}", ""]
    # Two-rung cascade (direct -> reason), simulated from the runs above: escalate when unsure.
    from agentrt.router.decision import cascade_unsure

    lines += ["| cascade signal (threshold) | accuracy | tokens/item | escalated |", "|---|---|---|---|"]
    stated_direct = sorted(by[(i.id, "direct", "grammar")]["stated"] or 0.0 for i in items)
    median = stated_direct[len(stated_direct) // 2]
    settings = [("logprob", -0.8, 0.5), ("stated", -0.8, 0.5), ("stated", -0.8, median), ("both", -0.8, 0.5)]
    for signal, lp_t, st_t in settings:
        acc, tokens, esc = [], [], 0
        for i in items:
            d, r = by[(i.id, "direct", "grammar")], by[(i.id, "reason", "grammar")]
            # the logprob signal needs no confidence call: without it the run pays the answer alone
            cost = d["tokens"] - (d["confidence_tokens"] if signal == "logprob" else 0)
            if cascade_unsure(signal, d["logprob"], d["stated"], logprob_threshold=lp_t, stated_threshold=st_t):
                esc += 1
                acc.append(r["correct"])
                tokens.append(cost + r["tokens"] - (r["confidence_tokens"] if signal == "logprob" else 0))
            else:
                acc.append(d["correct"])
                tokens.append(cost)
        thr = f"{lp_t}" if signal == "logprob" else f"{st_t:g}" if signal == "stated" else f"{lp_t} / {st_t:g}"
        lines.append(f"| {signal} ({thr}) | {statistics.mean(acc):.2f} | {statistics.mean(tokens):.0f} | {esc}/{len(items)} |")
    if expected:  # the scored reading as the stated signal; the reason rung pays its grammar call
        ex = sorted(expected[i.id]["expected"] for i in items)
        for st_t in (ex[len(ex) // 4], ex[len(ex) // 2]):
            acc, tokens, esc = [], [], 0
            for i in items:
                d, r = by[(i.id, "direct", "grammar")], by[(i.id, "reason", "grammar")]
                cost = d["tokens"] - d["confidence_tokens"] + expected[i.id]["tokens"]
                if cascade_unsure("stated", d["logprob"], expected[i.id]["expected"], logprob_threshold=-0.8,
                                  stated_threshold=st_t):
                    esc += 1
                    acc.append(r["correct"])
                    tokens.append(cost + r["tokens"])
                else:
                    acc.append(d["correct"])
                    tokens.append(cost)
            lines.append(f"| stated, scored reading (< {st_t:.4f}: its {'lower quartile' if st_t == ex[len(ex) // 4] else 'median'}) "
                         f"| {statistics.mean(acc):.2f} | {statistics.mean(tokens):.0f} | {esc}/{len(items)} |")
    for route in ("direct", "reason"):
        rs = [by[(i.id, route, "grammar")] for i in items]
        lines.append(f"| always {route} (no confidence call) | {statistics.mean(r['correct'] for r in rs):.2f} | "
                     f"{statistics.mean(r['tokens'] - r['confidence_tokens'] for r in rs):.0f} | - |")
    return "\n".join(lines)


def main() -> None:
    ap = parser(__doc__)
    ap.add_argument("--easy", type=int, default=20)
    ap.add_argument("--gsm8k", type=int, default=20)
    ap.add_argument("--budget", type=int, default=1024)
    ap.add_argument("--policy", default="hf:embedded")
    ap.add_argument("--out", default=str(DEFAULT_HOME / "bench" / "confidence"))
    args = ap.parse_args()
    from agentrt import Agent
    from agentrt.core.config import load_settings

    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    items = _items(args.easy, args.gsm8k)
    agent = Agent(load_settings(policy=args.policy))
    t = time.perf_counter()
    rows = _collect(agent, items, args.budget, out / "runs.jsonl")
    from agentrt.core.protocols import Scorer

    expected = _expected(agent, items, rows, out / "expected.jsonl") if isinstance(agent.policy, Scorer) else None
    print(report(rows, items, expected))
    print(f"\n{len(items)} items ({args.easy} easy-dev, {args.gsm8k} gsm8k), policy {args.policy}, "
          f"budget {args.budget}; {time.perf_counter() - t:.0f} s; load average {os.getloadavg()[0]:.2f} "
          f"(1 min) at the end")


if __name__ == "__main__":
    main()
