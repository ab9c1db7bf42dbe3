"""Stated confidence in the routes: ask the policy for it, read it back, or ask for it afterwards.

The mode is ``AnswerOptions.confidence`` (``Settings.confidence``, ``AGENTRT_CONFIDENCE``,
``Agent.arun(confidence=...)``, ``agentrt run --confidence``):

* ``tail``: the routes that write free text (direct, reason and its samples) append
  ``CONFIDENCE_INSTRUCTION`` to the user message (the convention the RLCR trainer shares) and the model
  writes ``<confidence>q</confidence>`` after its answer itself; ``split_confidence`` strips it. What an
  RLCR-trained policy does; a base model mostly writes no tag (status ``missing``).
* ``grammar``: after the route answered, one short call continues the conversation (the question with the
  instruction, the answer, ``\\n<confidence>``) constrained to ``CONFIDENCE_CHOICES``: a number in [0, 1]
  from any policy whose backend supports ``choices`` (hf, vllm, openai). It pays the prompt and the answer
  again as its prompt, plus a few tokens, from the run's budget; when that does not fit, the answer stays
  and the status is ``over_budget``.

* ``scored``: the same question as ``grammar``, read as the expectation of the stated number under the
  policy's distribution over the 21 choices (each closed by the tag): one scoring pass (``RunContext.score``,
  recorded as a ``score`` step named ``confidence``; backends that can score, hf; others get ``grammar``).
  It pays the prompt once and every choice (~130 tokens more than ``grammar``), and it ranks where the
  greedy choice is one constant (docs/results/routing.md has the figures).

Where a route cannot carry a tail (plan's JSON synthesis, the tool loop, a JSON-schema answer, direct's
prefilled cue), tail mode asks the grammar call instead, so a run that asked always gets a status.
"""

from __future__ import annotations

import dataclasses
import math

from agentrt.core.confidence import (CLOSE_TAG, CONFIDENCE_CHOICES, CONFIDENCE_MODES, OPEN_TAG, with_instruction,
                                     split_confidence)
from agentrt.core.errors import BudgetExceeded
from agentrt.core.protocols import Scorer
from agentrt.core.types import GenParams, Message
from agentrt.routes.context import RouteOutput, RunContext

MODES = CONFIDENCE_MODES  # the one list of modes lives in agentrt.core.confidence
# Routes whose answer a confidence is asked for (ask and abstain answer nothing to be sure of).
CONFIDENT_ROUTES = frozenset({"direct", "reason", "plan", "read"})
# Room after the answer for "\n<confidence>0.85</confidence>" in tail mode (~12 tokens with SmolLM2's tokenizer).
TAIL_TOKENS = 16
# The grammar call's completion: the longest choice ("0.05": 4 digit tokens) and the end token, with slack.
GRAMMAR_TOKENS = 6
# The grammar call's system prompt: the direct route's (the confidence is about the answer, not the thought).
SYSTEM = "You are a helpful assistant. Answer the question concisely."


def wants_tail(ctx: RunContext) -> bool:
    """Whether the route should ask the model to write the confidence tag after its answer itself."""
    return ctx.options.confidence == "tail"


def tail_params(params: GenParams) -> GenParams:
    """``params`` with room for the tail and a stop at its close tag (the parser reads an unclosed tail)."""
    return dataclasses.replace(params, max_tokens=params.max_tokens + TAIL_TOKENS,
                               stop=list(dict.fromkeys([*params.stop, CLOSE_TAG])))


def read_tail(answer: str, thought: str | None = None, citations: list[str] | None = None) -> RouteOutput:
    """The route's output from an answer that may end with the tail: stripped, with what it stated."""
    stated = split_confidence(answer)
    return RouteOutput(stated.answer, thought, list(citations or []), stated.confidence, stated.status)


async def ask_confidence(ctx: RunContext, output: RouteOutput) -> RouteOutput:
    """``output`` with the confidence from one grammar-constrained call (``over_budget`` when it does not fit).

    The call is recorded as a ``model_call`` step named ``confidence``; it is not streamed."""
    messages = with_instruction(ctx.conversation(SYSTEM))
    messages.append(Message("assistant", f"{output.answer}\n{OPEN_TAG}"))
    try:
        if ctx.options.confidence == "scored" and isinstance(ctx.policy, Scorer):
            output.confidence, output.confidence_status = await _scored(ctx, messages), "ok"
            return output
        params = GenParams(max_tokens=GRAMMAR_TOKENS, choices=list(CONFIDENCE_CHOICES))
        completion = await ctx.call_model("confidence", messages, params, min_tokens=GRAMMAR_TOKENS, stream=False)
    except BudgetExceeded:
        output.confidence, output.confidence_status = None, "over_budget"
        return output
    stated = split_confidence(f"{OPEN_TAG}{completion.text.strip()}{CLOSE_TAG}")
    output.confidence, output.confidence_status = stated.confidence, stated.status
    return output


async def _scored(ctx: RunContext, messages: list[Message]) -> float:
    """The expected stated confidence: sum of value x probability over the choices (renormalized over them)."""
    scores = await ctx.score("confidence", messages, [c + CLOSE_TAG for c in CONFIDENCE_CHOICES], tight=True)
    top = max(scores)
    weights = [math.exp(s - top) for s in scores]
    value = sum(w * float(c) for w, c in zip(weights, CONFIDENCE_CHOICES)) / sum(weights)
    return round(min(1.0, max(0.0, value)), 4)


__all__ = ["CONFIDENT_ROUTES", "GRAMMAR_TOKENS", "MODES", "TAIL_TOKENS", "ask_confidence",
           "read_tail", "tail_params", "wants_tail", "with_instruction"]
