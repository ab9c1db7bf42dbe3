"""Conversations: multi-turn sessions with memory of the prior turns.

Each turn is one agent run whose ``history`` is the prior turns as messages: newest first until
``history_share`` of the turn's budget is used (older turns are dropped, never cut mid-turn), so a
conversation never breaks the hard budget. The router sees the new question and features of the
conversation (turn number, whether the history resolves it), never the history as its question.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, AsyncIterator

from agentrt.app.inputs import check_text
from agentrt.core.errors import InputError
from agentrt.core.types import Message

if TYPE_CHECKING:
    from agentrt.app.agent import Agent, Result
    from agentrt.app.events import Event


@dataclass
class Turn:
    """One exchange of a conversation."""

    question: str
    answer: str
    route: str = ""
    trajectory_id: str = ""


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

    def history_for(self, budget: int | None = None) -> list[Message]:
        """The prior turns as messages, as many as fit in ``history_share`` of the budget (the newest kept)."""
        total = budget or self.budget or self.agent.settings.budget
        allowance = int(total * self.history_share)
        kept: list[Message] = []
        used = 0
        for t in reversed(self.turns):
            pair = [Message("user", t.question), Message("assistant", t.answer)]
            cost = self.agent.policy.count_tokens(pair)
            if used + cost > allowance:
                break
            kept[:0] = pair
            used += cost
        return kept

    def _options(self, question: str, options: dict[str, Any]) -> dict[str, Any]:
        check_text(question, "question")
        budget = options.get("budget") or self.budget
        if budget is not None:
            options["budget"] = budget
        options["history"] = self.history_for(budget)
        return options

    def _remember(self, question: str, result: Result) -> Result:
        self.turns.append(Turn(question, result.answer, result.route, result.trajectory_id))
        return result

    def ask(self, question: str, **options: Any) -> Result:
        """One turn, synchronously (takes ``Agent.run``'s options)."""
        return self._remember(question, self.agent.run(question, **self._options(question, options)))

    async def aask(self, question: str, **options: Any) -> Result:
        """One turn, async."""
        return self._remember(question, await self.agent.arun(question, **self._options(question, options)))

    async def astream(self, question: str, **options: Any) -> AsyncIterator[Event]:
        """One turn as typed events (see ``Agent.astream``); the turn is remembered at its ``Answer``."""
        from agentrt.app.events import Answer, astream

        async for event in astream(self.agent, question, **self._options(question, options)):
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
