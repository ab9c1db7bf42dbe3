"""The ``reason`` route: think under a thinking cap, then answer from what remains.

Budget forcing: when the thought reaches its cap (or the run's budget would not cover an answer
after a longer thought), the thought is closed with the end-of-thinking marker and the answer is
generated from what remains. ``ctx.options.samples > 1`` draws that many think-and-answer samples in
one batched call and selects one (``agentrt.routes.sampling``: majority vote or the run's verifier).
With tools the run may use, the route reasons by acting: a bounded, grammar-constrained tool loop — unless
the run asked for a thought (a ``thinking_cap``) or for samples, which the tool loop has neither of.
"""

from __future__ import annotations

from agentrt.core.errors import BudgetExceeded
from agentrt.core.types import GenParams, Message
from agentrt.routes._confidence import read_tail, tail_params, wants_tail, with_instruction
from agentrt.routes.context import RouteOutput, RunContext
from agentrt.routes.thinking import (
    ANSWER_CUE, MIN_THOUGHT_TOKENS, REASON_SYSTEM, THINK_CLOSE, THINK_OPEN, native_thinking,
)


async def run(ctx: RunContext, question: str) -> RouteOutput:
    """Think (at most ``ctx.options.thinking_cap`` tokens), then answer."""
    if ctx.tools and ctx.options.samples == 1 and ctx.options.thinking_cap is None:
        from agentrt.routes.toolcall import run_tool_loop, tools_for_route

        allowed = tools_for_route("reason", ctx.tools, ctx.settings)
        if allowed:
            loop = await run_tool_loop(ctx, ctx.conversation(None), allowed, max_steps=ctx.settings.tool_steps,
                                        budget=ctx.budget)
            if loop.stopped == "budget" and not loop.answer:  # the run's truncated result, with the reason
                raise BudgetExceeded(f"the budget ran out in the tool loop before an answer ({ctx.budget.remaining} "
                                     f"tokens left); raise the budget or pass --no-tools")
            ctx.best_answer = loop.answer
            trace = "; ".join(f"{c['name']}({c['args']}) -> {c['error'] or c['result']}" for c in loop.calls)
            return RouteOutput(loop.answer, trace or None)
    cap = ctx.settings.thinking_cap if ctx.options.thinking_cap is None else ctx.options.thinking_cap
    if ctx.options.samples > 1:
        from agentrt.routes.sampling import reason_samples

        return await reason_samples(ctx, ctx.options.samples, thinking_cap=cap, verifier=ctx.verifier)
    native = native_thinking(ctx.settings, ctx.policy)
    if native:
        messages = ctx.conversation(None)
        prefill = ""
        template = {"enable_thinking": True}
    else:
        messages = ctx.conversation(REASON_SYSTEM)
        prefill = THINK_OPEN + "\n"
        template = {}
    tail = wants_tail(ctx) and ctx.options.json_schema is None  # the model states its confidence after the answer
    if tail:
        messages = with_instruction(messages)
    think_messages = messages + ([Message("assistant", prefill)] if prefill else [])

    # The thought is paid twice (as output, then as the answer call's prompt), and an answer of at
    # least `answer_min` tokens must still fit after it.
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
    completion = await ctx.call_model("answer", answer_messages, tail_params(params) if tail else params,
                                      thought=False)
    output = RouteOutput(completion.text.strip(), thought or None)
    output = read_tail(output.answer, output.thought) if tail else output
    ctx.best_answer = output.answer or ctx.best_answer
    return output
