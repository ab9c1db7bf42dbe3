"""The shared vocabulary: messages, generation parameters, completions, usage.

Small slotted dataclasses: these are on the hot path of every model call.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Literal

Role = Literal["system", "user", "assistant", "tool"]
ROUTES: tuple[str, ...] = ("direct", "reason", "plan", "read", "ask", "abstain")
# The routes that search the private index: offered only when there is one to search.
INDEX_ROUTES: tuple[str, ...] = ("plan", "read")
# Model tiers (Settings.tiers): an action is a route on a tier, written ``route@tier`` ("read@large"); a bare
# route runs on the base tier, the policy itself, so every action name from before tiers keeps its meaning.
BASE_TIER = "base"
TIER_ROUTES: tuple[str, ...] = ("direct", "reason", "plan", "read")  # the answering routes a tier can run
_TIER_NAME = re.compile(r"[a-z][a-z0-9_-]{0,31}")


def split_action(action: str) -> tuple[str, str]:
    """``"read@large"`` -> ``("read", "large")``; ``"read"`` -> ``("read", "base")``."""
    route, sep, tier = action.partition("@")
    return route, (tier if sep else BASE_TIER)


def tier_action(route: str, tier: str) -> str:
    """The action name of ``route`` on ``tier`` (the bare route on the base tier)."""
    return route if tier == BASE_TIER else f"{route}@{tier}"


def check_tier_name(name: str) -> str:
    """A tier's name as settings and actions may spell it (lower-case, short, no ``@``), else ValueError."""
    if not _TIER_NAME.fullmatch(name) or name == BASE_TIER:
        raise ValueError(f"tier name {name!r}: use lower-case letters, digits, - or _ (at most 32), not {BASE_TIER!r}")
    return name


@dataclass(slots=True)
class Message:
    """One chat message. An assistant message at the end of a request is a prefill to continue."""

    role: Role
    content: str

    def to_dict(self) -> dict[str, str]:
        return {"role": self.role, "content": self.content}


def as_messages(messages: list[Message] | list[dict[str, Any]]) -> list[Message]:
    """Accept plain dicts (OpenAI style) or Messages."""
    return [m if isinstance(m, Message) else Message(m["role"], m["content"]) for m in messages]


@dataclass(slots=True)
class GenParams:
    """Sampling parameters understood by every backend.

    ``temperature == 0`` means greedy. ``logprobs`` asks for the log-probability of each sampled
    token. ``json_schema`` / ``choices`` ask for structured output on backends that support it.

    ``on_token(index, text)``, when set, receives the text of choice ``index`` while it is generated,
    one token or a small group at a time; the pieces of a choice concatenate to its final ``Choice.text``.
    It may be called from any thread (a batcher thread, a backend's own event loop), so it must be quick
    and thread-safe. A backend that cannot stream ignores it. It is not a sampling parameter: it takes
    no part in comparisons and is never recorded.
    """

    max_tokens: int = 256
    temperature: float = 0.0
    top_p: float = 1.0
    top_k: int = 0  # 0: off; k > 0 samples among the k likeliest tokens
    min_p: float = 0.0  # 0: off; drop tokens less likely than min_p x the likeliest one's probability
    repetition_penalty: float = 1.0  # 1: off; > 1 makes tokens already in the prompt or the output less likely
    n: int = 1
    stop: list[str] = field(default_factory=list)
    seed: int | None = None
    logprobs: bool = True
    json_schema: dict[str, Any] | None = None
    choices: list[str] | None = None
    chat_template_kwargs: dict[str, Any] = field(default_factory=dict)
    on_token: Callable[[int, str], None] | None = field(default=None, compare=False, repr=False)


@dataclass(slots=True)
class Usage:
    """Tokens a call (or a run) consumed. ``prompt + completion == total``."""

    prompt_tokens: int = 0
    completion_tokens: int = 0

    @property
    def total_tokens(self) -> int:
        return self.prompt_tokens + self.completion_tokens

    def __add__(self, other: Usage) -> Usage:
        return Usage(
            self.prompt_tokens + other.prompt_tokens,
            self.completion_tokens + other.completion_tokens,
        )

    def to_dict(self) -> dict[str, int]:
        return {
            "prompt_tokens": self.prompt_tokens,
            "completion_tokens": self.completion_tokens,
            "total_tokens": self.total_tokens,
        }


FinishReason = Literal["stop", "length", "error"]


@dataclass(slots=True)
class Choice:
    """One sampled continuation. ``token_ids`` / ``logprobs`` are None when the backend cannot
    return them (e.g. an OpenAI-compatible server without token ids): missing, never invented."""

    text: str
    token_ids: list[int] | None
    logprobs: list[float] | None
    finish_reason: FinishReason


@dataclass(slots=True)
class Completion:
    """What a backend returns for one chat request (``n`` choices share one prompt)."""

    choices: list[Choice]
    prompt_token_ids: list[int] | None
    usage: Usage
    model: str = ""
    latency_s: float = 0.0
    # What the backend had to do to serve it (failovers, retries); recorded in the trajectory step.
    events: list[dict[str, Any]] = field(default_factory=list)

    @property
    def text(self) -> str:
        return self.choices[0].text

    @property
    def finish_reason(self) -> FinishReason:
        return self.choices[0].finish_reason
