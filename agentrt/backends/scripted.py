"""A scripted backend for control-flow tests: replies come from a list or a function.

Token counts are whitespace words (+ 4 per message), so tests can predict the budget exactly. With
``params.on_token`` set, each choice streams one word (with its whitespace) at a time.
No feature is "done" on this backend; it exists to test the runtime's logic without a model.
"""

from __future__ import annotations

import asyncio
import re
from collections.abc import Callable

from agentrt.core.config import Settings
from agentrt.core.types import Choice, Completion, GenParams, Message, Usage

Reply = str | Callable[[list[Message], GenParams], str]


class ScriptedBackend:
    """Replies in order (the last one repeats), truncated to ``max_tokens`` words."""

    def __init__(self, replies: list[Reply] | None = None, *, name: str = "scripted",
                 context_length: int = 4096, delay_s: float = 0.0, supports_thinking: bool = False) -> None:
        self.name = name
        self.context_length = context_length
        self.replies = list(replies or ["ok"])
        self.delay_s = delay_s
        self.supports_thinking = supports_thinking
        self.calls: list[tuple[list[Message], GenParams]] = []

    def count_tokens(self, messages: list[Message], params: GenParams | None = None) -> int:
        return sum(len(m.content.split()) + 4 for m in messages)

    async def chat(self, messages: list[Message], params: GenParams) -> Completion:
        if self.delay_s:
            await asyncio.sleep(self.delay_s)
        index = min(len(self.calls), len(self.replies) - 1)
        self.calls.append((messages, params))
        reply = self.replies[index]
        text = reply(messages, params) if callable(reply) else reply
        choices = []
        for _ in range(params.n):
            words = text.split()
            finish = "length" if len(words) > params.max_tokens else "stop"
            out = " ".join(words[: params.max_tokens])
            for s in params.stop:
                if s in out:
                    out, finish = out[: out.index(s)], "stop"
            n = len(out.split())
            if params.on_token is not None:
                for piece in re.findall(r"\S+\s*|\s+", out):  # the pieces spell `out` exactly
                    params.on_token(len(choices), piece)
                    await asyncio.sleep(0)  # let a consumer see each piece, as with a real model
            choices.append(Choice(out, list(range(n)), [-0.1] * n if params.logprobs else None, finish))
        prompt = self.count_tokens(messages)
        usage = Usage(prompt, sum(len(c.token_ids) for c in choices))
        return Completion(choices, list(range(prompt)), usage, self.name, latency_s=self.delay_s)  # the time it "took"


def from_spec(arg: str, settings: Settings) -> ScriptedBackend:
    """``scripted:REPLY`` always answers REPLY."""
    return ScriptedBackend([arg])
