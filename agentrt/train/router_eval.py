"""Off-policy evaluation of routers on a held-out slice of logged runs, and the promotion rule.

Each held-out run logged (question features x, action a, propensity mu, reward r, success s, tokens t).
A router is evaluated as the deterministic policy it runs (the utility rule, its floors included):

    DR value = mean_i [ q(x_i, pi(x_i)) + 1{pi(x_i) = a_i} (r_i - q(x_i, a_i)) / mu_i ],   r = reward - lambda t / budget

with q the candidate's own reward model (fit on the training slice only, so it never saw these runs).
The interval is a bootstrap over questions; the candidate is compared with the incumbent by the paired
difference of their per-run terms, so both are judged on the same runs. ECE and AUROC score each router's
p_success for the action actually taken against the verifier's verdict; abstain precision/recall count
its abstentions against the items whose right answer is to abstain.
"""

from __future__ import annotations

import math
import random
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from agentrt.core.config import Settings
from agentrt.router.decision import UtilityConfig, choose
from agentrt.router.features import NUMERIC_FEATURES
from agentrt.router.learned import DEFAULT_FLOORS, RouterModel
from agentrt.train.router import MAX_WEIGHT, Example, calibration, ece_floor

# A policy's view of one example: (p_success per action, expected tokens per action)
Estimator = Callable[[Example], tuple[dict[str, float], dict[str, float]]]


def model_estimator(model: RouterModel) -> Estimator:
    """A learned router file's estimates."""
    return lambda e: model.predict(e.x)


def rules_estimator(settings: Settings) -> Estimator:
    """The rule priors' estimates (what ``rules`` decides with)."""
    from agentrt.router.rules import expected_tokens, rule_p_success

    def estimate(e: Example) -> tuple[dict[str, float], dict[str, float]]:
        f = dict(zip(NUMERIC_FEATURES, e.x))
        return rule_p_success(f), expected_tokens(f, settings)

    return estimate


def deciding_estimator(model: RouterModel, settings: Settings) -> tuple[Estimator, Callable[[Example], bool]]:
    """The learned router as the runtime runs it (``LearnedRouter``): its own estimates where the action it
    would take has evidence (``router_min_evidence`` similar training runs), else the documented fallback's
    (estimates shrunk toward each action's training rate on the runs sharing the question's rarest cue,
    ``evidence.shrunk``, ``RouterModel.prior``; the rules' for a file without
    base rates). Returns (estimator, calibrated): ``calibrated(e)`` says whether the learned estimate decided."""
    from agentrt.router.evidence import CORPUS_BOUND, shrunk

    rules = rules_estimator(settings)
    minimum = float(getattr(settings, "router_min_evidence", 3.0))
    cfg = config(model.lam, tuple(model.actions))
    base = model.base_rates
    cache: dict[int, tuple[tuple[dict[str, float], dict[str, float]], bool]] = {}

    def decide(e: Example) -> tuple[tuple[dict[str, float], dict[str, float]], bool]:
        if id(e) not in cache:
            p, t = model.predict(e.x)
            pick = choose("learned", p, t, e.budget, cfg).action
            sizes, shared, _ = model.corpus_sizes(e.x, e.corpus)
            ok = sizes.get(pick, 0.0) >= minimum
            # the corpus bound changes what is marked calibrated, not what decides (LearnedRouter): a corpus-bound
            # action with evidence over other corpora only decides on their estimate; shrinking reads every corpus
            if ok or (pick in CORPUS_BOUND and shared.get(pick, 0.0) >= minimum):
                cache[id(e)] = ((p, t), ok)
            else:
                cache[id(e)] = ((shrunk(p, shared, model.prior(e.x, minimum)[0], minimum), t) if base else rules(e), ok)
        return cache[id(e)]

    return (lambda e: decide(e)[0]), (lambda e: decide(e)[1])


@dataclass
class PolicyEval:
    """A router's held-out figures."""

    name: str
    value: float
    interval: tuple[float, float]
    success: float  # DR estimate of the verifier's pass rate
    tokens: float  # DR estimate of tokens per run
    ece: float | None
    auroc: float | None
    # the ECE a perfectly calibrated router would show on these runs (outcomes drawn from its own p_success):
    # the sampling noise of the measurement; an ECE near it is as good as this many runs can show
    ece_floor: float | None
    abstain_precision: float | None
    abstain_recall: float | None
    actions: dict[str, int] = field(default_factory=dict)  # what it chose, over the held-out runs
    reliability: dict[str, list[dict[str, Any]]] = field(default_factory=dict)  # per action
    terms: list[float] = field(default_factory=list, repr=False)
    # per held-out run, (p_success of the action taken, success), None when it does not model that action:
    # what the paired bootstrap of an ECE difference resamples
    calls: list[tuple[float, float] | None] = field(default_factory=list, repr=False)

    def summary(self) -> dict[str, Any]:
        return {k: (round(v, 4) if isinstance(v, float) else v) for k, v in self.__dict__.items()
                if k not in ("terms", "calls")} | {
            "interval": [round(self.interval[0], 4), round(self.interval[1], 4)]}


def auroc(scores: list[float], labels: list[float]) -> float | None:
    """Area under the ROC curve (the chance a success outranks a failure; ties count half)."""
    pos = [s for s, y in zip(scores, labels) if y >= 0.5]
    neg = [s for s, y in zip(scores, labels) if y < 0.5]
    if not pos or not neg:
        return None
    order = sorted(scores)
    rank: dict[float, float] = {}
    i = 0
    while i < len(order):  # mean rank of ties
        j = i
        while j < len(order) and order[j] == order[i]:
            j += 1
        rank[order[i]] = (i + j + 1) / 2
        i = j
    return (sum(rank[s] for s in pos) - len(pos) * (len(pos) + 1) / 2) / (len(pos) * len(neg))


def bootstrap(terms: list[float], groups: list[str], rounds: int = 1000, seed: int = 0,
              alpha: float = 0.05) -> tuple[float, float]:
    """The (1 - alpha) percentile interval (95% by default) of the mean of ``terms``, resampling whole groups
    (questions)."""
    by: dict[str, list[float]] = {}
    for t, g in zip(terms, groups):
        by.setdefault(g, []).append(t)
    keys = sorted(by)
    if not keys:
        return (0.0, 0.0)
    rng = random.Random(seed)
    means = []
    for _ in range(rounds):
        picked = [by[keys[rng.randrange(len(keys))]] for _ in keys]
        n = sum(len(p) for p in picked)
        means.append(sum(sum(p) for p in picked) / n)
    means.sort()
    return means[int(alpha / 2 * rounds)], means[min(rounds - 1, int((1 - alpha / 2) * rounds))]


def config(lam: float, actions: tuple[str, ...], floors: dict[str, float] | None = None) -> UtilityConfig:
    """The utility rule the runtime applies to a learned router (its default floors included)."""
    return UtilityConfig(lam=lam, actions=actions, floors={**DEFAULT_FLOORS, **(floors or {})})


def greedy(name: str, estimate: Estimator, e: Example, cfg: UtilityConfig) -> tuple[str, dict[str, float]]:
    """The action the utility rule ``cfg`` takes on ``e`` from ``estimate``, and the p_success it chose among
    (the estimates of ``cfg``'s actions)."""
    p, tokens = estimate(e)
    p = {a: v for a, v in p.items() if a in cfg.actions}
    return choose(name, p, {a: tokens[a] for a in p}, e.budget, cfg).action, p


def evaluate(name: str, estimate: Estimator, q: Estimator, examples: list[Example], cfg: UtilityConfig,
             rounds: int = 1000, seed: int = 0, pick: Callable[[Example], str] | None = None) -> PolicyEval:
    """DR value (with interval), success, tokens, ECE, AUROC and abstain precision/recall on ``examples``.
    ``pick``: the policy's action per example when it is not the utility rule over ``estimate`` (a self router)."""
    terms, succ, toks, probs, outcomes = [], [], [], [], []
    calls: list[tuple[float, float] | None] = []
    per_action: dict[str, tuple[list[float], list[float]]] = {}
    chosen: dict[str, int] = {}
    abstained: dict[str, bool] = {}  # per question: did the policy abstain
    unanswerable: dict[str, bool] = {}
    lam = cfg.lam
    for e in examples:
        action, p = greedy(name, estimate, e, cfg)
        action = pick(e) if pick else action
        chosen[action] = chosen.get(action, 0) + 1
        abstained[e.question] = action == "abstain"
        unanswerable[e.question] = not e.answerable
        qp, qt = q(e)
        w = min(MAX_WEIGHT, 1 / e.propensity) * float(action == e.action)
        value = lambda a: qp.get(a, 0.0) - lam * qt.get(a, 0.0) / e.budget  # noqa: E731
        reward = e.reward - lam * e.tokens / e.budget
        terms.append(value(action) + w * (reward - value(e.action)))
        succ.append(qp.get(action, 0.0) + w * (e.success - qp.get(e.action, 0.0)))
        toks.append(qt.get(action, 0.0) + w * (e.tokens - qt.get(e.action, 0.0)))
        calls.append((p[e.action], e.success) if e.action in p else None)
        if e.action in p:
            probs.append(p[e.action])
            outcomes.append(e.success)
            per_action.setdefault(e.action, ([], []))[0].append(p[e.action])
            per_action[e.action][1].append(e.success)
    n = max(1, len(examples))
    said = sum(abstained.values())
    hits = sum(1 for qn, a in abstained.items() if a and unanswerable[qn])
    total_unanswerable = sum(unanswerable.values())
    return PolicyEval(
        name=name, value=sum(terms) / n, interval=bootstrap(terms, [e.question for e in examples], rounds, seed),
        success=sum(succ) / n, tokens=sum(toks) / n,
        ece=calibration(probs, outcomes)["ece"] if probs else None, auroc=auroc(probs, outcomes),
        ece_floor=ece_floor(probs, seed=seed) if probs else None,
        abstain_precision=hits / said if said else None,
        abstain_recall=hits / total_unanswerable if total_unanswerable else None, actions=chosen,
        reliability={a: calibration(ps, ys)["reliability"] for a, (ps, ys) in sorted(per_action.items())},
        terms=terms, calls=calls)


def fixed_estimator(action: str) -> Estimator:
    """A fixed action as a policy (p_success 1 for it, 0 elsewhere: the utility rule always picks it)."""
    return lambda e: ({action: 1.0}, {action: 0.0})


@dataclass
class Verdict:
    promote: bool
    reasons: list[str]
    difference: float
    interval: tuple[float, float]
    flags: list[str]
    # candidate ECE - incumbent ECE on the held-out runs, and its paired 95% bootstrap interval (None: unmeasured)
    ece_difference: float | None = None
    ece_interval: tuple[float, float] | None = None
    alpha: float = 0.05  # the value interval's level is 1 - alpha
    ece_regressed: bool = False  # one of the reasons: its ECE regresses beyond its noise

    def lines(self) -> list[str]:
        """The verdict as printed: the value interval (which decides) and the ECE difference's (its noise)."""
        lo, hi = self.interval
        out = [f"value difference {self.difference:+.4f}, {level(self.alpha)} interval [{lo:+.4f}, {hi:+.4f}]"]
        if self.ece_difference is not None and self.ece_interval is not None:
            elo, ehi = self.ece_interval
            out.append(f"ECE difference {self.ece_difference:+.4f}, 95% interval [{elo:+.4f}, {ehi:+.4f}] "
                       "(a regression only when the whole interval is above 0)")
        return out


def ece_difference(candidate: PolicyEval, incumbent: PolicyEval, examples: list[Example], rounds: int = 1000,
                   seed: int = 0) -> tuple[float, tuple[float, float]] | None:
    """Candidate ECE minus incumbent ECE and its 95% interval, resampling whole questions (both routers
    judged on the same resampled runs). None when either router's calibration cannot be measured."""
    if (candidate.ece is None or incumbent.ece is None or len(candidate.calls) != len(examples)
            or len(incumbent.calls) != len(examples)):
        return None
    by: dict[str, list[int]] = {}
    for i, e in enumerate(examples):
        by.setdefault(e.question, []).append(i)
    keys = sorted(by)

    def ece(calls: list[tuple[float, float] | None], rows: list[int]) -> float | None:
        pairs = [c for c in (calls[i] for i in rows) if c is not None]
        return calibration([p for p, _ in pairs], [y for _, y in pairs])["ece"] if pairs else None

    rng = random.Random(seed)
    diffs = []
    for _ in range(rounds):
        rows = [i for _ in keys for i in by[keys[rng.randrange(len(keys))]]]
        c, inc = ece(candidate.calls, rows), ece(incumbent.calls, rows)
        if c is not None and inc is not None:
            diffs.append(c - inc)
    if not diffs:
        return None
    diffs.sort()
    n = len(diffs)
    return candidate.ece - incumbent.ece, (diffs[int(0.025 * n)], diffs[min(n - 1, int(0.975 * n))])


# A bootstrap over fewer clusters than this is overconfident: on 8 held-out questions a candidate trained on
# shuffled rewards "won" by +0.54 [+0.51, +0.59] (evals/bench/family_bench.py, N = 25); the gate refuses
MIN_HELD_QUESTIONS = 10


def compare(candidate: PolicyEval, incumbent: PolicyEval, examples: list[Example], *, ece_tolerance: float = 0.01,
            rounds: int = 1000, seed: int = 0, alpha: float = 0.05) -> Verdict:
    """Promote only when the paired value difference's lower bound is above 0 (the value interval decides)
    and ECE does not regress beyond its noise: an ECE higher by more than ``ece_tolerance`` is a
    regression only when the paired bootstrap interval of the ECE difference lies above 0 (inside it, two
    equally calibrated routers differ that much on so few runs). The overoptimization flags (collapse to
    one action, winning by abstaining) block too, and so does a held-out slice of fewer than
    ``MIN_HELD_QUESTIONS`` questions. ``alpha``: the value interval's level (1 - alpha; the traffic loop's later
    looks at one candidate use a smaller one, ``traffic.look_alpha``)."""
    diff = [c - i for c, i in zip(candidate.terms, incumbent.terms)]
    lo, hi = bootstrap(diff, [e.question for e in examples], rounds, seed, alpha)
    mean = sum(diff) / max(1, len(diff))
    reasons, flags = [], guard(candidate, examples)
    held = len({e.question for e in examples})
    if held < MIN_HELD_QUESTIONS:
        reasons.append(f"only {held} held-out questions: too few for its interval to mean anything (at least "
                       f"{MIN_HELD_QUESTIONS}); learn on more items")
    if lo <= 0:
        reasons.append(f"its value is not better by the interval: difference {mean:+.4f}, {level(alpha)} interval "
                       f"[{lo:+.4f}, {hi:+.4f}] includes 0 or less")
    noise = ece_difference(candidate, incumbent, examples, rounds, seed)
    regressed = False
    if noise is not None:
        d, (elo, ehi) = noise
        if regressed := d > ece_tolerance and elo > 0:
            reasons.append(f"its ECE regresses beyond its noise: {candidate.ece:.4f} vs the incumbent's "
                           f"{incumbent.ece:.4f}, difference {d:+.4f}, 95% interval [{elo:+.4f}, {ehi:+.4f}] above 0")
    elif candidate.ece is not None and incumbent.ece is not None and candidate.ece > incumbent.ece + ece_tolerance:
        regressed = True
        reasons.append(f"its ECE regresses: {candidate.ece:.4f} vs the incumbent's {incumbent.ece:.4f}")
    if candidate.ece is None:
        reasons.append("its calibration could not be measured (no held-out run took an action it models)")
    reasons += [f"overoptimization: {f}" for f in flags]
    return Verdict(not reasons, reasons, mean, (lo, hi), flags, None if noise is None else noise[0],
                   None if noise is None else noise[1], alpha, regressed)


def undecided(verdict: Verdict) -> bool:
    """Not promoted, yet not clearly worse: its value interval reaches above 0 and its ECE does not regress beyond
    its noise (what else refuses it, too few questions or a guard flag, is a property of a small sample too). More
    questions may settle it: the traffic loop keeps such a candidate under observation, `agentrt learn` says what
    would (the paired interval's width is mostly between questions: three runs of each of 100 questions instead of
    one narrowed it on hotpotqa-index, +-0.16 -> +-0.10, and not on hotpotqa-heldout; docs/results/routing.md)."""
    return not verdict.promote and verdict.interval[1] > 0 and not verdict.ece_regressed


def level(alpha: float) -> str:
    """An interval's confidence level as printed: "95%", "98.5%"."""
    return f"{round(100 * (1 - alpha), 2):g}%"


def guard(candidate: PolicyEval, examples: list[Example]) -> list[str]:
    """Signs that a router wins by gaming the signal: collapsing to one action, or abstaining on answerable items."""
    flags = []
    total = sum(candidate.actions.values())
    if total >= 10 and len({e.action for e in examples}) > 1:
        top, count = max(candidate.actions.items(), key=lambda kv: kv[1])
        if count / total > 0.95:
            flags.append(f"it chose '{top}' on {count} of {total} held-out runs (collapsed to one action)")
    answerable = {e.question for e in examples if e.answerable}
    if total >= 10 and answerable and candidate.abstain_precision is not None and candidate.abstain_precision < 0.5:
        flags.append(f"most of its abstentions are on answerable questions (abstain precision "
                     f"{candidate.abstain_precision:.2f})")
    return flags


def drift(a: dict[str, int], b: dict[str, int]) -> float:
    """Total variation distance between two action mixes (0: the same mix, 1: disjoint)."""
    ta, tb = max(1, sum(a.values())), max(1, sum(b.values()))
    return 0.5 * sum(abs(a.get(k, 0) / ta - b.get(k, 0) / tb) for k in set(a) | set(b))


def split(examples: list[Example], holdout: float, seed: int = 0) -> tuple[list[Example], list[Example]]:
    """(train, held out) by question: a stable hash, so a question stays on its side across rounds and reruns."""
    import hashlib

    def side(q: str) -> bool:
        h = int.from_bytes(hashlib.blake2b(f"{seed}:{q}".encode(), digest_size=4).digest(), "little")
        return (h % 10_000) / 10_000 < holdout

    held = [e for e in examples if side(e.question)]
    return [e for e in examples if not side(e.question)], held


def finite(x: float | None) -> float | None:
    return None if x is None or math.isnan(x) else x
