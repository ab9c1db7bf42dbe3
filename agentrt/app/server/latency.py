"""Predictable latency for API users: the policy's measured decode speed, and the route in response headers.

``max_latency_s`` (a request field) becomes a budget cap (``request._latency_cap``): the prompt plus
``max_latency_s`` x the decode tokens/s measured here. The budget is a hard bound on every token a run
generates, and the router only picks routes whose expected tokens fit the budget, so the cap bounds the
run's decode time; prefill and tool time come on top (small next to decoding on the embedded model).

``DecodeSpeed`` follows the runs the server answers, streamed or not (``Measured`` wraps the agent): the
speed one sequence decodes at (a run's one-row model calls: completion tokens / seconds), the median of the
last ``WINDOW`` runs. A call with n > 1 rows is left out: its steps decode a batch the client chose (16 rows
on a CPU decoded each row ~30x slower than one), and one client's n=16 request once dragged the figure so
low that every ``max_latency_s`` under 17.5 s was refused for everyone; the median keeps a few slow runs
(a burst of load) from moving it either. Before any run is measured it gives the
``serve_decode_tokens_per_s`` setting (a conservative guess) and says it is one, so no model call is ever
made outside a run (a probe would have no budget and no trajectory).
"""

from __future__ import annotations

import statistics
from collections import deque
from dataclasses import dataclass, field
from typing import Any

WINDOW = 15  # runs the median is over: a few slow ones do not move it, a lasting change does within ~8


@dataclass
class DecodeSpeed:
    """The policy's decode speed in tokens/s as this server has seen it (None until measured);
    ``default``: what ``rate`` gives before then (the ``serve_decode_tokens_per_s`` setting)."""

    default: float = 8.0
    recent: deque[float] = field(default_factory=lambda: deque(maxlen=WINDOW))  # the last runs' speeds
    runs: int = 0  # how many runs have been measured

    @property
    def tokens_per_s(self) -> float | None:
        """The median of the recent runs' speeds; None before any."""
        return statistics.median(self.recent) if self.recent else None

    def observe(self, result: Any) -> None:
        """Add one finished run's speed: its one-row model calls (``Result.record`` steps), tokens / seconds."""
        steps = result.record.steps if getattr(result, "record", None) is not None else []
        calls = [s for s in steps if s.get("kind") == "model_call" and s.get("latency_s") and _one_row(s)]
        tokens = sum(s["usage"]["completion_tokens"] for s in calls)
        seconds = sum(s["latency_s"] for s in calls)
        if tokens >= 4 and seconds > 0:
            self.recent.append(tokens / seconds)
            self.runs += 1

    def rate(self) -> tuple[float, bool]:
        """The speed in tokens/s and whether it was measured (False: ``default``, no run measured yet)."""
        return (self.tokens_per_s, True) if self.tokens_per_s is not None else (self.default, False)


def _one_row(step: dict[str, Any]) -> bool:
    """Whether a model call decoded one sequence (not n > 1 choices in one batch)."""
    return len(step.get("completions") or ()) <= 1 and (step.get("params") or {}).get("n") in (None, 1)


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
