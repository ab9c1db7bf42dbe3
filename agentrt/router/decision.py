"""RouteDecision and the utility rule every router shares.

utility(a) = p_success(a) * value - lambda * expected_tokens(a) / budget, over the actions whose
p_success clears their floor. The choice is the argmax (propensity 1), or a softmax over utilities
with a temperature / an epsilon-greedy mix when exploring, with the propensity of the chosen action
logged so runs can be learned from off-policy.
"""

from __future__ import annotations

import math
import random
from typing import Any

from pydantic import BaseModel, Field

from agentrt.core.errors import InputError
from agentrt.core.types import ROUTES, split_action

ACTIONS: tuple[str, ...] = ROUTES  # the router chooses among the routes (agentrt.routes registers them)


class RouteDecision(BaseModel):
    """Everything a router decided, and why."""

    router: str
    action: str
    propensity: float = Field(ge=0.0, le=1.0)
    probabilities: dict[str, float]  # the selection distribution over actions
    p_success: dict[str, float]
    expected_tokens: dict[str, float]
    utility: dict[str, float]
    features: dict[str, Any] = {}
    reason: str = ""
    escalation: list[str] = []  # cascade: routes to try next when confidence is low
    # True only when p_success comes from a router trained for the policy that runs (hand-set priors,
    # or a learned router facing another policy, are not calibrated for it)
    calibrated: bool = False
    router_version: str = ""  # the registry version (or file) of a learned router; "" for rule routers
    # The evidence behind p_success (agentrt.router.evidence): per action, the effective number of training
    # runs that resemble this question; the state of the estimate the decision rests on (calibrated |
    # insufficient_evidence | other_policy; hand-set priors have no evidence); the fallback policy that
    # decided instead of the learned estimates ("" when they decided; "rules": out of evidence or for
    # another policy, the rules router's choice, docs/routing.md)
    evidence: dict[str, float] = {}
    state: str = "insufficient_evidence"
    fallback: str = ""
    # observe mode: what a candidate router would have decided on this request (never acted on)
    shadow: dict[str, Any] | None = None
    policy: str = ""  # the fingerprint id of the running policy, when the router knows it (learned routers)
    # the corpus the index features were read from ("" without an index): a router trained on this run counts
    # it as evidence for abstaining over that corpus only (agentrt.router.evidence.corpus_key)
    corpus: str = ""
    # Actions that could not be chosen, and why: a floor, a cost over the budget, or a guard (``guards``)
    excluded: dict[str, str] = {}
    # Model tiers (agentrt.router.tiers): each action's price per token relative to the slowest tier ({}: all alike)
    prices: dict[str, float] = {}

    @property
    def tier(self) -> str:
        """The model tier the chosen action runs on (``base``: the policy itself)."""
        return split_action(self.action)[1]

    def to_step(self) -> dict[str, Any]:
        """The trajectory step (kind route_decision) for this decision."""
        step = {
            "kind": "route_decision", "route": self.action, "propensity": self.propensity,
            "probabilities": self.probabilities, "reason": self.reason, "features": self.features,
            "router": self.router, "p_success": self.p_success, "expected_tokens": self.expected_tokens,
            "utility": self.utility, "calibrated": self.calibrated, "router_version": self.router_version,
            "evidence": self.evidence, "state": self.state, "fallback": self.fallback, "policy": self.policy,
            "corpus": self.corpus,
        }
        if self.shadow is not None:
            step["shadow"] = self.shadow
        if self.excluded:
            step["excluded"] = self.excluded
        if self.prices or "@" in self.action:
            step["tier"], step["prices"] = self.tier, self.prices
        return step


class UtilityConfig(BaseModel):
    """How p_success and cost trade off. ``floors``: minimum p_success for an action to be chosen."""

    value: float = 1.0
    lam: float = Field(default=0.3, ge=0.0)
    floors: dict[str, float] = {}
    temperature: float = Field(default=0.0, ge=0.0)  # > 0: softmax exploration
    epsilon: float = Field(default=0.0, ge=0.0, le=1.0)  # epsilon-greedy exploration
    actions: tuple[str, ...] = ACTIONS
    # exploring: each action's minimum share of the selection probability (``with_min_shares``); an action
    # in ``actions`` with a share may be drawn even when the router has no estimate for it
    min_share: dict[str, float] = {}
    # each action's price per token relative to the dearest (agentrt.router.tiers.prices: a tier's seconds per
    # token over the slowest tier's); an action without one costs 1.0, so a policy without tiers prices tokens
    prices: dict[str, float] = {}


# A plain request's guard: so many words or fewer and no multi-hop cue, with the index covering less than
# this share of its words, is a short factual question (plan searches would find nothing: measured
# "Paris (incomplete: no findings for s1)" in 802 tokens for "What is the capital of France?")
SHORT_WORDS, COVERED = 12, 0.5


def guards(features: dict[str, Any]) -> dict[str, str]:
    """Actions no router may pick for a request with these features, and why (predictable plain requests)."""
    out: dict[str, str] = {}
    if features.get("chitchat"):
        for a in ("reason", "plan", "read", "ask", "abstain"):
            out[a] = "small talk (a greeting or thanks) gets a short direct reply"
    elif (features.get("words", SHORT_WORDS + 1) <= SHORT_WORDS and not features.get("multi_hop")
          and features.get("coverage", 0.0) < COVERED):
        out["plan"] = f"a short question the index does not cover (coverage {features.get('coverage', 0.0):.2f})"
    return out


def choose(router: str, p_success: dict[str, float], expected_tokens: dict[str, float], budget: int,
           cfg: UtilityConfig, *, features: dict[str, Any] | None = None, reason: str = "",
           rng: random.Random | None = None) -> RouteDecision:
    """Apply the utility rule and pick an action (exploring when the config says so)."""
    if budget <= 0:
        raise InputError("budget must be positive to compare routes")
    actions = [a for a in cfg.actions if a in p_success]
    utility = {
        a: p_success[a] * cfg.value - cfg.lam * cfg.prices.get(a, 1.0) * min(expected_tokens[a], budget * 4) / budget
        for a in actions
    }
    excluded = {a: why for a, why in guards(features or {}).items() if a in actions}
    for a in actions:
        if a not in excluded and p_success[a] < cfg.floors.get(a, 0.0):
            excluded[a] = f"p_success {p_success[a]:.2f} below its floor {cfg.floors[a]:.2f}"
        elif a not in excluded and expected_tokens[a] > budget:
            excluded[a] = f"~{expected_tokens[a]:.0f} tokens, over the budget {budget}"
    eligible = [a for a in actions if a not in excluded] or ["abstain" if "abstain" in actions else actions[0]]
    best = max(eligible, key=lambda a: utility[a])
    if cfg.temperature > 0:
        top = max(utility[a] for a in eligible)
        weights = {a: math.exp((utility[a] - top) / cfg.temperature) for a in eligible}
        z = sum(weights.values())
        probs = {a: w / z for a, w in weights.items()}
    else:
        probs = {a: float(a == best) for a in eligible}
    if cfg.epsilon > 0:
        probs = {a: (1 - cfg.epsilon) * probs[a] + cfg.epsilon / len(eligible) for a in eligible}
    probs = with_min_shares(probs, cfg, {**guards(features or {}), **excluded})
    if cfg.temperature > 0 or cfg.epsilon > 0 or cfg.min_share:
        rng = rng or random.Random()
        action = rng.choices(list(probs), weights=list(probs.values()))[0]
    else:
        action = best
    probs_all = {a: round(probs.get(a, 0.0), 6) for a in dict.fromkeys([*actions, *probs])}
    why = reason or (f"highest utility {utility[action]:.2f} (p_success {p_success[action]:.2f}, "
                     f"~{expected_tokens[action]:.0f} tokens)" if action in utility else
                     f"exploring: {action} is drawn on at least {cfg.min_share[action]:.0%} of runs (no estimate yet)")
    return RouteDecision(
        router=router, action=action, propensity=min(1.0, max(0.0, probs[action])), probabilities=probs_all,
        p_success={a: round(p, 4) for a, p in p_success.items()},
        expected_tokens={a: round(t, 1) for a, t in expected_tokens.items()},
        utility={a: round(u, 4) for a, u in utility.items()}, features=features or {}, reason=why,
        excluded=excluded, prices={a: cfg.prices[a] for a in actions if a in cfg.prices},
    )


def with_min_shares(probs: dict[str, float], cfg: UtilityConfig, blocked: dict[str, str]) -> dict[str, float]:
    """``probs`` mixed so that every action with a ``cfg.min_share`` (in ``cfg.actions``, not ``blocked``)
    is drawn with at least that probability: (1 - S) * probs + share, S the shares' sum (at most 0.9, so
    the router's own choice keeps a tenth). The mixture is what is sampled, so the logged propensity stays
    the true one and off-policy estimates stay unbiased."""
    shares = {a: max(0.0, v) for a, v in cfg.min_share.items() if v > 0 and a in cfg.actions and a not in blocked}
    total = sum(shares.values())
    if not shares:
        return probs
    scale = min(1.0, 0.9 / total)
    shares = {a: v * scale for a, v in shares.items()}
    rest = 1.0 - sum(shares.values())
    return {a: rest * probs.get(a, 0.0) + shares.get(a, 0.0) for a in dict.fromkeys([*probs, *shares])}


def cascade_unsure(signal: str, logprob: float | None, stated: float | None, *, logprob_threshold: float,
                   stated_threshold: float) -> bool:
    """Whether the cascade should escalate from an answer (``Settings.cascade_signal``).

    ``logprob``: the mean answer-token log-probability is below ``logprob_threshold``; ``stated``: the
    policy's stated confidence is below ``stated_threshold`` (the logprob rule when it stated none);
    ``both``: either is low. An answer with neither signal is kept.
    """
    low_logprob = logprob is not None and logprob < logprob_threshold
    low_stated = stated is not None and stated < stated_threshold
    if signal == "stated":
        return low_stated if stated is not None else low_logprob
    if signal == "both":
        return low_logprob or low_stated
    return low_logprob
