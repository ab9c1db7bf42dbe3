"""A planner that asks a model for the plan, decoded under a JSON schema so it always parses.

The schema bounds everything (at most ``max_fanout`` steps, short strings, step ids from a fixed
list), so even SmolLM2-135M returns valid JSON every time. Its *judgment* is weak (duplicated steps,
steps that repeat the question): ``check_quality`` and ``validate_plan`` catch that and the
``fallback`` planner (rules) makes the plan instead. Planners never call a backend module: the
caller passes ``complete(messages, params) -> Completion`` (the run's budgeted model call).
"""

from __future__ import annotations

import json
from collections.abc import Awaitable, Callable
from typing import Any

from pydantic import ValidationError

from agentrt.core.errors import BudgetExceeded
from agentrt.core.types import Completion, GenParams, Message
from planners.heuristic import HeuristicPlanner
from planners.plan import Plan, PlanError, Step, check_quality, validate_plan
from planners.prompts import planner_messages

Complete = Callable[[list[Message], GenParams], Awaitable[Completion]]

QUESTION_CHARS = 60


def plan_tokens(max_fanout: int) -> int:
    """Enough new tokens for the longest plan the schema admits (a token is at least one character),
    so the JSON is never cut off: per step the question plus ~50 characters of structure."""
    return max_fanout * (QUESTION_CHARS + 50) + 16


# Room kept for the planner's prompt (instructions, question, three background hits of 160 characters).
PROMPT_TOKENS = 256


def max_fanout_for(context_length: int, prompt_tokens: int = PROMPT_TOKENS) -> int:
    """The most steps a model with a ``context_length``-token window can be asked to plan: the prompt
    plus ``plan_tokens(n)`` new tokens must fit (0 when not even one step does)."""
    return max(0, (context_length - prompt_tokens - 16) // (QUESTION_CHARS + 50))


def plan_schema(max_fanout: int) -> dict[str, Any]:
    """The JSON schema the planner decodes under: bounded arrays and strings."""
    ids = [f"s{i + 1}" for i in range(max_fanout)]
    return {
        "type": "object",
        "properties": {
            "steps": {
                "type": "array", "minItems": 1, "maxItems": max_fanout,
                "items": {
                    "type": "object",
                    "properties": {
                        "id": {"type": "string", "enum": ids},
                        "question": {"type": "string", "minLength": 3, "maxLength": QUESTION_CHARS},
                        "depends_on": {"type": "array", "maxItems": 2, "items": {"type": "string", "enum": ids}},
                    },
                    "required": ["id", "question", "depends_on"],
                    "additionalProperties": False,
                },
            },
        },
        "required": ["steps"],
        "additionalProperties": False,
    }


class LLMPlanner:
    """Model-made plans with a rule-based fallback. ``last_fallback`` says why the fallback was used."""

    name = "llm"

    def __init__(self, complete: Complete, *, max_fanout: int = 2, max_depth: int = 2, max_tokens: int | None = None,
                 fallback: HeuristicPlanner | None = None) -> None:
        self.complete = complete
        self.max_fanout = max_fanout
        self.max_depth = max_depth
        self.max_tokens = plan_tokens(max_fanout) if max_tokens is None else max_tokens
        self.fallback = fallback or HeuristicPlanner(max_fanout=max_fanout, max_depth=max_depth)
        self.last_fallback: str | None = None

    def messages(self, question: str, hits: list[Any] | None = None) -> list[Message]:
        """The planner's prompt; memory ``hits`` are quoted as untrusted background (planners.prompts)."""
        return planner_messages(question, hits)

    async def plan(self, question: str, hits: list[Any] | None = None) -> Plan:
        """Ask the model; fall back to the rules when its plan is invalid or weak.

        ``BudgetExceeded`` propagates (the run turns it into a truncated result)."""
        params = GenParams(max_tokens=self.max_tokens, json_schema=plan_schema(self.max_fanout))
        try:
            completion = await self.complete(self.messages(question, hits), params)
        except BudgetExceeded:
            raise
        plan, why = self.parse(completion.text, question)
        if plan is not None:
            self.last_fallback = None
            return plan
        self.last_fallback = why
        fallback = await self.fallback.plan(question, hits)
        return fallback.model_copy(update={"planner": f"{self.fallback.name} (fallback: {why})"})

    def parse(self, text: str, question: str) -> tuple[Plan | None, str]:
        """The model's plan if usable, else (None, why not)."""
        try:
            data = json.loads(text)
            steps = [Step(id=s["id"], question=s["question"].strip(), depends_on=list(dict.fromkeys(s["depends_on"])))
                     for s in data["steps"]]
            plan = validate_plan(Plan(goal=question, steps=steps, planner=self.name),
                                 max_fanout=self.max_fanout, max_depth=self.max_depth)
        except (ValueError, KeyError, TypeError, ValidationError, PlanError) as e:
            return None, f"invalid plan: {str(e).splitlines()[0][:120]}"
        problems = check_quality(plan, question)
        if problems:
            return None, "; ".join(problems[:2])
        return plan, ""
