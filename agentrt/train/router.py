"""Fit the learned router from logged trajectories with rewards (off-policy).

Each usable record gives (question, features, action taken, propensity, reward, tokens). The success
model of an action is fit on the runs that took it, weighted by 1/propensity (inverse propensity
weighting, clipped), so a logging policy that rarely tried an action does not bias its estimate.
Cross-fitting by question (k folds): out-of-fold predictions pick each success model's L2 strength
(with a few hundred runs and ~140 inputs an unregularized fit memorizes questions) and one calibration
temperature, by log-loss, and measure ECE, Brier score and the learned policy's value (IPS and
doubly-robust). The saved model is then fit on all runs with the chosen strengths and temperature.

Two labels per run: *success* (the verifier's pass/fail verdict) is what p_success predicts and what ECE
is measured against; the *reward* r = score - lambda * tokens / budget gives partial credit where the
verifier does (IFEval's per-instruction fraction, F1) and is what the policy value estimates.
Training p_success on partial credit would inflate it: IFEval direct runs score 0.27 on average but
pass only 14% of the time.
"""

from __future__ import annotations

import math
import random
from dataclasses import dataclass
from pathlib import Path
from collections.abc import Sequence
from typing import Any

from agentrt.core.errors import InputError
from agentrt.router import evidence
from agentrt.router.decision import UtilityConfig, choose
from agentrt.router.features import INDEX_FEATURES, NUMERIC_FEATURES, STATEFUL_FEATURES, extract, vectorize
from agentrt.router.learned import ActionModel, RouterModel, sigmoid
from agentrt.trajectory import ReadReport, read_trajectories

MAX_WEIGHT = 20.0  # clip 1/propensity: a few rare actions must not dominate the fit
# L2 strengths (on the weighted mean log-loss), one for the numeric features and one for the hashed
# words: the words are 128 noisy inputs, so an action with few successes needs them held much tighter
Strength = tuple[float, float]  # (numeric features, hashed words)
# HOLD: so strong that only the intercept moves: p_success is the action's weighted base rate
HOLD: Strength = (1e3, 1e3)
L2_GRID: tuple[Strength, ...] = tuple((numeric, words) for numeric in (1e-3, 1e-2, 0.1)
                                      for words in (1e-3, 1e-2, 0.1, 1.0)) + (HOLD,)
TOKENS_L2: Strength = (1e-2, 1e-2)
TEMPERATURES = (0.5, 0.7, 0.85, 1.0, 1.25, 1.5, 2.0, 3.0, 5.0)  # calibration: logits / T
# Below these the fit still runs, but ``data_warnings`` says why its numbers cannot be trusted: a success
# model per action has ~140 inputs (held by L2), so an action needs a few dozen runs, with both outcomes,
# before its p_success means anything; and the out-of-fold report (ECE, policy value) is over questions.
MIN_RUNS_PER_ACTION = 30
# the pseudo-runs at the pooled success rate every action's success model starts from (``_fit_routers``): the
# evidence threshold's count (evidence.MIN_EVIDENCE), the same pull the fallback's shrinkage uses
PRIOR_RUNS = evidence.MIN_EVIDENCE
MIN_QUESTIONS = 20
# the evidence kernel's inputs (agentrt.router.evidence): None = all, hashed words included. Measured on three
# document families left out in turn (evals/bench/family_bench.py --evidence numeric|all, docs/results/routing.md): the
# numeric features alone marked fewer left-out decisions calibrated and gave lower value, so all it is
EVIDENCE_DIMS: int | None = None


@dataclass
class Example:
    question: str
    x: list[float]
    action: str
    propensity: float  # mu(action | question): the logging policy's probability, see _logging_propensities
    probs: dict[str, float]  # this row's router distribution over actions
    success: float  # the verifier's verdict (1.0 / 0.0), or a reward read as a chance of success (see _success)
    reward: float  # the score, with partial credit
    tokens: float
    budget: int
    answerable: bool = True  # False for items whose right answer is to abstain (type unanswerable)
    key: str = ""  # the run's task key (metadata task_key), when it came from an eval / learn run
    source: str = ""  # the trajectory folder or file it was read from
    shadow: dict[str, Any] | None = None  # observe mode: what a candidate router would have decided (its step)
    logged: dict[str, Any] | None = None  # the route_decision step as logged (None: the route was given)
    model: str = ""  # the policy model its first model call named ("" when it made none)
    # the corpus its index features were read from (evidence.corpus_key: "" without an index; "?" for a run over
    # an index logged before runs named it): its abstain outcome is evidence about that corpus only
    corpus: str = ""


def _features(rec: Any, decision: dict[str, Any] | None) -> dict[str, float]:
    """The features a router of this version sees for the logged run: those of the question and its
    conversation recomputed by ``extract`` (deterministic, so a run logged before a feature existed still
    teaches it), and the index and episodic ones as logged (they depend on the index and the episodes at run
    time; 0 when the run logged none: no index was asked)."""
    history = (rec.metadata or {}).get("history") or []
    features = extract(rec.question, history=history)
    logged = (decision or {}).get("features") or {}
    for name in INDEX_FEATURES + STATEFUL_FEATURES:
        features[name] = float(logged.get(name, 0.0))
    return features


def _contains_gold(rec: Any) -> bool:
    """A QA answer that states a gold answer ("The capital of Italy is Rome." for "Rome"): the normalized
    gold's tokens appear, in order and contiguous, in the normalized answer."""
    from agentrt.trajectory.rewards import normalize_answer

    golds = rec.task.ground_truth if isinstance(rec.task.ground_truth, list) else [rec.task.ground_truth]
    said = f" {normalize_answer(rec.answer or '')} "
    return any(n and f" {n} " in said for n in (normalize_answer(str(g)) for g in golds if g))


def _success(rec: Any) -> float:
    """The verifier's pass/fail verdict when the record has one; otherwise the reward clipped to
    [0, 1], read as a probability of success (records from before verdicts were stored).

    A QA verdict is exact match, which fails every full-sentence answer; a router trained on it learns that
    routes giving terse answers succeed and full sentences fail (the signal, not the answers). For QA, an
    answer that states a gold answer counts as a success."""
    if rec.task is not None and rec.task.verifier == "qa" and rec.answer and _contains_gold(rec):
        return 1.0
    verdicts = [r.correct for r in rec.rewards.values() if r.correct is not None]
    if verdicts:
        return float(all(verdicts))
    return min(1.0, max(0.0, float(rec.reward)))


def load_examples(paths: list[str | Path], *, strict: bool = False, read_report: ReadReport | None = None) -> list[Example]:
    """Usable records: a reward, a route, and a propensity (fixed routes count as 1). Corrupt lines are
    skipped (listed in ``read_report`` when given) unless ``strict``, which raises on the first one."""
    out = []
    for path in paths:
        read = read_trajectories(path, strict=strict)
        if read_report is not None:
            read_report.absorb(read)
        for rec in read.records:
            if rec.reward is None or rec.status == "failed" or (rec.metadata or {}).get("endpoint") == "completions":
                continue  # a /v1/completions call (agentrt.app.server.run) decided no route: nothing to learn
            decision = next((s for s in rec.steps if s.get("kind") == "route_decision"), None)
            probs = dict(decision.get("probabilities") or {}) if decision else {}
            if not probs.get(rec.route):
                probs = {rec.route: 1.0}  # a route given by the caller (a fixed policy)
            features = _features(rec, decision)
            x = vectorize(features, rec.question)
            answerable = getattr(rec.task, "ability", None) != "unanswerable" if rec.task else True
            out.append(Example(rec.question, x, rec.route, 1.0, probs, _success(rec), float(rec.reward),
                               float(rec.usage.get("total_tokens", 0)), int(rec.budget.get("total", 1) or 1),
                               answerable, str((rec.metadata or {}).get("task_key", "")), str(path),
                               (decision or {}).get("shadow"), decision,
                               next((str(s.get("model") or "") for s in rec.steps if s.get("kind") == "model_call"), ""),
                               evidence.corpus_key(features, (decision or {}).get("corpus"))))
    if not out:
        raise InputError("no trajectories with rewards found; run `agentrt eval` (it records rewards) first")
    _logging_propensities(out)
    return out


def _logging_propensities(examples: list[Example]) -> None:
    """mu(a|x) of the logging policy = the mixture of the routers that logged question x.

    With one exploring router this is its propensity; with every fixed action run on every question
    (the cached collection the benchmark uses) it is 1/K, and IPS reduces to the exact average.
    """
    by_question: dict[str, list[Example]] = {}
    for e in examples:
        by_question.setdefault(e.question, []).append(e)
    for rows in by_question.values():
        for e in rows:
            e.propensity = max(1e-3, sum(r.probs.get(e.action, 0.0) for r in rows) / len(rows))


def _standardize(rows: list[list[float]]) -> tuple[list[float], list[float]]:
    """Standardize the numeric features; the hashed embedding is already unit-norm and stays as is
    (scaling its rare dimensions up would let the fit memorize individual words)."""
    n, d = len(rows), len(rows[0])
    k = len(NUMERIC_FEATURES)
    mean = [sum(r[j] for r in rows) / n for j in range(k)] + [0.0] * (d - k)
    std = [math.sqrt(sum((r[j] - mean[j]) ** 2 for r in rows) / n) or 1.0 for j in range(k)] + [1.0] * (d - k)
    return mean, std


def _logistic(Z, y, w, penalty):
    """Weighted logistic regression, L2 penalty per column (on the weighted mean log-loss), by Newton's
    method: exact and a few ms at this size (gradient descent's step count was a hidden regularizer)."""
    import numpy as np

    W = w / w.sum()
    coef = np.zeros(Z.shape[1])
    for _ in range(50):
        p = 1 / (1 + np.exp(-np.clip(Z @ coef, -30, 30)))
        grad = Z.T @ (W * (p - y)) + penalty * coef
        hess = (Z.T * (W * p * (1 - p))) @ Z + np.diag(penalty + 1e-9)
        step = np.linalg.solve(hess, grad)
        coef -= step
        if np.abs(step).max() < 1e-7:
            break
    return coef


def _ridge(Z, y, w, penalty):
    """Weighted ridge regression (closed form), L2 penalty per column."""
    import numpy as np

    W = w / w.sum()
    return np.linalg.solve((Z.T * W) @ Z + np.diag(penalty + 1e-9), Z.T @ (W * y))


def calibration(probs: list[float], outcomes: list[float], bins: int = 10) -> dict[str, Any]:
    """ECE, Brier score and a reliability table."""
    table, ece = [], 0.0
    for b in range(bins):
        idx = [i for i, p in enumerate(probs) if b / bins <= p < (b + 1) / bins or (b == bins - 1 and p == 1.0)]
        if not idx:
            continue
        conf = sum(probs[i] for i in idx) / len(idx)
        acc = sum(outcomes[i] for i in idx) / len(idx)
        ece += len(idx) / len(probs) * abs(conf - acc)
        table.append({"bin": f"{b / bins:.1f}-{(b + 1) / bins:.1f}", "n": len(idx), "confidence": round(conf, 3), "accuracy": round(acc, 3)})
    brier = sum((p - o) ** 2 for p, o in zip(probs, outcomes)) / max(1, len(probs))
    return {"ece": round(ece, 4), "brier": round(brier, 4), "reliability": table, "n": len(probs)}


def ece_floor(probs: list[float], rounds: int = 200, seed: int = 0) -> float:
    """Mean ECE of a perfectly calibrated predictor with these probabilities: outcomes drawn as Bernoulli(p),
    binned as ``calibration`` bins them. On a few dozen runs it is itself 0.05-0.15 (each bin's success rate
    is a small-sample mean), so an ECE target below it cannot be met, or told apart from luck, at that size."""
    rng = random.Random(seed)
    total = 0.0
    for _ in range(rounds):
        total += calibration(probs, [float(rng.random() < p) for p in probs])["ece"]
    return round(total / rounds, 4)


def train_router(paths: list[str | Path], *, lam: float = 0.3, folds: int = 5, seed: int = 0, strict: bool = False,
                 read_report: ReadReport | None = None, examples: list[Example] | None = None,
                 prior: dict[str, float] | None = None) -> RouterModel:
    """Fit, calibrate and evaluate a learned router; the report is in ``model.metrics``.

    Cross-fitting by question: every run is predicted by models fit on the other folds' questions.
    Those out-of-fold predictions choose each action's L2 strength and the calibration temperature
    (lowest log-loss) and give the report (ECE, Brier, policy value). The returned model is then fit
    on all runs with the chosen strengths and temperature. ``strict`` / ``read_report``: see ``load_examples``.
    ``examples``: fit on these (already loaded, e.g. a training slice) instead of reading ``paths``.
    ``prior``: per action, the success rate its ``PRIOR_RUNS`` pseudo-runs carry (``agentrt learn`` passes the
    router in use's base rates: what it knew before this data); an action without one, and every action when
    None, gets the pooled rate of ``examples``.
    """
    if examples is None:
        examples = load_examples(paths, strict=strict, read_report=read_report)
    questions = sorted({e.question for e in examples})
    if len(questions) < 2:
        raise InputError("need rewarded runs on at least 2 different questions to calibrate a router")
    random.Random(seed).shuffle(questions)
    k = max(2, min(folds, len(questions)))
    fold_of = {q: i % k for i, q in enumerate(questions)}
    # out-of-fold predictions per L2 strength: oof[l2][i] = logits of examples[i]; tokens[i] (no L2 grid)
    oof: dict[Strength, dict[int, dict[str, float]]] = {l2: {} for l2 in L2_GRID}
    tokens: dict[int, dict[str, float]] = {}
    support: dict[int, float] = {}  # out-of-fold evidence for the action each run took
    for fold in range(k):
        rows = [e for e in examples if fold_of[e.question] != fold]
        models = _fit_routers(rows, lam, L2_GRID, prior)
        for i, e in enumerate(examples):
            if fold_of[e.question] == fold:
                tokens[i] = models[0].predict(e.x)[1]
                support[i] = models[0].effective_sizes(e.x, e.corpus)[0].get(e.action, 0.0)
                for l2, model in zip(L2_GRID, models):
                    oof[l2][i] = model.logits(e.x)
    actions = sorted({e.action for e in examples})
    pick = {a: min(L2_GRID, key=lambda l2: _nll([(oof[l2][i].get(a), e.success) for i, e in enumerate(examples)
                                                 if e.action == a])) for a in actions}
    # An action with few runs cannot choose its strength by cross-validation (18 plan runs weighted up to 20x
    # picked the weakest hold on the words and memorized one "capital of" success: p_success 0.63 for plan
    # on "What is the capital of France?"): it gets its weighted base rate, whatever the question.
    runs = {a: sum(e.action == a for e in examples) for a in actions}
    pick = {a: (HOLD if runs[a] < MIN_RUNS_PER_ACTION else l2) for a, l2 in pick.items()}
    logits = [{a: oof[pick[a]][i].get(a) for a in actions} for i in range(len(examples))]
    own = [(logits[i][e.action], e.success) for i, e in enumerate(examples)]
    temperature = min(TEMPERATURES, key=lambda t: _nll([(z / t if z is not None else None, y) for z, y in own]))
    preds = [({a: sigmoid(z / temperature) for a, z in lg.items() if z is not None}, tokens[i])
             for i, lg in enumerate(logits)]
    model = _fit_routers(examples, lam, [pick], prior)[0]
    model.temperature = temperature
    # each action's success rate over its training runs: what the router claims out of evidence (evidence.shrunk)
    # (shrunk toward the prior by PRIOR_RUNS pseudo-runs, as each success model's intercept is)
    start = _prior_rates(examples, actions, prior)
    base_rates = {a: round((sum(e.success for e in examples if e.action == a) + PRIOR_RUNS * start[a])
                           / (runs[a] + PRIOR_RUNS), 4) for a in actions}
    rows = [(dict(zip(NUMERIC_FEATURES, e.x)), e.action, e.success) for e in examples]
    cue_rates = evidence.cue_counts(rows)
    index_rates = evidence.cue_counts(rows, keys=lambda features: [evidence.index_stratum(features)])
    model.metrics = {**report(preds, examples, lam), "examples": len(examples), "questions": len(questions),
                     "base_rates": base_rates, "cue_rates": cue_rates, "index_rates": index_rates,
                     "folds": k, "prior": {a: round(v, 4) for a, v in start.items()}, "actions": actions, "l2": pick, "temperature": temperature,
                     "warnings": data_warnings(examples),
                     "by_evidence": by_evidence(preds, examples, [support[i] for i in range(len(examples))])}
    return model


def by_evidence(preds: list[tuple[dict[str, float], dict[str, float]]], examples: list[Example],
                support: list[float], minimum: float = evidence.MIN_EVIDENCE) -> dict[str, Any]:
    """Out-of-fold calibration apart for the runs whose action had evidence (``calibrated``: at least
    ``minimum`` similar training runs in the other folds) and those without (``insufficient_evidence``)."""
    out = {}
    for state, keep in ((evidence.CALIBRATED, True), (evidence.INSUFFICIENT, False)):
        pairs = [(p[e.action], e.success) for (p, _), e, n in zip(preds, examples, support)
                 if e.action in p and (n >= minimum) == keep]
        cal = calibration([q for q, _ in pairs], [y for _, y in pairs])
        out[state] = {"n": cal["n"], "ece": cal["ece"] if pairs else None, "brier": cal["brier"] if pairs else None,
                      "mean_p": round(sum(q for q, _ in pairs) / len(pairs), 4) if pairs else None,
                      "success": round(sum(y for _, y in pairs) / len(pairs), 4) if pairs else None}
    return out


def explore_shares(counts: dict[str, int], planned: int, actions: Sequence[str], *, free: Sequence[str] = (),
                   minimum: int = MIN_RUNS_PER_ACTION, cap: float = 0.75) -> dict[str, float]:
    """Each action's minimum share of the next ``planned`` exploring runs (``UtilityConfig.min_share``), so
    that it reaches ``minimum`` runs: ``data_warnings``' "only N runs took X" turned into an allocation.
    ``counts``: the runs each action already has; ``free`` actions are logged apart (abstain on every item)
    and need none. When the shares would sum to more than ``cap`` they are scaled down together: the
    incumbent's own choices keep the rest, and a short exploration spreads what it has evenly."""
    if planned <= 0:
        return {}
    need = {a: minimum - counts.get(a, 0) for a in actions if a not in free and counts.get(a, 0) < minimum}
    shares = {a: n / planned for a, n in need.items()}
    total = sum(shares.values())
    if total > cap:
        shares = {a: v * cap / total for a, v in shares.items()}
    return {a: round(v, 4) for a, v in shares.items()}


def data_warnings(examples: list[Example]) -> list[str]:
    """Why these runs cannot support the fit, one line each (empty when they can): a single action (nothing
    to choose between), fewer than MIN_RUNS_PER_ACTION runs of an action, an action whose runs all succeeded
    or all failed (its p_success is a constant; ECE is ~0 by construction), fewer than MIN_QUESTIONS questions."""
    out = []
    runs: dict[str, list[float]] = {}
    for e in examples:
        runs.setdefault(e.action, []).append(e.success)
    if len(runs) == 1:
        (only,) = runs
        out.append(f"every run took '{only}': the router learns nothing about other routes and cannot choose "
                   "between them; log runs of several routes (agentrt eval --router fixed:direct --router "
                   "fixed:reason --router rules)")
    for action, outcomes in sorted(runs.items()):
        if len(outcomes) < MIN_RUNS_PER_ACTION:
            out.append(f"only {len(outcomes)} runs took '{action}' (want >= {MIN_RUNS_PER_ACTION}): "
                       "its p_success rests on too few runs")
        if len(set(outcomes)) == 1 and outcomes[0] in (0.0, 1.0):
            out.append(f"every '{action}' run {'succeeded' if outcomes[0] else 'failed'}: its p_success cannot "
                       "be calibrated (ECE is ~0 by construction, not a sign of a good fit)")
    questions = len({e.question for e in examples})
    if questions < MIN_QUESTIONS:
        out.append(f"only {questions} questions (want >= {MIN_QUESTIONS}): the out-of-fold ECE and policy value "
                   "are measured on too few to mean much")
    return out


def _nll(pairs: list[tuple[float | None, float]]) -> float:
    """Mean negative log-likelihood of (logit, outcome) pairs; pairs without a logit are skipped."""
    total, n = 0.0, 0
    for z, y in pairs:
        if z is None:
            continue
        p = min(1 - 1e-6, max(1e-6, sigmoid(z)))
        total -= y * math.log(p) + (1 - y) * math.log(1 - p)
        n += 1
    return total / max(1, n)


def _prior_rates(rows: list[Example], actions: Sequence[str], prior: dict[str, float] | None) -> dict[str, float]:
    """The rate each action's pseudo-runs carry: ``prior``'s, else the pooled success rate of ``rows``."""
    pooled = sum(e.success for e in rows) / max(1, len(rows))
    return {a: min(1.0, max(0.0, float((prior or {}).get(a, pooled)))) for a in actions}


def _fit_routers(rows: list[Example], lam: float, strengths: list[Strength] | list[dict[str, Strength]],
                 prior: dict[str, float] | None = None) -> list[RouterModel]:
    """One router per entry of ``strengths`` (one L2 strength for every action, or one per action), all fit
    on ``rows``: per action, success (logistic) and log-token (ridge) models on the runs that took it,
    weighted by the clipped inverse propensity. The standardization and the token models don't depend
    on the strength, so they are computed once."""
    import numpy as np

    mean, std = _standardize([e.x for e in rows])
    Z = (np.asarray([e.x for e in rows]) - np.asarray(mean)) / np.asarray(std)
    Z = np.hstack([Z, np.ones((len(rows), 1))])  # the intercept: last column, not penalized
    success = np.asarray([e.success for e in rows])
    log_tokens = np.log1p(np.asarray([e.tokens for e in rows]))
    weights = np.asarray([min(MAX_WEIGHT, 1 / e.propensity) for e in rows])
    names = sorted({e.action for e in rows})
    took = {a: np.asarray([e.action == a for e in rows]) for a in names}
    tok = {a: _ridge(Z[took[a]], log_tokens[took[a]], weights[took[a]], _penalty(Z.shape[1], TOKENS_L2)) for a in names}
    # what each success model was fit on, so the router can say how many runs resemble a question
    sample = evidence.build([e.x for e in rows], [e.action for e in rows], mean, std, dims=EVIDENCE_DIMS,
                            corpora=[e.corpus for e in rows])
    # PRIOR_RUNS pseudo-runs per action at its prior rate (``_prior_rates``), on the average question (every
    # standardized input 0, so only the intercept feels them): an action's rate from a handful of runs is pulled
    # toward what was known before, so one lucky run does not claim p_success 1.0 (nor three failures 0.0)
    start = _prior_rates(rows, names, prior)
    pseudo = np.zeros((2, Z.shape[1]))
    pseudo[:, -1] = 1.0
    fit = {a: (np.vstack([Z[took[a]], pseudo]), np.concatenate([success[took[a]], [1.0, 0.0]]),
               np.concatenate([weights[took[a]],
                               weights[took[a]].mean() * PRIOR_RUNS * np.array([start[a], 1 - start[a]])]))
           for a in names}
    routers = []
    for l2 in strengths:
        actions = {}
        for a in names:
            strength = l2[a] if isinstance(l2, dict) else l2
            coef = _logistic(*fit[a], _penalty(Z.shape[1], strength))
            actions[a] = ActionModel(coef[:-1].tolist(), float(coef[-1]), tok[a][:-1].tolist(), float(tok[a][-1]))
        routers.append(RouterModel(mean, std, actions, 1.0, lam, evidence=sample))
    return routers


def _penalty(columns: int, strength: Strength):
    """Per-column L2: the numeric features, the hashed words, and the intercept (free)."""
    import numpy as np

    numeric, words = strength
    k = len(NUMERIC_FEATURES)
    return np.concatenate([np.full(k, numeric), np.full(columns - 1 - k, words), [0.0]])


def report(preds: list[tuple[dict[str, float], dict[str, float]]], examples: list[Example], lam: float) -> dict[str, Any]:
    """Calibration of p_success (against each run's success) and the IPS / doubly-robust value of the
    policy that picks by the utility rule, from ``preds[i]`` = (p_success, expected tokens) of example i."""
    probs, outcomes, ips, dr, chosen_actions = [], [], 0.0, 0.0, {}
    for (p, tokens), e in zip(preds, examples):
        if e.action in p:
            probs.append(p[e.action])
            outcomes.append(e.success)
        pick = choose("learned", p, tokens, e.budget, UtilityConfig(lam=lam, actions=tuple(p))).action
        chosen_actions[pick] = chosen_actions.get(pick, 0) + 1
        reward = e.reward - lam * e.tokens / e.budget
        q = {a: p[a] - lam * tokens[a] / e.budget for a in p}
        match = float(pick == e.action)
        ips += match * reward / e.propensity
        dr += q[pick] + match * (reward - q.get(e.action, 0.0)) / e.propensity
    n = max(1, len(examples))
    logged = sum(e.reward - lam * e.tokens / e.budget for e in examples) / n
    return {**calibration(probs, outcomes), "ece_floor": ece_floor(probs) if probs else None,
            "policy_value_ips": round(ips / n, 4), "policy_value_dr": round(dr / n, 4),
            "logged_policy_value": round(logged, 4), "chosen_actions": chosen_actions}
