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
from agentrt.core.types import ROUTES

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

    def to_step(self) -> dict[str, Any]:
        """The trajectory step (kind route_decision) for this decision."""
        return {
            "kind": "route_decision", "route": self.action, "propensity": self.propensity,
            "probabilities": self.probabilities, "reason": self.reason, "features": self.features,
            "router": self.router, "p_success": self.p_success, "expected_tokens": self.expected_tokens,
            "utility": self.utility, "calibrated": self.calibrated, "router_version": self.router_version,
        }


class UtilityConfig(BaseModel):
    """How p_success and cost trade off. ``floors``: minimum p_success for an action to be chosen."""

    value: float = 1.0
    lam: float = Field(default=0.3, ge=0.0)
    floors: dict[str, float] = {}
    temperature: float = Field(default=0.0, ge=0.0)  # > 0: softmax exploration
    epsilon: float = Field(default=0.0, ge=0.0, le=1.0)  # epsilon-greedy exploration
    actions: tuple[str, ...] = ACTIONS


def choose(router: str, p_success: dict[str, float], expected_tokens: dict[str, float], budget: int,
           cfg: UtilityConfig, *, features: dict[str, Any] | None = None, reason: str = "",
           rng: random.Random | None = None) -> RouteDecision:
    """Apply the utility rule and pick an action (exploring when the config says so)."""
    if budget <= 0:
        raise InputError("budget must be positive to compare routes")
    actions = [a for a in cfg.actions if a in p_success]
    utility = {
        a: p_success[a] * cfg.value - cfg.lam * min(expected_tokens[a], budget * 4) / budget for a in actions
    }
    eligible = [a for a in actions if p_success[a] >= cfg.floors.get(a, 0.0)
                and expected_tokens[a] <= budget] or ["abstain" if "abstain" in actions else actions[0]]
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
    if cfg.temperature > 0 or cfg.epsilon > 0:
        rng = rng or random.Random()
        action = rng.choices(eligible, weights=[probs[a] for a in eligible])[0]
    else:
        action = best
    probs_all = {a: round(probs.get(a, 0.0), 6) for a in actions}
    why = reason or f"highest utility {utility[action]:.2f} (p_success {p_success[action]:.2f}, ~{expected_tokens[action]:.0f} tokens)"
    return RouteDecision(
        router=router, action=action, propensity=min(1.0, max(0.0, probs[action])), probabilities=probs_all,
        p_success={a: round(p, 4) for a, p in p_success.items()},
        expected_tokens={a: round(t, 1) for a, t in expected_tokens.items()},
        utility={a: round(u, 4) for a, u in utility.items()}, features=features or {}, reason=why,
    )


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
