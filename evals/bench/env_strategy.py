"""Bench part ``strategy`` (issue 36): the self-routing policy beside the external learned router, held out.

    .venv/bin/python -m evals.bench.env_bench --part strategy --trajectories X/H/trajectories X/S/trajectories \
        X/D/trajectories X/A/trajectories X/B2/trajectories [--steps 24] [--families hotpotqa-index squad docs] \
        [--holdout 0.2] [--limit-held 60] [--calibrate-on 120]
    (or .venv/bin/python -m evals.bench.env_strategy ... with the same flags)

No route runs: the exploration logs are the outcome cache (``agentrt.train.outcomes``). For each split (in
distribution: a stable-hash share of the questions held out; leave-one-suite-out: every question of one family):

* **self**: ``train_strategy`` (GRPO through TRL's GRPOTrainer, rewards from the cache, the training questions
  only) writes a policy and its ``self_router.json``; the policy's label distributions on the held-out questions
  are then decided as ``self:PATH`` decides them (``strategy.self_estimator``);
* **learned**: ``train_router`` on the same training runs (kernel evidence sample included), decided as the
  runtime decides (``router_eval.deciding_estimator``).

Both are valued by ``router_eval.evaluate`` on the held-out runs with the same reward model (the learned
router's estimates, fit on the training runs): DR value with a 95% bootstrap interval over questions, success,
tokens, ECE and AUROC of p_success for the logged action, and the share of decisions marked ``calibrated``;
beside them the best fixed action on the same held-out runs (the yardstick: a router worth having beats it).
Acceptance: self value >= learned - 0.02 in distribution; leave-one-suite-out ECE lower on at least half the families.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import tempfile
from pathlib import Path

os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")


def add_arguments(ap: argparse.ArgumentParser) -> None:
    g = ap.add_argument_group("strategy part (the in-distribution split holds out --holdout of the questions)")
    g.add_argument("--trajectories", nargs="+", help="strategy: exploration trajectory folders (the outcome cache)")
    g.add_argument("--steps", type=int, default=24, help="strategy: GRPO steps per split (default 24)")
    g.add_argument("--batch-size", type=int, default=12, help="strategy: completions per step (default 12)")
    g.add_argument("--num-generations", type=int, default=6, help="strategy: GRPO group size (default 6: with the "
                   "default explore share, every label once a group)")
    g.add_argument("--learning-rate", type=float, default=1e-4)
    g.add_argument("--train-layers", type=int, default=4, help="strategy: top decoder layers trained (default 4)")
    g.add_argument("--families", nargs="*", help="strategy: families to leave out in turn (default: the document "
                   "families found, evals.devsets.FAMILIES); none: in distribution only")
    g.add_argument("--limit-held", type=int, default=60, help="strategy: at most this many held-out questions per "
                   "split (a stable sample; default 60)")
    g.add_argument("--calibrate-on", type=int, default=120, help="strategy: training questions that calibrate the "
                   "self router (default 120)")
    g.add_argument("--lambda", dest="lam", type=float, default=0.3)
    g.add_argument("--explore-share", type=float, default=None, help="strategy: share of each GRPO group's labels "
                   "dealt uniformly (default: train_strategy's, 1.0; 0.5 with groups of 4 was the earlier "
                   "default; 0 = on-policy only)")
    g.add_argument("--work", help="strategy: folder for the trained policies (default: a temporary one)")
    g.add_argument("--json-out", help="strategy: write the figures here as JSON")


def _stable(qs: list[str], n: int) -> list[str]:
    return sorted(qs, key=lambda q: hashlib.blake2b(q.encode(), digest_size=4).digest())[:n]


def one_split(name: str, cache, examples, train_q, held_q, args, settings, fingerprint, work: Path) -> dict:
    """Train both routers on ``train_q``'s runs, score both on ``held_q``'s runs."""
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from agentrt.router.selfpolicy import CALIBRATION_FILE, SelfCalibration
    from agentrt.train.router import train_router
    from agentrt.train.router_eval import config, deciding_estimator, evaluate, model_estimator
    from agentrt.train.strategy import label_distributions, self_estimator, train_strategy
    from evals.bench.family_bench import fixed_rows

    held_q = _stable(held_q, args.limit_held)
    keep_train, keep_held = set(train_q), set(held_q)
    train_ex = [e for e in examples if e.question in keep_train]
    held_ex = [e for e in examples if e.question in keep_held]
    actions = tuple(sorted({e.action for e in examples}))
    learned = train_router([], lam=args.lam, examples=train_ex)
    learned.provenance = {"policy": fingerprint.to_dict()}
    q = model_estimator(learned)
    cfg = config(args.lam, actions)
    estimate, calibrated = deciding_estimator(learned, settings)
    out = {"split": name, "train_questions": len(train_q), "held_questions": len(held_q), "held_runs": len(held_ex)}
    ev = evaluate("learned", estimate, q, held_ex, cfg)
    out["learned"] = {**_figures(ev), "calibrated_share": _share(calibrated, held_ex)}
    # the yardstick both routers answer to: a router worth having beats always taking one action
    fixed = fixed_rows(held_ex, actions, q, args.lam)
    best = max(fixed.values(), key=lambda p: p.value) if fixed else None
    out["best_fixed"] = None if best is None else {"action": best.name, **_figures(best)}
    folder = work / name
    report, extras = train_strategy(cache, folder, train_questions=train_q, lam=args.lam, steps=args.steps,
                                    num_generations=args.num_generations, batch_size=args.batch_size,
                                    max_completion_length=3, learning_rate=args.learning_rate,
                                    train_layers=args.train_layers, calibrate_on=args.calibrate_on,
                                    provenance={"split": name}, seed=args.seed,
                                    **({} if args.explore_share is None else {"explore_share": args.explore_share}))
    model = AutoModelForCausalLM.from_pretrained(folder)
    label_ps = dict(zip(held_q, label_distributions(model, AutoTokenizer.from_pretrained(folder), held_q)))
    estimate, calibrated, pick = self_estimator(SelfCalibration.load(folder / CALIBRATION_FILE), label_ps, settings)
    ev = evaluate("self", estimate, q, held_ex, cfg, pick=pick)
    top = [max(p, key=p.get) for p in label_ps.values()]
    out["self"] = {**_figures(ev), "calibrated_share": _share(calibrated, held_ex),
                   "train_rewards": [round(r, 3) for r in report.rewards], "sources": extras["sources"],
                   "top_labels": {a: top.count(a) for a in sorted(set(top))}, "grpo_wall_s": report.wall_s,
                   "explore_share": extras["explore_share"]}
    return out


def _share(calibrated, runs) -> float:
    return round(sum(calibrated(e) for e in runs) / max(1, len(runs)), 3)


def _figures(ev) -> dict:
    r = lambda x: None if x is None else round(x, 4)  # noqa: E731
    return {"value": r(ev.value), "interval": [r(ev.interval[0]), r(ev.interval[1])], "success": r(ev.success),
            "tokens": round(ev.tokens, 1), "ece": r(ev.ece), "ece_floor": r(ev.ece_floor), "auroc": r(ev.auroc),
            "actions": ev.actions}


def run(args: argparse.Namespace) -> dict:
    from agentrt.core.config import Settings
    from agentrt.router import registry
    from agentrt.train.outcomes import OutcomeCache
    from agentrt.train.strategy import split
    from evals.bench.common import show, table
    from evals.bench.learn_bench import load_runs
    from evals.devsets import FAMILIES

    examples = load_runs(args.trajectories)
    cache = OutcomeCache.from_examples(examples)
    settings = Settings()
    fingerprint = registry.settings_fingerprint(settings)
    found = set(cache.families.values())
    families = [f for f in FAMILIES if f in found] if args.families is None else args.families
    work = Path(args.work or tempfile.mkdtemp(prefix="env-strategy-"))
    splits = [("in-distribution", *split(cache, holdout=args.holdout))]
    splits += [(f"left out: {f}", *split(cache, holdout=0.0, leave_out=(f,))) for f in families]
    results = []
    for name, train_q, held_q in splits:
        results.append(one_split(name.replace(": ", "-").replace(" ", "_"), cache, examples, train_q, held_q, args,
                                 settings, fingerprint, work))
        results[-1]["split"] = name
        print(json.dumps(results[-1]), flush=True)
    f3 = lambda x: "-" if x is None else f"{x:.3f}"  # noqa: E731
    rows = []
    for r in results:
        for who in ("self", "learned"):
            m = r[who]
            rows.append([r["split"], who, f"{r['held_questions']} / {r['held_runs']}",
                         f"{f3(m['value'])} [{f3(m['interval'][0])}, {f3(m['interval'][1])}]", f3(m["success"]),
                         f"{m['tokens']:.0f}", f"{f3(m['ece'])} ({f3(m['ece_floor'])})", f3(m["auroc"]),
                         f3(m["calibrated_share"]), " ".join(f"{a}:{n}" for a, n in sorted(m["actions"].items()))])
        b = r.get("best_fixed")
        if b:
            rows.append([r["split"], b["action"] + " (best)", "", f"{f3(b['value'])} [{f3(b['interval'][0])}, "
                         f"{f3(b['interval'][1])}]", f3(b["success"]), f"{b['tokens']:.0f}", "-", "-", "-", ""])
    show(table(f"strategy: the self-routing policy vs the learned router on held-out questions (value = DR estimate "
               f"of score - {args.lam} * tokens / budget, the learned router's reward model for both)",
               ["split", "router", "held q / runs", "value [95%]", "success", "tokens", "ECE (floor)", "AUROC",
                "calibrated", "choices"], rows), width=220)
    ind = results[0]
    verdict = {"in_distribution_value_ok": ind["self"]["value"] >= ind["learned"]["value"] - 0.02}
    loso = [r for r in results[1:] if r["self"]["ece"] is not None and r["learned"]["ece"] is not None]
    lower = sum(r["self"]["ece"] < r["learned"]["ece"] for r in loso)
    verdict["loso_ece_lower"] = f"{lower} of {len(loso)}"
    verdict["loso_ece_ok"] = bool(loso) and lower >= len(loso) / 2
    print("acceptance:", json.dumps(verdict))
    record = {"splits": results, "verdict": verdict, "args": {k: v for k, v in vars(args).items() if k != "func"}}
    if args.json_out:
        Path(args.json_out).write_text(json.dumps(record, indent=1, default=str))
    return record


def main() -> None:
    from evals.bench.common import parser

    ap = parser(__doc__)
    ap.add_argument("--holdout", type=float, default=0.2, help="in-distribution held-out share (default 0.2)")
    ap.add_argument("--seed", type=int, default=0, help="GRPO's seed (its label draws and initialisation)")
    add_arguments(ap)
    args = ap.parse_args()
    if not args.trajectories:
        ap.error("--trajectories DIR... is required (exploration runs: agentrt learn --explore-only)")
    run(args)


if __name__ == "__main__":
    main()
