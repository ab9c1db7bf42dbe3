"""``agentrt learn --traffic``: learn the router from the home's own traffic (runs with users' feedback).

One step per call, by the observe state of the running policy (``agentrt.router.registry.observe_state``):

1. No candidate under observation: train one on the rewarded traffic (``learn_round``, its figures from its
   gate: cross-fitted by question, or a held-out slice; never promoted here) and put it under **observation**:
   from the next request on it decides every request in shadow (the decision step's ``shadow``;
   agentrt.router.shadow), at no model-token cost.
2. A candidate under observation: value its would-be decisions off-policy on the runs logged since it started
   that got feedback, doubly robust with a bootstrap interval (by question), beside the router in use (its own
   greedy choice on the same runs, by the same estimator), and apply the gate (``router_eval.compare``: the
   paired value difference's lower bound above 0, ECE not worse beyond its noise, no overoptimization flag).
   Promote, or refuse with the reasons, and the observation ends (the next call trains anew) -- unless the
   candidate is **undecided**: not clearly worse (its value interval reaches above 0, its ECE does not regress).
   Then it stays under observation and is judged again once twice the questions of the last look have feedback
   (10, 20, 40, 80), up to ``MAX_LOOKS`` looks, each at a stricter level (``look_alpha``) so that looking again
   does not raise the chance of promoting a candidate that is no better.

The logged propensities are the router's probabilities (exploration in production: ``Settings.router_epsilon``,
``agentrt serve --explore``), so the estimates stay unbiased when the router in use explores.
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from agentrt.core.config import Settings
from agentrt.core.errors import InputError
from agentrt.router import registry
from agentrt.router.learned import RouterModel
from agentrt.train.router import MAX_WEIGHT, Example, calibration, load_examples
from agentrt.train.router_eval import MIN_HELD_QUESTIONS, PolicyEval, Verdict, auroc, bootstrap, compare, undecided

MIN_OBSERVED = 8  # rewarded runs with a shadow decision before the gate judges a candidate
MAX_LOOKS = 4  # judgments of one candidate under observation; an undecided one is refused at the last
COLLAPSE = 0.9  # a candidate that would take one non-answering action on this share of the judged runs is refused
NON_ANSWERING = ("abstain", "ask")


@dataclass
class TrafficReport:
    """What one ``learn --traffic`` step did: trained a candidate (``trained``), judged one (``judged``: promoted or
    refused; ``undecided``: kept under observation), or waited for traffic (``observing``)."""

    step: str  # trained | judged | undecided | observing (too few observed questions for a look yet) | refused
    version: str
    runs: int  # rewarded runs of traffic
    observed: int = 0  # rewarded runs with the candidate's shadow decision
    candidate: PolicyEval | None = None
    incumbent: PolicyEval | None = None
    verdict: Verdict | None = None
    promoted: bool = False
    heldout: dict[str, Any] = field(default_factory=dict)
    warnings: list[str] = field(default_factory=list)
    look: int = 0  # how many times the candidate under observation has been judged
    questions: int = 0  # the questions its shadow decisions with feedback cover
    refused: list[str] = field(default_factory=list)  # step "refused": why no candidate was trained, "check: why"

    def to_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {"step": self.step, "version": self.version, "runs": self.runs,
                               "observed": self.observed, "promoted": self.promoted, "heldout": self.heldout,
                               "warnings": self.warnings, "look": self.look, "questions": self.questions,
                               "refused": self.refused}
        for name in ("candidate", "incumbent"):
            p = getattr(self, name)
            out[name] = p.summary() if p is not None else None
        if self.verdict is not None:
            v = self.verdict
            out["verdict"] = {"promote": v.promote, "reasons": v.reasons, "difference": round(v.difference, 4),
                              "interval": [round(x, 4) for x in v.interval], "level": round(1 - v.alpha, 5)}
        return out


def traffic_examples(settings: Settings, fingerprint: registry.Fingerprint) -> list[Example]:
    """The home's runs that have a reward (feedback, or a verifier's), as training examples, less those of
    another policy (a router learns for the policy it will route for)."""
    directory = Path(settings.trajectory_dir)
    if not directory.is_dir():
        raise InputError(f"no traffic in {directory} yet: serve or run requests, then give feedback "
                         "(agentrt feedback RUN_ID --right/--wrong, POST /v1/feedback)")
    try:
        examples = load_examples([directory])
    except InputError:
        examples = []
    # a run names its policy in its decision (learned routers), else by the model its calls went to; a run that
    # names neither (a given route that made no call: abstain) counts for any
    examples = [e for e in examples if (e.logged or {}).get("policy", "") in ("", fingerprint.id)
                and (e.model in ("", fingerprint.model) or fingerprint.model.startswith(f"{e.model}+"))]  # tiered: base+...
    if not examples:
        raise InputError(f"no run of policy {fingerprint.id} in {directory} has feedback yet: give some (agentrt "
                         "feedback RUN_ID --right/--wrong, POST /v1/feedback, /good /bad in the REPL) before "
                         "learn --traffic")
    return examples


def learn_traffic(settings: Settings, fingerprint: registry.Fingerprint, *, lam: float = 0.3, holdout: float = 0.3,
                  folds: int = 5, seed: int = 0, rounds: int = 1000, min_observed: int = MIN_OBSERVED,
                  promote: bool = True, gate: str = "crossfit") -> TrafficReport:
    """One step of the traffic loop (see the module docstring)."""
    home = Path(settings.home)
    examples = traffic_examples(settings, fingerprint)
    watched = registry.observing(home, fingerprint.id)
    if watched is not None:
        return judge_observed(settings, fingerprint, watched, examples, lam=lam, seed=seed, rounds=rounds,
                      min_observed=min_observed, promote=promote)
    usable, notes = screen(examples)
    refused = refusals(usable)
    if refused:
        return TrafficReport("refused", "", len(examples), warnings=notes, refused=refused,
                             questions=len({e.question for e in usable}))
    report = _train(settings, fingerprint, usable, lam=lam, holdout=holdout, folds=folds, seed=seed, rounds=rounds,
                    gate=gate)
    report.warnings[:0] = notes
    return report


def screen(examples: list[Example]) -> tuple[list[Example], list[str]]:
    """The traffic a candidate may be trained on, and a line on what was left out (check ``forced-route``).

    Off-policy learning needs each run's action to be chosen without regard to its outcome: the router's choice
    (its logged probabilities are the propensity), or a caller's logging experiment that runs a question on
    several routes (``_logging_propensities``: the mixture, 1/K each). A route the caller gave on a question it
    ran on no other route is the caller's pick for that question -- it may know the verdict it will give (the
    flood of issue 56: 16 questions forced to abstain and marked right) -- so it carries no propensity of the
    router's and says nothing about what the router should do: it is left out."""
    given: dict[str, set[str]] = {}
    for e in examples:
        if e.logged is None:
            given.setdefault(e.question, set()).add(e.action)
    kept = [e for e in examples if e.logged is not None or len(given[e.question]) > 1]
    dropped = len(examples) - len(kept)
    notes = [f"check forced-route: left out {dropped} runs whose route the caller gave on a question it ran on no "
             "other route (the caller's pick, not the router's: no propensity to learn from); log routed traffic "
             "(agentrt serve --explore) or run each question on several routes"] if dropped else []
    return kept, notes


def refusals(examples: list[Example]) -> list[str]:
    """Why ``examples`` (screened) cannot train a candidate, one ``check NAME: why`` line each (empty: they can)."""
    out = []
    questions = len({e.question for e in examples})
    if questions < MIN_HELD_QUESTIONS:
        out.append(f"check too-few-questions: the usable runs with feedback cover {questions} questions (want >= "
                   f"{MIN_HELD_QUESTIONS}: the gate cannot judge a candidate on fewer)")
    actions = sorted({e.action for e in examples})
    if len(actions) < 2:
        out.append(f"check one-action: every usable run took {actions[0] if actions else 'no route'!r}: a router "
                   "learns nothing about choosing between routes from it")
    return out


def _train(settings: Settings, fingerprint: registry.Fingerprint, examples: list[Example], *, lam: float, holdout: float,
           folds: int, seed: int, rounds: int, gate: str = "crossfit") -> TrafficReport:
    from agentrt.train.learn import Incumbent, learn_round

    home = Path(settings.home)
    entry = registry.resolve_default(home, fingerprint)
    incumbent = Incumbent(entry if entry and entry.fingerprint_id == fingerprint.id else None)
    report = learn_round(examples, incumbent, settings, fingerprint, suites=["traffic"], lam=lam, holdout=holdout,
                         folds=folds, seed=seed, rounds=rounds, promote=False, gate=gate,
                         extra={"trained_on": "traffic", "observe": "decides in shadow until learn --traffic judges it"})
    collapsed = collapse(report.candidate.actions)
    if collapsed:  # registered (its report is kept), never observed nor promoted
        return TrafficReport("refused", report.version, len(examples), candidate=report.candidate,
                             incumbent=report.incumbent, heldout=report.to_dict(), warnings=report.warnings,
                             refused=[collapsed])
    registry.set_observe(home, fingerprint.id, {"version": report.version, "status": "observing",
                                                "since": round(time.time(), 3), "incumbent": incumbent.name})
    return TrafficReport("trained", report.version, len(examples), candidate=report.candidate,
                         incumbent=report.incumbent, heldout=report.to_dict(), warnings=report.warnings)


def collapse(chosen: dict[str, int]) -> str | None:
    """Check ``collapse``: a candidate that would abstain (or ask) on ``COLLAPSE`` of the judged runs or more answers
    nobody; from traffic that is a flood of verdicts, or a policy that cannot answer here -- either way not a router
    to put in front of users. Returns the refusal line, or None."""
    total = sum(chosen.values())
    for action in NON_ANSWERING:
        share = chosen.get(action, 0) / total if total else 0.0
        if share >= COLLAPSE:
            return (f"check collapse: the candidate would {action} on {share:.0%} of the judged runs (refused at >= "
                    f"{COLLAPSE:.0%}): a router that answers nobody is not learned from traffic")
    return None


def judge_observed(settings: Settings, fingerprint: registry.Fingerprint, watched: registry.Entry,
                   examples: list[Example], *, lam: float = 0.3, seed: int = 0, rounds: int = 1000,
                   min_observed: int = MIN_OBSERVED, promote: bool = True) -> TrafficReport:
    """Judge the candidate under observation (``watched``) on the runs it decided in shadow: promote it, refuse it,
    or keep it under observation when undecided (module docstring, step 2)."""
    home = Path(settings.home)
    rows = [e for e in examples if e.shadow and e.shadow.get("router_version") == watched.version
            and e.shadow.get("action") and e.logged]
    state = registry.observe_state(home).get(fingerprint.id) or {}
    looks, last = int(state.get("looks", 0)), int(state.get("looked_at", 0))
    questions = len({e.question for e in rows})
    # a look needs enough questions for its interval to mean anything (compare's MIN_HELD_QUESTIONS), and a later
    # one twice the questions of the last (10, 20, 40, 80): a look spends confidence (look_alpha), so none is spent
    # on little more than was already seen
    want = MIN_HELD_QUESTIONS if not looks else 2 * last
    if len(rows) < min_observed or questions < want:
        return TrafficReport("observing", watched.version, len(examples), observed=len(rows), look=looks,
                             questions=questions,
                             warnings=[f"{len(rows)} runs with feedback on {questions} questions were decided in "
                                       f"shadow by {watched.version} (the next look wants >= {want} questions): keep "
                                       "serving and giving feedback"])
    look = looks + 1
    alpha = look_alpha(look)
    model = RouterModel.load(watched.path)
    cand = _shadow_eval(watched.version, rows, model, lam, rounds, seed, shadow=True)
    inc = _shadow_eval(str(state.get("incumbent") or "in use"), rows, model, lam, rounds, seed, shadow=False)
    # a tail quantile needs enough bootstrap rounds to be more than the sample's extreme
    verdict = compare(cand, inc, rows, rounds=max(rounds, math.ceil(10 / alpha)), seed=seed, alpha=alpha)
    # undecided (router_eval.undecided: not clearly worse) before the last look: kept under observation
    observing = undecided(verdict) and look < MAX_LOOKS
    promoted = bool(verdict.promote and promote)
    if promoted:
        registry.promote(home, watched.version)
    status = "observing" if observing else "promoted" if promoted else "refused"
    registry.set_observe(home, fingerprint.id, {
        **state, "status": status, "judged": round(time.time(), 3), "observed": len(rows), "looks": look,
        "looked_at": questions,
        "verdict": {"promote": verdict.promote, "undecided": observing, "reasons": verdict.reasons,
                    "difference": round(verdict.difference, 4), "interval": [round(x, 4) for x in verdict.interval],
                    "level": round(1 - alpha, 5), "look": look,
                    "candidate_value": round(cand.value, 4), "incumbent_value": round(inc.value, 4)}})
    return TrafficReport("undecided" if observing else "judged", watched.version, len(examples), observed=len(rows),
                         candidate=cand, incumbent=inc, verdict=verdict, promoted=promoted, look=look,
                         questions=questions)


def look_alpha(look: int, alpha: float = 0.05) -> float:
    """The value interval's level at the ``look``-th judgment of one candidate: 1 - alpha * 6 / (pi^2 look^2)
    (97.0%, 99.2%, 99.7%, 99.8%). The shares sum to alpha over every look, so a candidate no better than the router
    in use is promoted at some look with at most the chance one 95% judgment gives it (the union bound)."""
    return alpha * 6 / (math.pi ** 2 * look ** 2)


def _shadow_eval(name: str, rows: list[Example], model: RouterModel, lam: float, rounds: int, seed: int, *,
                 shadow: bool) -> PolicyEval:
    """A policy's DR value on logged runs, from its choice on each run: the candidate's shadow decision
    (``shadow``), or the router in use's greedy choice (the logged distribution's mode). The reward model q is
    the candidate's (p_success - lambda tokens / budget), the same for both, so the difference is paired."""
    terms, succ, toks, calls, chosen = [], [], [], [], {}
    probs, outcomes = [], []
    for e in rows:
        logged = e.logged or {}
        if shadow:
            pick, p_taken = e.shadow["action"], (e.shadow.get("p_success") or {}).get(e.action)
        else:
            dist = logged.get("probabilities") or {e.action: 1.0}
            pick, p_taken = max(dist, key=lambda a: dist[a]), (logged.get("p_success") or {}).get(e.action)
        chosen[pick] = chosen.get(pick, 0) + 1
        qp, qt = model.predict(e.x)
        # the probability the logging router gave the action it took on this very run (it was routed: observed)
        mu = max(1e-3, float((logged.get("probabilities") or {}).get(e.action, e.propensity)))
        w = min(MAX_WEIGHT, 1 / mu) * float(pick == e.action)
        value = lambda a: qp.get(a, 0.0) - lam * qt.get(a, 0.0) / e.budget  # noqa: E731
        terms.append(value(pick) + w * (e.reward - lam * e.tokens / e.budget - value(e.action)))
        succ.append(qp.get(pick, 0.0) + w * (e.success - qp.get(e.action, 0.0)))
        toks.append(qt.get(pick, 0.0) + w * (e.tokens - qt.get(e.action, 0.0)))
        calls.append((float(p_taken), e.success) if p_taken is not None else None)
        if p_taken is not None:
            probs.append(float(p_taken))
            outcomes.append(e.success)
    n = max(1, len(rows))
    return PolicyEval(name=name, value=sum(terms) / n, interval=bootstrap(terms, [e.question for e in rows], rounds, seed),
                      success=sum(succ) / n, tokens=sum(toks) / n,
                      ece=calibration(probs, outcomes)["ece"] if probs else None, auroc=auroc(probs, outcomes),
                      ece_floor=None, abstain_precision=None, abstain_recall=None, actions=chosen, terms=terms,
                      calls=calls)
