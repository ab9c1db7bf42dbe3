"""The ``ask_user`` tool: ask the user a clarifying question.

Without a callback the tool ends the turn: the loop stops and returns the question as its output
(``ToolLoopResult.stopped == "ask_user"``). With a callback (an SDK or REPL hook that can ask right
away), the user's reply is the observation and the loop goes on.
"""

from __future__ import annotations

import inspect
from collections.abc import Awaitable, Callable

from tools.base import Tool, ToolError, tool

AskCallback = Callable[[str], str | Awaitable[str]]


def make_ask_user_tool(callback: AskCallback | None = None, *, timeout_s: float = 300.0) -> Tool:
    """``ask_user(question)``; ends the turn unless ``callback`` can answer it now."""

    if callback is None:
        @tool(name="ask_user", ends_turn=True, timeout_s=timeout_s)
        def ask_user(question: str) -> str:
            """Ask the user a clarifying question when the request is ambiguous; ends your turn.

            Args:
                question: One short question for the user.
            """
            if not question.strip():
                raise ToolError("the question is empty")
            return question.strip()

        return ask_user

    @tool(name="ask_user", timeout_s=timeout_s)
    async def ask_user_now(question: str) -> str:
        """Ask the user a clarifying question when the request is ambiguous; returns their reply.

        Args:
            question: One short question for the user.
        """
        reply = callback(question.strip())
        if inspect.isawaitable(reply):
            reply = await reply
        return str(reply)

    return ask_user_now
