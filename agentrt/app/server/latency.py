"""Predictable latency for API users: the policy's measured decode speed, and the route in response headers.

``max_latency_s`` (a request field) becomes a budget cap (``request._latency_cap``): the prompt plus
``max_latency_s`` x the decode tokens/s measured here. The budget is a hard bound on every token a run
generates, and the router only picks routes whose expected tokens fit the budget, so the cap bounds the
run's decode time; prefill and tool time come on top (small next to decoding on the embedded model).

``DecodeSpeed`` starts from one short greedy call (on the first request that needs it), then follows
the runs the server answers: completion tokens / model-call seconds, an exponential moving average.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass
from typing import Any

from agentrt.core.types import GenParams, Message

PROBE_TOKENS = 16
_WEIGHT = 0.2  # of each new run in the average: a few runs move it, one slow run does not


@dataclass
class DecodeSpeed:
    """The policy's decode speed in tokens/s as this server has seen it (None until measured)."""

    tokens_per_s: float | None = None
    runs: int = 0  # how many observations the figure rests on (the probe counts as one)

    def observe(self, result: Any) -> None:
        """Fold one finished run's model calls (``Result.record`` steps) into the average."""
        steps = result.record.steps if getattr(result, "record", None) is not None else []
        calls = [s for s in steps if s.get("kind") == "model_call" and s.get("latency_s")]
        tokens = sum(s["usage"]["completion_tokens"] for s in calls)
        seconds = sum(s["latency_s"] for s in calls)
        if tokens >= 4 and seconds > 0:
            self._add(tokens / seconds)

    def _add(self, rate: float) -> None:
        self.tokens_per_s = rate if self.tokens_per_s is None else (1 - _WEIGHT) * self.tokens_per_s + _WEIGHT * rate
        self.runs += 1

    async def measured(self, policy: Any) -> float:
        """The speed, measured first with one short greedy call when no run has been seen yet."""
        if self.tokens_per_s is None:
            loop = asyncio.get_running_loop()
            started = loop.time()
            completion = await policy.chat([Message("user", "Count from 1 to 20.")],
                                           GenParams(max_tokens=PROBE_TOKENS, logprobs=False))
            elapsed = loop.time() - started
            self._add(max(1, completion.usage.completion_tokens) / max(elapsed, 1e-3))
        return float(self.tokens_per_s or 0.0)


def route_headers(route: str, reason: str) -> dict[str, str]:
    """``x-agentrt-route`` / ``x-agentrt-route-reason``, ASCII-safe (HTTP header values are latin-1, and
    a reason may hold any text): non-ASCII and control characters become ``?``, at most 300 characters."""
    def clean(text: str) -> str:
        return "".join(c if " " <= c <= "~" else "?" for c in text)[:300]

    return {"x-agentrt-route": clean(route) or "none", "x-agentrt-route-reason": clean(reason)}


__all__ = ["DecodeSpeed", "PROBE_TOKENS", "route_headers"]
