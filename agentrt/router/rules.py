"""Rule routers: ``fixed:<action>`` baselines and the transparent ``rules`` router."""

from __future__ import annotations

from agentrt.core.config import Settings
from agentrt.router.decision import ACTIONS, RouteDecision, UtilityConfig, choose
from agentrt.router.features import CUES
from agentrt.router.tiers import with_tier_priors


def expected_tokens(features: dict[str, float], settings: Settings) -> dict[str, float]:
    """A priori token cost of each action for this question (the learned router predicts its own)."""
    prompt = 30 + 1.4 * features.get("words", 10)
    answer = getattr(settings, "answer_max_tokens", 128)
    cap = getattr(settings, "thinking_cap", 256)
    fanout = 3
    return {
        "direct": prompt + 0.5 * answer,
        "reason": 2 * prompt + 1.6 * cap + 0.5 * answer,
        "plan": 4 * prompt + 200 + fanout * (350 + 64) + answer,
        "read": prompt + 3 * 150 + 0.5 * answer,  # three passages of ~600 characters, one answer call
        "ask": prompt + 32,
        "abstain": 0.0,
    }


def rule_p_success(f: dict[str, float]) -> dict[str, float]:
    """Hand-set success probabilities from the features; readable on purpose."""
    hard = f["arithmetic"] or f["multi_step"] or f["code"]
    p = {
        "direct": 0.55 - 0.30 * hard - 0.40 * f["multi_hop"] + 0.10 * f["instruction"],
        "reason": 0.45 + 0.20 * hard - 0.10 * f["multi_hop"],
        "plan": 0.25 + 0.45 * f["multi_hop"] + 0.25 * f["coverage"],
        # the index holds the question's words (and entities): reading its top passages answers it
        "read": 0.15 + 0.35 * f["coverage"] * f.get("has_index", 0.0) + 0.10 * f.get("entity_overlap", 0.0) - 0.20 * hard,
        "ask": 0.05 + 0.70 * f["ambiguous"],
        "abstain": 0.02 + 0.60 * f["unknowable"],
    }
    if f["past_runs"]:  # what happened to similar questions before pulls the estimates toward it
        for a in ("direct", "reason"):
            p[a] = 0.7 * p[a] + 0.3 * f["past_success"]
    return {a: min(0.99, max(0.01, v)) for a, v in p.items()}


class RulesRouter:
    """p_success from readable rules, cost from the a priori model, then the utility rule."""

    name = "rules"

    def __init__(self, settings: Settings, cfg: UtilityConfig | None = None) -> None:
        self.settings = settings
        self.cfg = cfg or UtilityConfig()

    async def decide(self, question: str, features: dict[str, float], budget: int) -> RouteDecision:
        return self.decide_sync(question, features, budget)

    def decide_sync(self, question: str, features: dict[str, float], budget: int) -> RouteDecision:
        p, tokens = rule_p_success(features), expected_tokens(features, self.settings)
        with_tier_priors(p, tokens, self.cfg.actions)  # read@large: the base route's prior, lifted
        cues = [k for k in CUES if features[k]]
        d = choose(self.name, p, tokens, budget, self.cfg, features=features)
        d.reason = f"{d.action}: " + (f"cues {', '.join(cues)}; " if cues else "no special cues; ") + d.reason
        return d


class FixedRouter:
    """Always the same action (the baselines every router is compared with)."""

    def __init__(self, action: str, settings: Settings) -> None:
        self.name = f"fixed:{action}"
        self.action = action
        self.settings = settings

    async def decide(self, question: str, features: dict[str, float], budget: int) -> RouteDecision:
        cost = expected_tokens(features, self.settings)
        return RouteDecision(
            router=self.name, action=self.action, propensity=1.0,
            probabilities={a: float(a == self.action) for a in dict.fromkeys([*ACTIONS, self.action])}, p_success={},
            expected_tokens={a: round(c, 1) for a, c in cost.items()}, utility={}, features=features,
            reason=f"fixed router: always {self.action}",
        )
