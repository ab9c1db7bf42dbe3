"""Fit the learned router from logged trajectories with rewards (off-policy).

Each usable record gives (question, features, action taken, propensity, reward, tokens). The success
model of an action is fit on the runs that took it, weighted by 1/propensity (inverse propensity
weighting, clipped), so a logging policy that rarely tried an action does not bias its estimate.
A held-out split picks each success model's L2 strength (held-out log-loss: with a few hundred runs and
~140 inputs an unregularized fit memorizes questions), calibrates the probabilities (one temperature)
and measures ECE and Brier score;
the learned policy's value is estimated by IPS and doubly-robust estimators on that split.
The reward is r = correct - lambda * tokens / budget.
"""

from __future__ import annotations

import math
import random
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from agentrt.errors import InputError
from agentrt.routing.decision import UtilityConfig, choose
from agentrt.routing.features import NUMERIC_FEATURES, extract, vectorize
from agentrt.routing.learned import ActionModel, RouterModel
from agentrt.trajectory import read_trajectories

MAX_WEIGHT = 20.0  # clip 1/propensity: a few rare actions must not dominate the fit
L2_GRID = (0.3, 1.0, 3.0, 10.0, 30.0, 100.0)


@dataclass
class Example:
    question: str
    x: list[float]
    action: str
    propensity: float  # mu(action | question): the logging policy's probability, see _logging_propensities
    probs: dict[str, float]  # this row's router distribution over actions
    correct: float
    tokens: float
    budget: int


def load_examples(paths: list[str | Path]) -> list[Example]:
    """Usable records: a reward, a route, and a propensity (fixed routes count as 1)."""
    out = []
    for path in paths:
        for rec in read_trajectories(path).records:
            if rec.reward is None or rec.status == "failed":
                continue
            decision = next((s for s in rec.steps if s.get("kind") == "route_decision"), None)
            probs = dict(decision.get("probabilities") or {}) if decision else {}
            if not probs.get(rec.route):
                probs = {rec.route: 1.0}  # a route given by the caller (a fixed policy)
            x = vectorize(extract(rec.question), rec.question)
            out.append(Example(rec.question, x, rec.route, 1.0, probs, float(rec.reward),
                               float(rec.usage.get("total_tokens", 0)), int(rec.budget.get("total", 1) or 1)))
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


def _fit(z, y, w, logistic: bool, l2: float = 1.0, steps: int = 300, lr: float = 0.5):
    """Weighted logistic (or ridge) regression by gradient descent; numpy, small data."""
    import numpy as np

    Z, Y, W = np.asarray(z), np.asarray(y), np.asarray(w)
    coef, bias = np.zeros(Z.shape[1]), float(np.average(Y, weights=W)) if not logistic else 0.0
    if logistic:
        m = np.clip(np.average(Y, weights=W), 1e-3, 1 - 1e-3)
        bias = math.log(m / (1 - m))
    for _ in range(steps):
        pred = Z @ coef + bias
        if logistic:
            pred = 1 / (1 + np.exp(-np.clip(pred, -30, 30)))
        err = (pred - Y) * W / W.sum()
        coef -= lr * (Z.T @ err + l2 * coef / len(Y))
        bias -= lr * err.sum()
    return coef.tolist(), float(bias)


def _log_loss(fit: tuple[list[float], float], z: list[list[float]], y: list[float]) -> float:
    """Mean negative log-likelihood of a logistic fit on (z, y)."""
    coef, bias = fit
    total = 0.0
    for zi, yi in zip(z, y):
        logit = max(-30.0, min(30.0, sum(c * v for c, v in zip(coef, zi)) + bias))
        p = min(1 - 1e-6, max(1e-6, 1 / (1 + math.exp(-logit))))
        total -= yi * math.log(p) + (1 - yi) * math.log(1 - p)
    return total / max(1, len(y))


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


def train_router(paths: list[str | Path], *, lam: float = 0.3, holdout: float = 0.5, seed: int = 0) -> RouterModel:
    """Fit, calibrate and evaluate a learned router; the report is in ``model.metrics``."""
    examples = load_examples(paths)
    questions = sorted({e.question for e in examples})
    random.Random(seed).shuffle(questions)
    held = set(questions[: int(len(questions) * holdout)])
    train = [e for e in examples if e.question not in held] or examples
    test = [e for e in examples if e.question in held] or examples
    mean, std = _standardize([e.x for e in train])
    norm = lambda x: [(xi - m) / s for xi, m, s in zip(x, mean, std)]  # noqa: E731
    actions, strengths = {}, {}
    for a in sorted({e.action for e in train}):
        rows = [e for e in train if e.action == a]
        weights = [min(MAX_WEIGHT, 1 / e.propensity) for e in rows]
        checks = [e for e in test if e.action == a]
        fits = {l2: _fit([norm(e.x) for e in rows], [e.correct for e in rows], weights, logistic=True, l2=l2)
                for l2 in (L2_GRID if checks else (1.0,))}
        strengths[a] = min(fits, key=lambda l2: _log_loss(fits[l2], [norm(e.x) for e in checks], [e.correct for e in checks]))
        w, b = fits[strengths[a]]
        tw, tb = _fit([norm(e.x) for e in rows], [math.log1p(e.tokens) for e in rows], weights, logistic=False, lr=0.1)
        actions[a] = ActionModel(w, b, tw, tb)
    model = RouterModel(mean, std, actions, 1.0, lam)
    model.temperature = _best_temperature(model, test)
    model.metrics = evaluate(model, test, lam)
    model.metrics.update({"train_examples": len(train), "heldout_examples": len(test), "actions": sorted(actions),
                          "l2": strengths})
    return model


def _best_temperature(model: RouterModel, test: list[Example]) -> float:
    best, best_nll = 1.0, float("inf")
    for t in [0.5, 0.7, 0.85, 1.0, 1.25, 1.5, 2.0, 3.0, 5.0]:
        model.temperature = t
        nll = 0.0
        for e in test:
            if e.action in model.actions:
                p = min(1 - 1e-6, max(1e-6, model.predict(e.x)[0][e.action]))
                nll -= e.correct * math.log(p) + (1 - e.correct) * math.log(1 - p)
        if nll < best_nll:
            best, best_nll = t, nll
    return best


def evaluate(model: RouterModel, test: list[Example], lam: float) -> dict[str, Any]:
    """Held-out calibration of p_success and the IPS / doubly-robust value of the learned policy."""
    probs, outcomes, ips, dr, chosen_actions = [], [], 0.0, 0.0, {}
    cfg = UtilityConfig(lam=lam, actions=tuple(model.actions))
    for e in test:
        p, tokens = model.predict(e.x)
        if e.action in p:
            probs.append(p[e.action])
            outcomes.append(e.correct)
        pick = choose("learned", p, tokens, e.budget, cfg).action
        chosen_actions[pick] = chosen_actions.get(pick, 0) + 1
        reward = e.correct - lam * e.tokens / e.budget
        q = {a: p[a] - lam * tokens[a] / e.budget for a in p}
        match = float(pick == e.action)
        ips += match * reward / e.propensity
        dr += q[pick] + match * (reward - q.get(e.action, 0.0)) / e.propensity
    n = max(1, len(test))
    logged = sum(e.correct - lam * e.tokens / e.budget for e in test) / n
    return {**calibration(probs, outcomes), "policy_value_ips": round(ips / n, 4), "policy_value_dr": round(dr / n, 4),
            "logged_policy_value": round(logged, 4), "chosen_actions": chosen_actions}
