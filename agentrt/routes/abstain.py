"""The ``abstain`` route: say "I don't know" when no route is likely enough to succeed."""

from __future__ import annotations

from agentrt.routes.context import RouteOutput, RunContext

ANSWER = "I don't know."


async def run(ctx: RunContext, question: str) -> RouteOutput:
    """Abstain (spends no tokens)."""
    return RouteOutput(ANSWER)
