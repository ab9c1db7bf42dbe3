"""The ``self`` router: the policy model scores the action labels by their log-probability.

Works with the tiny embedded model: it need not *generate* a good label, only rank five fixed
ones. The softmax over label log-probabilities is mixed with the rules' estimate (the model's raw
preference is a weak signal on its own), then the utility rule decides.
"""

from __future__ import annotations

import math
from collections.abc import Awaitable, Callable

from agentrt.core.config import Settings
from agentrt.router.decision import ACTIONS, RouteDecision, UtilityConfig, choose
from agentrt.router.rules import expected_tokens, rule_p_success
from agentrt.core.types import Message

LABELS = {
    "direct": "answer directly",
    "reason": "think step by step",
    "plan": "search documents",
    "read": "read the documents",
    "ask": "ask a clarifying question",
    "abstain": "say I don't know",
}
PROMPT = ("How should an assistant handle this request? Options: answer directly, think step by step, "
          "search documents, read the documents, ask a clarifying question, say I don't know.\nRequest: {q}")


Scorer = Callable[[str, list[Message], list[str]], Awaitable[list[float]]]


class SelfRouter:
    """Scores ``LABELS`` with the policy through ``scorer`` (the run's ``RunContext.score``: budgeted, recorded)."""

    name = "self"

    def __init__(self, scorer: Scorer, settings: Settings, cfg: UtilityConfig | None = None, mix: float = 0.5) -> None:
        self.scorer = scorer
        self.settings = settings
        self.cfg = cfg or UtilityConfig()
        self.mix = mix

    async def decide(self, question: str, features: dict[str, float], budget: int) -> RouteDecision:
        messages = [Message("user", PROMPT.format(q=question)), Message("assistant", "The assistant should")]
        actions = list(LABELS)
        scores = await self.scorer("route", messages, [" " + LABELS[a] for a in actions])
        top = max(scores)
        weights = [math.exp(s - top) for s in scores]
        z = sum(weights)
        model_p = {a: w / z for a, w in zip(actions, weights)}
        rules = rule_p_success(features)
        # The rules' estimate, scaled by how much the model prefers each label over uniform.
        p = {a: min(0.99, rules[a] * (model_p[a] * len(ACTIONS)) ** self.mix) for a in actions}
        d = choose(self.name, p, expected_tokens(features, self.settings), budget, self.cfg,
                   features={**features, **{f"label_logprob_{a}": round(s, 3) for a, s in zip(actions, scores)}})
        d.reason = f"{d.action}: the model prefers '{LABELS[max(model_p, key=model_p.get)]}'; " + d.reason
        return d
