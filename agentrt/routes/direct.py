"""The ``direct`` route: answer in one call, no thinking, a small ``max_tokens``."""

from __future__ import annotations

from agentrt.core.types import GenParams
from agentrt.routes.context import RouteOutput, RunContext
from agentrt.routes.thinking import no_thinking, split_thought

SYSTEM = "You are a helpful assistant. Answer the question concisely."


async def run(ctx: RunContext, question: str) -> RouteOutput:
    """Answer in one call."""
    params = GenParams(max_tokens=ctx.settings.answer_max_tokens,
                       chat_template_kwargs=no_thinking(ctx.settings, ctx.policy))
    completion = await ctx.call_model("answer", ctx.conversation(SYSTEM), params)
    thought, answer = split_thought(completion.text)
    ctx.best_answer = answer
    return RouteOutput(answer, thought)
