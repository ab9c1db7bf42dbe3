"""The ``direct`` route: answer in one call, no thinking, a small ``max_tokens``.

In a conversation, a question about what the user said of themselves ("What is my name?") is answered
with a second-person answer cue ("Your name is") prefilled: small models otherwise tend to answer
about themselves ("My name is Elena") although the history holds the answer.
"""

from __future__ import annotations

import re

from agentrt.core.types import GenParams, Message
from agentrt.routes._confidence import read_tail, tail_params, wants_tail, with_instruction
from agentrt.routes.context import RouteOutput, RunContext
from agentrt.routes.thinking import no_thinking, split_thought

SYSTEM = "You are a helpful assistant. Answer the question concisely."
_ABOUT_ME = re.compile(r"^\s*what(?:'s| is| was) my ([a-z][a-z ]{0,30}?)\s*\?*\s*$", re.I)


def answer_cue(question: str, history: list[Message]) -> str:
    """The prefilled start of the answer for a question about the user's own stated facts, else ''."""
    m = _ABOUT_ME.match(question)
    if not m or not any(m[1].lower() in h.content.lower() for h in history if h.role == "user"):
        return ""
    return f"Your {m[1].lower()} {'was' if ' was ' in question.lower() else 'is'}"


async def run(ctx: RunContext, question: str) -> RouteOutput:
    """Answer in one call (in tail confidence mode, the model ends it with its stated confidence)."""
    messages = ctx.conversation(SYSTEM)
    # a prefilled cue would sit in front of the caller's JSON: none under a schema
    cue = answer_cue(question, ctx.history) if ctx.options.json_schema is None else ""
    params = GenParams(max_tokens=ctx.settings.answer_max_tokens, stop=["\n"] if cue else [],
                       chat_template_kwargs=no_thinking(ctx.settings, ctx.policy))
    # a one-line cued answer or a JSON answer has no room for a tail: the grammar call asks afterwards
    tail = wants_tail(ctx) and not cue and ctx.options.json_schema is None
    if tail:
        messages, params = with_instruction(messages), tail_params(params)
    if cue:
        ctx.say("answer", cue)  # the prefilled cue is the answer's start: show it before what follows
        completion = await ctx.call_model("answer", messages + [Message("assistant", cue)], params, thought=False)
        # the cue makes a one-sentence answer: keep that sentence, not the chatter after it
        answer = (cue + completion.text).split(". ")[0].strip()
        ctx.best_answer = answer if answer.endswith(".") else answer + "."
        return RouteOutput(ctx.best_answer)
    completion = await ctx.call_model("answer", messages, params, thought=False)
    thought, answer = split_thought(completion.text)
    output = read_tail(answer, thought) if tail else RouteOutput(answer, thought)
    ctx.best_answer = output.answer
    return output
