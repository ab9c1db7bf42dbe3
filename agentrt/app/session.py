"""Conversations: multi-turn sessions with memory of the prior turns.

Each turn is one agent run whose ``history`` is the prior turns as messages, within ``history_share``
of the turn's budget. Two history policies:

* ``"trim"`` (default): the newest turns that fit; older ones are dropped, never cut mid-turn.
* ``"compress"``: when the conversation outgrows its share, the older turns are summarized by the
  policy model (``memory.compress``) and archived in the memory store (still searchable); the
  summary's tokens are paid from the turn's budget, so a turn never breaks its hard bound.

The router sees the new question and features of the conversation (turn number, whether the history
resolves it), never the history as its question.
"""

from __future__ import annotations

import asyncio
import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any, AsyncIterator

from agentrt.core.errors import InputError, UserError
from agentrt.core.events import Event
from agentrt.core.protocols import Runner, RunResult
from agentrt.core.request import RunHooks, RunRequest, newest_that_fit
from agentrt.core.types import Message


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

    def __init__(self, agent: Runner, *, history_share: float = 0.5, budget: int | None = None,
                 history: str = "trim") -> None:
        if not 0.0 <= history_share < 1.0:
            raise InputError(f"history_share must be in [0, 1), got {history_share!r}")
        if history not in ("trim", "compress"):
            raise InputError(f"history must be 'trim' or 'compress', got {history!r}")
        self.agent = agent
        self.history_share = history_share
        self.budget = budget
        self.policy = history
        self.turns: list[Turn] = []
        self._compressed: list[Message] | None = None  # compress: the summary + the turns after it
        self._archive: Any = None

    def reset(self) -> None:
        """Forget every prior turn."""
        self.turns.clear()
        self._compressed = None

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
        pairs = [[Message("user", t.question), Message("assistant", t.answer)] for t in self.turns]
        return newest_that_fit(pairs, self.agent.policy.count_tokens, int(total * self.history_share))

    async def _compress(self, total: int) -> tuple[list[Message], int, dict[str, Any] | None]:
        """The compressed history, the tokens its summary cost, and the compression's memory_op step."""
        from agentrt.core.budget import Budget
        from memory.compress import acompress_messages

        messages = self._compressed if self._compressed is not None else self.messages
        allowance = int(total * self.history_share)
        policy = self.agent.policy
        if policy.count_tokens(messages) <= allowance:
            return messages, 0, None
        if self._archive is None:
            from memory.chroma import open_store
            from memory.corpus import resolve_location

            self._archive = open_store(resolve_location(self.agent.settings), "conversations")
        # the summary is paid from this turn's budget: what it spends, the run does not get
        summary_budget = Budget(max(0, total - allowance) // 4, name="history-summary")
        done = await acompress_messages(messages, count_tokens=policy.count_tokens, summarize=policy,
                                        store=self._archive, limit=allowance, keep_last=2, budget=summary_budget,
                                        summary_tokens=64)
        self._compressed = done.messages
        return done.messages, summary_budget.spent, done.step

    async def _request(self, question: str, options: dict[str, Any]) -> tuple[RunRequest, RunHooks]:
        """The turn's request (validated before any work), amended with the history it may see."""
        req, hooks = self.agent.request(question, **{**options, "budget": options.get("budget") or self.budget})
        total = req.budget or self.agent.settings.budget
        if self.policy == "trim":
            return req.amend(history=self.history_for(total)), hooks
        history, spent, step = await self._compress(total)
        metadata = {**req.metadata, "history_compression": step} if step is not None else req.metadata
        return req.amend(history=history, budget=total - spent, metadata=metadata), hooks

    def _remember(self, question: str, result: RunResult) -> RunResult:
        if not result.answer.strip():
            # a turn that ended without a real answer (no_answer, truncated before any) is not history: an empty
            # assistant message would teach the next turn that silence is a reply
            return result
        self.turns.append(Turn(question, result.answer, result.route, result.trajectory_id))
        if self._compressed is not None:
            self._compressed += [Message("user", question), Message("assistant", result.answer)]
        return result

    def ask(self, question: str, **options: Any) -> RunResult:
        """One turn, synchronously (takes ``Agent.run``'s options)."""
        try:
            asyncio.get_running_loop()
        except RuntimeError:
            return asyncio.run(self.aask(question, **options))
        raise UserError("Session.ask() was called inside an event loop; use `await session.aask(...)` there")

    async def aask(self, question: str, **options: Any) -> RunResult:
        """One turn, async."""
        req, hooks = await self._request(question, options)
        return self._remember(question, await self.agent.run_request(req, hooks))

    async def astream(self, question: str, **options: Any) -> AsyncIterator[Event]:
        """One turn as typed events (see ``Agent.astream``); the turn is remembered at its ``Answer``."""
        from agentrt.app.streaming import Answer, astream

        async for event in astream(self.agent, *(await self._request(question, options))):
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
