"""The ``ask`` route: return one clarifying question instead of guessing."""

from __future__ import annotations

from agentrt.core.types import GenParams
from agentrt.routes.context import RouteOutput, RunContext

SYSTEM = ("The user's request is unclear or missing information. Do not answer it. "
          "Reply with one short question that asks for what is missing.")


async def run(ctx: RunContext, question: str) -> RouteOutput:
    """A clarifying question (a generic one when the model's reply is not a question)."""
    completion = await ctx.call_model("ask", ctx.conversation(SYSTEM), GenParams(max_tokens=48, stop=["\n"]))
    text = completion.text.strip()
    if not text.endswith("?"):
        text = "Could you say more precisely what you are asking" + (
            f" about '{question.strip()}'?" if len(question) < 80 else "?")
    return RouteOutput(text)
