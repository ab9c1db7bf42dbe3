"""One round of the learning loop after exploration: split, train a candidate, evaluate it against the
incumbent on the held-out slice, decide whether to promote it, register it with its provenance.

``agentrt learn`` (agentrt/app/commands/learn.py) explores first (the runs are trajectories, resumable),
then calls ``learn_round``. The held-out slice (by question, a stable hash) is never used to fit or
calibrate the candidate: the candidate's cross-fitting runs on the training slice only.
"""

from __future__ import annotations

import datetime as _dt
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from agentrt.core.config import Settings
from agentrt.core.errors import InputError
from agentrt.router import registry
from agentrt.router.learned import RouterModel
from agentrt.train.router import Example, train_router
from agentrt.train.router_eval import (PolicyEval, Verdict, compare, config, drift, evaluate, fixed_estimator,
                                       model_estimator, rules_estimator, split)


@dataclass
class Incumbent:
    """The router in use before this round: a registry entry (its file) or the rules (entry None)."""

    entry: registry.Entry | None

    @property
    def name(self) -> str:
        return self.entry.version if self.entry else "rules"

    def model(self) -> RouterModel | None:
        return RouterModel.load(self.entry.path) if self.entry else None


@dataclass
class RoundReport:
    """What one round measured and decided (printed by the CLI, written to OUT/report.json)."""

    candidate: PolicyEval
    incumbent: PolicyEval
    fixed: dict[str, PolicyEval]
    verdict: Verdict
    train_value: float
    runs: dict[str, int]
    version: str = ""
    promoted: bool = False
    warnings: list[str] = field(default_factory=list)
    drift: float = 0.0

    def to_dict(self) -> dict[str, Any]:
        return {"candidate": self.candidate.summary(), "incumbent": self.incumbent.summary(),
                "fixed": {a: p.summary() for a, p in self.fixed.items()},
                "verdict": {"promote": self.verdict.promote, "reasons": self.verdict.reasons,
                            "difference": round(self.verdict.difference, 4),
                            "interval": [round(x, 4) for x in self.verdict.interval], "flags": self.verdict.flags,
                            "ece_difference": (None if self.verdict.ece_difference is None
                                               else round(self.verdict.ece_difference, 4)),
                            "ece_interval": (None if self.verdict.ece_interval is None
                                             else [round(x, 4) for x in self.verdict.ece_interval])},
                "train_value": round(self.train_value, 4), "heldout_value": round(self.candidate.value, 4),
                "action_drift": round(self.drift, 4), "runs": self.runs, "version": self.version,
                "promoted": self.promoted, "warnings": self.warnings}


def learn_round(examples: list[Example], incumbent: Incumbent, settings: Settings, fingerprint: registry.Fingerprint, *,
                suites: list[str], lam: float = 0.3, holdout: float = 0.3, folds: int = 5, seed: int = 0,
                rounds: int = 1000, promote: bool = True, extra: dict[str, Any] | None = None) -> RoundReport:
    """Train a candidate on the training slice, judge it against ``incumbent`` on the held-out slice,
    register it under ``settings.home`` and promote it when the verdict says so (and ``promote``)."""
    train, held = split(examples, holdout, seed)
    if len({e.question for e in train}) < 2 or not held:
        raise InputError(f"too few questions to learn from ({len({e.question for e in examples})}, "
                         f"{len(held)} runs held out); explore more items (raise --limit or add suites)")
    old = incumbent.model()
    same_policy = old is not None and (old.provenance or {}).get("policy", {}).get("id") == fingerprint.id
    # the router in use's base rates are what the candidate's rarely-run actions start from (train_router's prior)
    candidate = train_router([], lam=lam, folds=folds, seed=seed, examples=train,
                             prior=old.base_rates if same_policy and old is not None else None)
    actions = tuple(sorted({e.action for e in examples}))
    q = model_estimator(candidate)  # the reward model of the DR estimates: fit on the training slice only
    cand_cfg = config(lam, actions, dict(getattr(settings, "router_floors", {}) or {}))
    cand = evaluate("candidate", model_estimator(candidate), q, held, cand_cfg, rounds, seed)
    if same_policy and old is not None:
        inc = evaluate(incumbent.name, model_estimator(old), q, held, cand_cfg, rounds, seed)
    else:  # the rules, or a router for another policy (which falls back to the rule priors at run time)
        from agentrt.router.decision import UtilityConfig

        rules_cfg = UtilityConfig(lam=lam, actions=actions, floors=dict(getattr(settings, "router_floors", {}) or {}))
        inc = evaluate(incumbent.name, rules_estimator(settings), q, held, rules_cfg, rounds, seed)
    fixed = {a: evaluate(f"fixed:{a}", fixed_estimator(a), q, held, config(lam, (a,)), rounds, seed) for a in actions}
    for p in fixed.values():  # a fixed action predicts nothing: no calibration to report
        p.ece = p.auroc = p.ece_floor = None
        p.reliability = {}
    verdict = compare(cand, inc, held, rounds=rounds, seed=seed)
    train_eval = evaluate("candidate", model_estimator(candidate), q, train, cand_cfg, 1, seed)
    runs = {"total": len(examples), "train": len(train), "heldout": len(held),
            "questions": len({e.question for e in examples}), "heldout_questions": len({e.question for e in held})}
    # the best fixed action is the most accurate one (value would crown abstain: 0 tokens, 0 cost)
    best = max(fixed.values(), key=lambda p: (round(p.success, 3), p.value))
    candidate.provenance = {
        "policy": fingerprint.to_dict(), "suites": suites, "runs": runs,
        "date": _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds"),
        "lambda": lam, "actions": list(actions),
        "heldout": {"value": round(cand.value, 4), "interval": [round(x, 4) for x in cand.interval],
                    "ece": cand.ece, "ece_floor": cand.ece_floor,
                    "auroc": None if cand.auroc is None else round(cand.auroc, 4),
                    "success": round(cand.success, 4), "tokens": round(cand.tokens, 1),
                    "abstain_precision": cand.abstain_precision, "abstain_recall": cand.abstain_recall,
                    "best_fixed": {"action": best.name, "value": round(best.value, 4), "tokens": round(best.tokens, 1),
                                   "success": round(best.success, 4)},
                    "incumbent": {"name": inc.name, "value": round(inc.value, 4), "ece": inc.ece}},
        "verdict": {"promote": verdict.promote, "reasons": verdict.reasons, "summary": verdict.lines()},
        **(extra or {}),
    }
    report = RoundReport(cand, inc, fixed, verdict, train_eval.value, runs,
                         warnings=list((candidate.metrics or {}).get("warnings", [])),
                         drift=drift(cand.actions, inc.actions))
    entry = registry.add(Path(settings.home), candidate)
    report.version = entry.version
    if verdict.promote and promote:
        registry.promote(Path(settings.home), entry.version)
        report.promoted = True
    return report


def reliability_markdown(report: RoundReport) -> str:
    """Reliability diagrams (as tables) per action, candidate and incumbent, for OUT/report.md."""
    lines = ["# agentrt learn: held-out reliability per action", ""]
    for policy in (report.candidate, report.incumbent):
        lines.append(f"## {policy.name} (ECE {policy.ece}, a perfectly calibrated router's on these runs "
                     f"{policy.ece_floor}; AUROC {policy.auroc})")
        for action, table in policy.reliability.items():
            lines += ["", f"### {action}", "", "| p_success bin | runs | mean p_success | success rate | bar |",
                      "|---|---|---|---|---|"]
            for row in table:
                bar = "#" * round(20 * row["accuracy"]) + "." * (20 - round(20 * row["accuracy"]))
                lines.append(f"| {row['bin']} | {row['n']} | {row['confidence']} | {row['accuracy']} | `{bar}` |")
        lines.append("")
    return "\n".join(lines)
