"""Protocols the rooms talk through. Implementations live in one file each."""

from __future__ import annotations

from typing import Protocol, runtime_checkable

from agentrt.core.types import Completion, GenParams, Message


@runtime_checkable
class ModelBackend(Protocol):
    """A chat model. Two methods and a little metadata; implementations are one file each.

    ``chat`` continues the final message when it is an assistant message (a prefill), otherwise it
    opens a new assistant turn. ``count_tokens`` uses the model's own chat template, so the budget
    can be checked before a call. A backend that can stream calls ``params.on_token`` with each new
    piece of text as it is generated (see ``GenParams``); one that cannot ignores it.
    """

    name: str
    context_length: int

    async def chat(self, messages: list[Message], params: GenParams) -> Completion: ...

    def count_tokens(self, messages: list[Message], params: GenParams | None = None) -> int:
        """Prompt tokens of ``messages`` as ``chat`` would send them (``params`` for template switches)."""
        ...
