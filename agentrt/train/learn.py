"""One round of the learning loop after exploration: train a candidate, judge it against the incumbent on
runs it was not fit on, decide whether to promote it, register it with its provenance.

``agentrt learn`` (agentrt/app/commands/learn.py) explores first (the runs are trajectories, resumable),
then calls ``learn_round``. Two gates (``gate``):

* ``crossfit`` (the default): the questions are dealt into ``folds`` folds (a stable hash); each run is decided
  and its reward modelled by a candidate fit on the other folds, the same way the candidate in use is fit on all
  of them. So every question judges the candidate, none judges a model that saw it: on 100 questions the
  value interval is that of 100 held-out questions, not of a 30-question slice (family_bench: the slice's
  +-0.3-0.5 intervals kept out candidates worth +0.3-0.5 on the family's other questions; docs/results/routing.md).
* ``holdout``: a stable-hash share ``holdout`` of the questions is held out and never fit or calibrated on; the
  candidate is fit on the rest.

Both routers are judged as the runtime runs them (``router_eval.deciding_estimator``: a learned router's own
estimate where the action it would take has evidence, else its documented fallback), and only on questions the
router in use was not fit on: a router records digests of its training questions (provenance ``fit_on``), and
runs of those questions are left out of the comparison. Judged on them it is judged in-sample (the shipped
router: +0.436 on its own 106 questions against +0.279 cross-fitted), and no candidate learned on data that
includes them could pass it.
"""

from __future__ import annotations

import datetime as _dt
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from agentrt.core.config import Settings
from agentrt.core.errors import InputError
from agentrt.router import registry
from agentrt.router.decision import UtilityConfig
from agentrt.router.learned import RouterModel
from agentrt.train.router import Example, train_router
from agentrt.train.router_eval import (Estimator, PolicyEval, Verdict, compare, config, deciding_estimator, drift,
                                       evaluate, fixed_estimator, model_estimator, rules_estimator, split)

GATES = ("crossfit", "holdout")
Fit = Callable[[list[Example]], RouterModel]


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


def question_digest(question: str) -> str:
    """A question's short digest, as a router's provenance records the questions it was fit on (``fit_on``):
    enough to recognise them, no user text kept in the router file."""
    import hashlib

    return hashlib.blake2b(question.encode(), digest_size=6).hexdigest()


def fit_on(model: RouterModel | None) -> frozenset[str]:
    """The digests of the questions ``model`` was fit on (empty: the rules, or a router that did not record them)."""
    return frozenset((model.provenance or {}).get("fit_on") or []) if model is not None else frozenset()


def learn_round(examples: list[Example], incumbent: Incumbent, settings: Settings, fingerprint: registry.Fingerprint, *,
                suites: list[str], lam: float = 0.3, holdout: float = 0.3, folds: int = 5, seed: int = 0,
                rounds: int = 1000, promote: bool = True, gate: str = "crossfit",
                extra: dict[str, Any] | None = None) -> RoundReport:
    """Train a candidate, judge it against ``incumbent`` by ``gate`` (module docstring), register it under
    ``settings.home`` and promote it when the verdict says so (and ``promote``)."""
    old = incumbent.model()
    seen = fit_on(old)  # the questions the router in use was fit on: the gate does not judge it on them
    trained_for = (old.provenance or {}).get("policy", {}).get("id") if old is not None else None
    same_policy = old is not None and trained_for == fingerprint.id
    # a tiered policy with no router of its own runs its base model's (LearnedRouter's base_policy): that router
    # decides the base tier's actions, and a tier action, given its base estimate unlifted, wins only on price
    # (the dearer tier never does): judged as it runs, over the base tier's actions
    base = registry.tier_base(settings)
    base_of_tiers = old is not None and not same_policy and base is not None and trained_for == base.id
    prior = old.base_rates if same_policy and old is not None else None
    if base_of_tiers and old is not None:  # the base tier is the same model: its actions' rates carry over
        prior = {a: r for a, r in (old.base_rates or {}).items() if "@" not in a} or None

    def fit(rows: list[Example]) -> RouterModel:
        # the router in use's base rates are what the candidate's rarely-run actions start from (train_router's prior)
        return train_router([], lam=lam, folds=folds, seed=seed, examples=rows, prior=prior)

    actions = tuple(sorted({e.action for e in examples}))
    floors = dict(getattr(settings, "router_floors", {}) or {})
    if same_policy and old is not None:
        incumbent_estimate, incumbent_cfg = deciding_estimator(old, settings)[0], None
    elif base_of_tiers and old is not None:
        incumbent_estimate = deciding_estimator(old, settings)[0]
        incumbent_cfg = config(lam, tuple(a for a in actions if "@" not in a), floors)
    else:  # the rules, or a router for another policy (which falls back to the rule priors at run time)
        incumbent_estimate = rules_estimator(settings)
        incumbent_cfg = UtilityConfig(lam=lam, actions=actions, floors=floors)
    judged = judge(examples, fit, incumbent_estimate, settings, gate=gate, lam=lam, holdout=holdout, folds=folds,
                   seed=seed, rounds=rounds, incumbent_name=incumbent.name, incumbent_cfg=incumbent_cfg,
                   incumbent_fit_on=seen)
    # the holdout gate judged the very model fit on the training slice; cross-fitted, the one in use is fit on all
    candidate = judged.models[0] if gate == "holdout" else fit(judged.train)
    cand, inc, held, verdict = judged.candidate, judged.incumbent, judged.held, judged.verdict
    fixed = {a: evaluate(f"fixed:{a}", fixed_estimator(a), judged.q, held, config(lam, (a,)), rounds, seed)
             for a in actions}
    for p in fixed.values():  # a fixed action predicts nothing: no calibration to report
        p.ece = p.auroc = p.ece_floor = None
        p.reliability = {}
    train_eval = evaluate("candidate", model_estimator(candidate), model_estimator(candidate), judged.train,
                          config(lam, actions, floors), 1, seed)
    runs = {"total": len(examples), "train": len(judged.train), "heldout": len(held),
            "questions": len({e.question for e in examples}), "heldout_questions": len({e.question for e in held}),
            "gate": gate, "folds": judged.folds, "left_out_incumbent_fit": judged.left_out}
    # the best fixed action is the most accurate one (value would crown abstain: 0 tokens, 0 cost)
    best = max(fixed.values(), key=lambda p: (round(p.success, 3), p.value))
    candidate.provenance = {
        "policy": fingerprint.to_dict(), "suites": suites, "runs": runs,
        "date": _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds"),
        "lambda": lam, "actions": list(actions),
        "heldout": {"gate": gate, "value": round(cand.value, 4), "interval": [round(x, 4) for x in cand.interval],
                    "ece": cand.ece, "ece_floor": cand.ece_floor,
                    "auroc": None if cand.auroc is None else round(cand.auroc, 4),
                    "success": round(cand.success, 4), "tokens": round(cand.tokens, 1),
                    "abstain_precision": cand.abstain_precision, "abstain_recall": cand.abstain_recall,
                    "best_fixed": {"action": best.name, "value": round(best.value, 4), "tokens": round(best.tokens, 1),
                                   "success": round(best.success, 4)},
                    "incumbent": {"name": inc.name, "value": round(inc.value, 4), "ece": inc.ece}},
        "verdict": {"promote": verdict.promote, "reasons": verdict.reasons, "summary": verdict.lines()},
        **(extra or {}),
        "fit_on": sorted({question_digest(e.question) for e in judged.train}),
    }
    notes = ([f"{judged.left_out} questions the router in use ({inc.name}) was fit on are left out of the "
              "comparison (judged on them it would be judged in-sample)"] if judged.left_out else [])
    if old is not None and not seen:
        notes.append(f"the router in use ({inc.name}) did not record the questions it was fit on: it is judged on "
                     "every question here, in-sample on any it was fit on (which favours it)")
    report = RoundReport(cand, inc, fixed, verdict, train_eval.value, runs,
                         warnings=notes + list((candidate.metrics or {}).get("warnings", [])),
                         drift=drift(cand.actions, inc.actions))
    entry = registry.add(Path(settings.home), candidate)
    report.version = entry.version
    if verdict.promote and promote:
        registry.promote(Path(settings.home), entry.version)
        report.promoted = True
    return report


@dataclass
class Judged:
    """What the gate saw: the candidate's and the incumbent's figures on the judged runs (``held``), the reward
    model of their DR estimates (``q``), the runs the candidate in use is fit on (``train``) and the verdict."""

    candidate: PolicyEval
    incumbent: PolicyEval
    verdict: Verdict
    held: list[Example]
    train: list[Example]
    q: Estimator
    folds: int
    models: list[RouterModel] = field(default_factory=list)  # one per fold (the holdout gate: one)
    left_out: int = 0  # questions left out of the judged runs: the incumbent was fit on them


def judge(examples: list[Example], fit: Fit, incumbent: Estimator, settings: Settings, *, gate: str = "crossfit",
          lam: float = 0.3, holdout: float = 0.3, folds: int = 5, seed: int = 0, rounds: int = 1000,
          name: str = "candidate", incumbent_name: str = "incumbent",
          incumbent_cfg: UtilityConfig | None = None, incumbent_fit_on: frozenset[str] = frozenset()) -> Judged:
    """The promotion gate for the candidate ``fit`` makes from ``examples`` (module docstring): each judged run is
    decided by a model ``fit`` on runs of other questions only, and the incumbent on the same runs, paired.
    ``incumbent_cfg``: the incumbent's utility rule when it is not a learned router's (the rules').
    ``incumbent_fit_on``: digests of the questions the incumbent was fit on (``question_digest``); their runs are
    not judged (every one of them: no verdict can promote, and the reason says to explore new questions)."""
    if gate not in GATES:
        raise InputError(f"unknown gate {gate!r}: use one of {', '.join(GATES)}")
    questions = len({e.question for e in examples})
    if gate == "holdout":
        train, held = split(examples, holdout, seed)
        parts = [(train, held)] if held else []
    else:
        fold = fold_of(examples, folds, seed)
        k = max(fold.values(), default=0) + 1
        train, held = examples, examples
        parts = [([e for e in examples if fold[e.question] != i], [e for e in examples if fold[e.question] == i])
                 for i in range(k)]
    if questions < 3 or not parts or any(len({e.question for e in rows}) < 2 for rows, _ in parts):
        raise InputError(f"too few questions to learn from ({questions}, {len(held)} runs judged); explore more "
                         "items (raise --limit or add suites)")
    fresh = [e for e in held if question_digest(e.question) not in incumbent_fit_on]
    left_out = len({e.question for e in held}) - len({e.question for e in fresh})
    models = [fit(rows) for rows, _ in parts]
    owner = {id(e): i for i, (_, judged) in enumerate(parts) for e in judged}  # the model that never saw e's question
    deciders = [deciding_estimator(m, settings)[0] for m in models]
    q: Estimator = lambda e: models[owner[id(e)]].predict(e.x)  # noqa: E731
    estimate: Estimator = lambda e: deciders[owner[id(e)]](e)  # noqa: E731
    actions = tuple(sorted({e.action for e in examples}))
    cfg = config(lam, actions, dict(getattr(settings, "router_floors", {}) or {}))
    rows = fresh or held  # none fresh: the figures on all, and a verdict that cannot promote
    cand = evaluate(name, estimate, q, rows, cfg, rounds, seed)
    inc = evaluate(incumbent_name, incumbent, q, rows, incumbent_cfg or cfg, rounds, seed)
    verdict = compare(cand, inc, rows, rounds=rounds, seed=seed)
    if not fresh:
        verdict.promote = False
        verdict.reasons.append(f"the router in use was fit on every one of these {left_out} questions: judged on them "
                               "it is judged in-sample; explore questions it has not seen (other items or suites)")
    return Judged(cand, inc, verdict, rows, train, q, len(parts), models, left_out)


def fold_of(examples: list[Example], folds: int, seed: int = 0) -> dict[str, int]:
    """Each question's fold: questions in a stable hash order dealt round-robin, so folds differ by at most one."""
    import hashlib

    questions = sorted({e.question for e in examples},
                       key=lambda q: hashlib.blake2b(f"{seed}:fold:{q}".encode(), digest_size=8).digest())
    k = max(2, min(folds, len(questions)))
    return {q: i % k for i, q in enumerate(questions)}


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
