"""A model call's streamed text -> ``TokenDelta`` events (``RunContext.call_model`` uses it).

Backends call ``GenParams.on_token`` from their own threads (the hf batcher, a private event loop);
the run's observers live on the run's event loop, so each piece hops there with
``call_soon_threadsafe``. Pieces are queued before the backend's result is, so every delta is emitted
before the call's step is recorded. Text inside ``<think> ... </think>`` is a thought whatever the
call is (a thinking model, a server's ``reasoning_content``); the tags themselves are not shown.
"""

from __future__ import annotations

import asyncio
import threading
from typing import TYPE_CHECKING, Protocol

from agentrt.routes.thinking import THINK_CLOSE, THINK_OPEN

if TYPE_CHECKING:
    from agentrt.core.types import Completion


class Say(Protocol):
    """Where the pieces go: ``RunContext.say`` (taken as a callable so this module need not know the context)."""

    def __call__(self, step: str, text: str, *, thought: bool = False) -> None: ...


class CallDeltas:
    """The ``on_token`` of one model call named ``step``; ``thought``: the call is reasoning, not the answer."""

    __slots__ = ("say", "step", "thought", "loop", "thread", "inside", "pending", "seen", "hide", "held", "hidden")

    def __init__(self, say: Say, step: str, thought: bool, hide: str | None = None) -> None:
        self.say, self.step, self.thought = say, step, thought
        self.loop = asyncio.get_running_loop()
        self.thread = threading.get_ident()
        self.inside = False  # inside <think> ... </think>
        self.pending = ""  # a possible start of a tag, held back until the next piece says
        self.seen = False
        # ``hide``: a tag from which on nothing is shown (the stated-confidence tail, stripped from the
        # answer); ``held``: trailing whitespace and a possible start of it, held back until the next piece says
        self.hide, self.held, self.hidden = hide, "", False

    def on_token(self, index: int, text: str) -> None:
        """The backend's hook (any thread): new text of choice ``index``."""
        if index != 0:  # a TokenDelta has no choice index: the first choice speaks for the call
            return
        if threading.get_ident() == self.thread:
            self.feed(text)
        else:
            self.loop.call_soon_threadsafe(self.feed, text)

    def feed(self, text: str) -> None:
        """Emit ``text`` (on the run's loop), split where a think tag opens or closes."""
        self.seen = True
        if self.hide is not None:
            if self.hidden:
                return
            text, self.held = self.held + text, ""
            at = text.find(self.hide)
            if at >= 0:
                self.hidden, text = True, text[:at].rstrip()
            else:
                keep = _partial(text, self.hide)
                cut = len(text[:len(text) - keep].rstrip())
                text, self.held = text[:cut], text[cut:]
        self._emit(text)

    def _emit(self, text: str) -> None:
        text, self.pending = self.pending + text, ""
        while text:
            tag = THINK_CLOSE if self.inside else THINK_OPEN
            at = text.find(tag)
            if at < 0:
                keep = _partial(text, tag)
                text, self.pending = text[:len(text) - keep], text[len(text) - keep:]
                self.say(self.step, text, thought=self.thought or self.inside)
                return
            self.say(self.step, text[:at], thought=self.thought or self.inside)
            text, self.inside = text[at + len(tag):], not self.inside

    def close(self, completion: Completion) -> None:
        """After the call: a backend that did not stream gives its whole text now; a held tag start goes out."""
        if not self.seen and completion.choices:
            self.feed(completion.choices[0].text)
        if self.held and not self.hidden:  # the held text was no tail after all
            held, self.held = self.held, ""
            self._emit(held.rstrip())
        pending, self.pending = self.pending, ""
        self.say(self.step, pending, thought=self.thought or self.inside)


def _partial(text: str, tag: str) -> int:
    """Length of the longest end of ``text`` that is a proper start of ``tag`` (0 if none)."""
    return next((k for k in range(min(len(tag) - 1, len(text)), 0, -1) if text.endswith(tag[:k])), 0)
