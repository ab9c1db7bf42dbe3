"""The routes that answer with the policy model alone: ``direct`` and ``reason``.

``reason`` thinks first, under a thinking cap enforced by budget forcing: when the thought reaches
its cap (or the run's budget would not cover an answer after a longer thought), the thought is
closed with the end-of-thinking marker and the answer is generated from what remains.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any

from agentrt.run import RunContext
from agentrt.types import GenParams, Message

THINK_OPEN, THINK_CLOSE = "<think>", "</think>"
ANSWER_CUE = "Final answer:"
DIRECT_SYSTEM = "You are a helpful assistant. Answer the question concisely."
REASON_SYSTEM = (
    "You are a careful assistant. Think step by step inside <think> </think>, "
    f"then give the final answer after '{ANSWER_CUE}'."
)
# Smallest answer worth thinking for; below this, reason degrades to a direct answer.
MIN_THOUGHT_TOKENS = 8


@dataclass(slots=True)
class RouteOutput:
    answer: str
    thought: str | None = None
    citations: list[str] = field(default_factory=list)  # passage ids (the plan route)


def split_thought(text: str) -> tuple[str | None, str]:
    """Separate ``<think>...</think>`` (or a prompted thought before the answer cue) from the answer."""
    match = re.search(r"<think>(.*?)(?:</think>|$)(.*)", text, flags=re.S)
    if match:
        thought, rest = match.group(1).strip(), match.group(2)
    else:
        thought, rest = None, text
    if ANSWER_CUE in rest:
        before, _, rest = rest.partition(ANSWER_CUE)
        thought = (thought + "\n" + before).strip() if thought else before.strip() or None
    return thought, rest.strip()


async def direct(ctx: RunContext, question: str) -> RouteOutput:
    """Answer in one call: no thinking, a small max_tokens."""
    messages = [Message("system", DIRECT_SYSTEM), Message("user", question)]
    params = GenParams(max_tokens=ctx.settings.answer_max_tokens, chat_template_kwargs=_no_thinking(ctx))
    completion = await ctx.call_model("answer", messages, params)
    thought, answer = split_thought(completion.text)
    ctx.best_answer = answer
    return RouteOutput(answer, thought)


async def reason(ctx: RunContext, question: str, thinking_cap: int | None = None, *, samples: int = 1,
                 verifier: Any = None) -> RouteOutput:
    """Think (at most ``thinking_cap`` tokens), then answer from the remaining budget.

    ``samples > 1``: that many samples in one batched call, selected by majority vote (or ``verifier``).
    """
    if ctx.tools:
        from agentrt.toolcall import run_tool_loop, tools_for_route

        allowed = tools_for_route("reason", ctx.tools, ctx.settings)
        if allowed:  # reason by acting: a bounded, grammar-constrained tool loop (e.g. the calculator)
            loop = await run_tool_loop(ctx, [Message("user", question)], allowed, max_steps=4, budget=ctx.budget)
            ctx.best_answer = loop.answer
            trace = "; ".join(f"{c['name']}({c['args']}) -> {c['error'] or c['result']}" for c in loop.calls)
            return RouteOutput(loop.answer, trace or None)
    if samples > 1:
        from agentrt.sampling import reason_samples

        return await reason_samples(ctx, question, samples, thinking_cap=thinking_cap, verifier=verifier)
    cap = ctx.settings.thinking_cap if thinking_cap is None else thinking_cap
    native = _native_thinking(ctx)
    if native:
        messages = [Message("user", question)]
        prefill = ""
        template = {"enable_thinking": True}
    else:
        messages = [Message("system", REASON_SYSTEM), Message("user", question)]
        prefill = THINK_OPEN + "\n"
        template = {}
    think_messages = messages + ([Message("assistant", prefill)] if prefill else [])

    # Budget forcing: the thought is paid twice (as output, then as the answer call's prompt), and
    # an answer of at least `answer_min` tokens must still fit after it.
    answer_max = ctx.settings.answer_max_tokens
    answer_min = min(answer_max, 32)
    prompt_tokens = ctx.policy.count_tokens(think_messages, GenParams(chat_template_kwargs=template))
    cue_tokens = 8
    affordable = (ctx.budget.remaining - 2 * prompt_tokens - cue_tokens - answer_min) // 2
    think_max = min(cap, affordable)
    thought = ""
    if think_max >= MIN_THOUGHT_TOKENS:
        params = GenParams(max_tokens=think_max, stop=[THINK_CLOSE, ANSWER_CUE], chat_template_kwargs=template)
        completion = await ctx.call_model("think", think_messages, params)
        thought = completion.text.replace(THINK_OPEN, "").strip()
        ctx.best_answer = thought.splitlines()[-1].strip() if thought else ""
    # Close the thought (whether the model stopped or hit its cap) and cue the answer.
    closing = f"{prefill}{thought}\n{THINK_CLOSE}\n" + ("" if native else f"{ANSWER_CUE} ")
    answer_messages = messages + [Message("assistant", closing)]
    params = GenParams(max_tokens=answer_max, stop=[THINK_OPEN], chat_template_kwargs=template)
    completion = await ctx.call_model("answer", answer_messages, params)
    answer = completion.text.strip()
    ctx.best_answer = answer or ctx.best_answer
    return RouteOutput(answer, thought or None)


def _native_thinking(ctx: RunContext) -> bool:
    style = ctx.settings.thinking_style
    if style != "auto":
        return style == "native"
    return bool(getattr(ctx.policy, "supports_thinking", False))


def _no_thinking(ctx: RunContext) -> dict:
    return {"enable_thinking": False} if _native_thinking(ctx) else {}


async def plan(ctx: RunContext, question: str) -> RouteOutput:
    """Plan-then-parallel-search (agentrt.workflow, imported only when this route runs: it needs LangGraph)."""
    from agentrt.workflow import plan_route

    return await plan_route(ctx, question)


ASK_SYSTEM = ("The user's request is unclear or missing information. Do not answer it. "
              "Reply with one short question that asks for what is missing.")
ABSTAIN_ANSWER = "I don't know."


async def ask(ctx: RunContext, question: str) -> RouteOutput:
    """Return a clarifying question instead of guessing."""
    messages = [Message("system", ASK_SYSTEM), Message("user", question)]
    completion = await ctx.call_model("ask", messages, GenParams(max_tokens=48, stop=["\n"]))
    text = completion.text.strip()
    if not text.endswith("?"):
        text = "Could you say more precisely what you are asking" + (f" about '{question.strip()}'?" if len(question) < 80 else "?")
    return RouteOutput(text)


async def abstain(ctx: RunContext, question: str) -> RouteOutput:
    """Say "I don't know" when no route is likely enough to succeed (spends no tokens)."""
    return RouteOutput(ABSTAIN_ANSWER)


ROUTE_FUNCTIONS = {"direct": direct, "reason": reason, "plan": plan, "ask": ask, "abstain": abstain}
