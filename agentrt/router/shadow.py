"""Observe mode: the router in use decides; a candidate decides the same request in shadow.

The candidate's would-be decision is recorded in the decision step (``shadow``) and never acted on. A learned
candidate costs no model token (numpy dot products). ``agentrt learn --traffic`` values those would-be
decisions off-policy on the runs that got feedback, and promotes the candidate only when it beats the router
in use (agentrt.train.traffic).
"""

from __future__ import annotations

from typing import Any

from agentrt.router.decision import RouteDecision


class ShadowRouter:
    """``router`` decides; ``candidate`` (greedy, no exploration) decides in shadow."""

    def __init__(self, router: Any, candidate: Any) -> None:
        self.router = router
        self.candidate = candidate
        self.name = getattr(router, "name", "router")
        self.version = getattr(router, "version", "")
        self.mismatch = getattr(router, "mismatch", False)

    async def decide(self, question: str, features: dict[str, float], budget: int) -> RouteDecision:
        d = await self.router.decide(question, features, budget)
        try:
            s = await self.candidate.decide(question, features, budget)
        except Exception as e:  # noqa: BLE001 - a shadow must never break a live request; say why in the step
            d.shadow = {"router_version": getattr(self.candidate, "version", ""), "error": f"{type(e).__name__}: {e}"}
            return d
        d.shadow = {"router_version": s.router_version, "action": s.action, "p_success": s.p_success,
                    "expected_tokens": s.expected_tokens, "state": s.state, "fallback": s.fallback,
                    "evidence": s.evidence}
        return d
