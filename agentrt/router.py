"""Synchronous rules routing for callers that need a decision without an agent (sessions, tools).

The routers themselves live in ``agentrt.routing``; this is the rules router with default settings.
"""

from __future__ import annotations

from typing import Any

from agentrt.routing.decision import RouteDecision
from agentrt.routing.features import extract
from agentrt.routing.rules import RulesRouter


def decide(question: str, settings: Any = None, budget: int = 1024) -> RouteDecision:
    """The rules router's decision for ``question`` (features computed here)."""
    from agentrt.config import Settings

    return RulesRouter(settings or Settings()).decide_sync(question, extract(question), budget)
