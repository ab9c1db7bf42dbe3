"""Predictable latency for API users: the policy's measured decode speed, and the route in response headers.

``max_latency_s`` (a request field) becomes a budget cap (``request._latency_cap``): the prompt plus
``max_latency_s`` x the decode tokens/s measured here. The budget is a hard bound on every token a run
generates, and the router only picks routes whose expected tokens fit the budget, so the cap bounds the
run's decode time; prefill and tool time come on top (small next to decoding on the embedded model).

``DecodeSpeed`` follows the runs the server answers, streamed or not (``Measured`` wraps the agent):
completion tokens / model-call seconds, an exponential moving average. Before any run is measured it
gives the ``serve_decode_tokens_per_s`` setting (a conservative guess) and says it is one, so no model
call is ever made outside a run (a probe would have no budget and no trajectory).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

_WEIGHT = 0.2  # of each new run in the average: a few runs move it, one slow run does not


@dataclass
class DecodeSpeed:
    """The policy's decode speed in tokens/s as this server has seen it (None until measured);
    ``default``: what ``rate`` gives before then (the ``serve_decode_tokens_per_s`` setting)."""

    default: float = 8.0
    tokens_per_s: float | None = None
    runs: int = 0  # how many runs the figure rests on

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

    def rate(self) -> tuple[float, bool]:
        """The speed in tokens/s and whether it was measured (False: ``default``, no run measured yet)."""
        return (self.tokens_per_s, True) if self.tokens_per_s is not None else (self.default, False)


class Measured:
    """``agent`` with every finished run (streamed or not) observed by ``speed``; all else is the agent's."""

    def __init__(self, agent: Any, speed: DecodeSpeed) -> None:
        self._agent, self._speed = agent, speed

    def __getattr__(self, name: str) -> Any:
        return getattr(self._agent, name)

    async def run_request(self, req: Any, hooks: Any = None) -> Any:
        result = await self._agent.run_request(req, hooks)
        self._speed.observe(result)
        return result


def route_headers(route: str, reason: str) -> dict[str, str]:
    """``x-agentrt-route`` / ``x-agentrt-route-reason``, ASCII-safe (HTTP header values are latin-1, and
    a reason may hold any text): non-ASCII and control characters become ``?``, at most 300 characters."""
    def clean(text: str) -> str:
        return "".join(c if " " <= c <= "~" else "?" for c in text)[:300]

    return {"x-agentrt-route": clean(route) or "none", "x-agentrt-route-reason": clean(reason)}


__all__ = ["DecodeSpeed", "Measured", "route_headers"]
