"""Conversations: multi-turn sessions with memory of the prior turns.

Each turn is one agent run. The prior turns are passed as context in front of the new question,
newest first until ``history_share`` of the turn's budget is used (older turns are dropped, never
cut mid-turn), so a conversation never breaks the hard budget. The route is decided on the new
question alone.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, AsyncIterator

from agentrt.errors import InputError
from agentrt.types import Message

if TYPE_CHECKING:
    from agentrt.agent import Agent, Result
    from agentrt.events import Event


@dataclass
class Turn:
    """One exchange of a conversation."""

    question: str
    answer: str
    route: str = ""
    trajectory_id: str = ""


class _OnQuestion:
    """A router that decides on the new message alone (not on the history in front of it)."""

    def __init__(self, agent: Agent, question: str, router: Any, turn: int = 0) -> None:
        self.agent, self.question, self.router, self.turn = agent, question, router, turn

    def __call__(self, _prompt: str) -> Any:
        """The legacy router form (question -> RouteStep)."""
        from agentrt.router import decide

        return decide(self.question)

    async def decide(self, _prompt: str, _features: Any, budget: int) -> Any:
        from agentrt.routing import extract, make_router

        router = self.router if self.router is not None else self.agent.settings.router
        if isinstance(router, str):
            router = make_router(router, self.agent.settings, policy=self.agent.policy)
        return await router.decide(self.question, extract(self.question, turn=self.turn), budget)


class Session:
    """A conversation with an Agent. Use ``agent.session()``.

    >>> chat = agent.session()
    >>> chat.ask("My name is Ada.")
    >>> chat.ask("What is my name?").answer
    """

    def __init__(self, agent: Agent, *, history_share: float = 0.5, budget: int | None = None) -> None:
        if not 0.0 <= history_share < 1.0:
            raise InputError(f"history_share must be in [0, 1), got {history_share!r}")
        self.agent = agent
        self.history_share = history_share
        self.budget = budget
        self.turns: list[Turn] = []

    def reset(self) -> None:
        """Forget every prior turn."""
        self.turns.clear()

    @property
    def messages(self) -> list[Message]:
        """The conversation so far, as chat messages."""
        out: list[Message] = []
        for t in self.turns:
            out += [Message("user", t.question), Message("assistant", t.answer)]
        return out

    def prompt_for(self, question: str, budget: int | None = None) -> str:
        """The question with as many prior turns as fit in ``history_share`` of the budget."""
        total = budget or self.budget or self.agent.settings.budget
        allowance = int(total * self.history_share)
        policy = self.agent.policy
        kept: list[str] = []
        used = 0
        for t in reversed(self.turns):
            block = f"User: {t.question}\nAssistant: {t.answer}"
            cost = policy.count_tokens([Message("user", block)])
            if used + cost > allowance:
                break
            kept.insert(0, block)
            used += cost
        if not kept:
            return question
        return "Conversation so far:\n" + "\n".join(kept) + f"\n\nNow answer the user's new message.\nUser: {question}"

    def _options(self, question: str, options: dict[str, Any]) -> tuple[str, dict[str, Any]]:
        if not isinstance(question, str) or not question.strip():
            raise InputError("the question is empty; pass a non-empty question")
        budget = options.get("budget") or self.budget
        if budget is not None:
            options["budget"] = budget
        if options.get("route") is None:
            options["router"] = _OnQuestion(self.agent, question, options.get("router"), len(self.turns))
        return self.prompt_for(question, budget), options

    def _remember(self, question: str, result: Result) -> Result:
        self.turns.append(Turn(question, result.answer, result.route, result.trajectory_id))
        return result

    def ask(self, question: str, **options: Any) -> Result:
        """One turn, synchronously (takes ``Agent.run``'s options)."""
        prompt, options = self._options(question, options)
        return self._remember(question, self.agent.run(prompt, **options))

    async def aask(self, question: str, **options: Any) -> Result:
        """One turn, async."""
        prompt, options = self._options(question, options)
        return self._remember(question, await self.agent.arun(prompt, **options))

    async def astream(self, question: str, **options: Any) -> AsyncIterator[Event]:
        """One turn as typed events (see ``Agent.astream``); the turn is remembered at its ``Answer``."""
        from agentrt.events import Answer, astream

        prompt, options = self._options(question, options)
        async for event in astream(self.agent, prompt, **options):
            if isinstance(event, Answer):
                self._remember(question, event.result)
            yield event

    def save(self, path: str | Path) -> Path:
        """Write the conversation as JSON lines (one turn a line)."""
        path = Path(path)
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text("".join(json.dumps(t.__dict__, ensure_ascii=False) + "\n" for t in self.turns), encoding="utf-8")
        return path


__all__ = ["Session", "Turn"]
