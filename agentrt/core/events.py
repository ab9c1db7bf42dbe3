"""Typed run events: what ``Agent.stream`` / ``astream`` yield and what ``on_event`` observers receive.

A run emits these as they happen (``RunContext.emit``); every recorded trajectory step becomes the
events of ``step_events``. They are plain dataclasses: cheap to build, ``to_dict()`` for JSON (the
server's SSE), ``type`` names each one.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any, ClassVar


@dataclass
class Event:
    """Base of every event; ``type`` names it (``route_decided``, ``step_finished``, ...)."""

    type: ClassVar[str] = "event"

    def to_dict(self) -> dict[str, Any]:
        """A JSON-ready dict with the event's ``type``."""
        return {"type": self.type, **asdict(self)}


@dataclass
class RunStarted(Event):
    """The run began: its id (the trajectory id), the route when the caller gave it, and the budget.

    ``metadata`` is the record's metadata: an observer may add to it (tracing adds its trace id).
    """

    type: ClassVar[str] = "run_started"
    run_id: str
    route: str
    budget: int
    model: str = ""
    question: str = ""
    metadata: dict[str, Any] = field(default_factory=dict, repr=False)


@dataclass
class RouteDecided(Event):
    """The router chose ``route`` for ``reason`` with probability ``propensity``."""

    type: ClassVar[str] = "route_decided"
    route: str
    reason: str = ""
    propensity: float = 1.0


@dataclass
class Plan(Event):
    """A planner produced a plan (its JSON form)."""

    type: ClassVar[str] = "plan"
    plan: dict[str, Any]
    planner: str = ""
    latency_s: float = 0.0


@dataclass
class PlanApproved(Event):
    """The caller's approve_plan callback accepted or rejected the plan."""

    type: ClassVar[str] = "plan_approved"
    approved: bool
    plan: dict[str, Any] = field(default_factory=dict)


@dataclass
class FanOut(Event):
    """The plan route started one searcher per step of a level."""

    type: ClassVar[str] = "fan_out"
    level: int
    steps: list[str]


@dataclass
class SearcherDone(Event):
    """A plan searcher finished (``stopped``: answer, max_steps, budget, ...)."""

    type: ClassVar[str] = "searcher_done"
    step_id: str
    stopped: str


@dataclass
class SearcherFailed(Event):
    """A plan searcher raised, timed out or found nothing before its budget ran out."""

    type: ClassVar[str] = "searcher_failed"
    step_id: str
    error: str


@dataclass
class StepStarted(Event):
    """A model call began (``name``: think, answer, plan, search...)."""

    type: ClassVar[str] = "step_started"
    name: str
    backend: str = ""
    prompt_tokens: int = 0
    max_tokens: int = 0


@dataclass
class StepFinished(Event):
    """A step was recorded: a model call, a memory op, ... (``kind`` is the trajectory step kind).

    ``step`` is the recorded step itself (left out of ``to_dict``: it carries token ids).
    """

    type: ClassVar[str] = "step_finished"
    name: str
    kind: str
    usage: dict[str, int] = field(default_factory=dict)
    latency_s: float = 0.0
    step: dict[str, Any] = field(default_factory=dict, repr=False)

    def to_dict(self) -> dict[str, Any]:
        out = super().to_dict()
        out.pop("step")
        return out


@dataclass
class ToolCall(Event):
    """A tool ran: its arguments, result (or error)."""

    type: ClassVar[str] = "tool_call"
    name: str
    args: dict[str, Any] = field(default_factory=dict)
    result: str | None = None
    error: str | None = None
    call_id: str | None = None
    latency_s: float = 0.0


@dataclass
class TokenDelta(Event):
    """New text from a model call while it is generated: one token or a small group of tokens.

    ``step`` names the model call (as in ``StepStarted``), ``route`` the route that made it, and
    ``thought`` marks reasoning text (a thinking block, a plan, a searcher's work) as opposed to the
    text of the answer the user sees. ``RunContext.call_model`` emits them as the backend streams; a
    route whose answer is not generated as plain text (plan's JSON synthesis, sampling's vote, abstain)
    emits its final answer as one delta, so the answer deltas of a route always spell out its answer
    (``Answer.answer`` is authoritative: a route may trim what it streamed).
    """

    type: ClassVar[str] = "token"
    step: str
    text: str
    route: str = ""
    thought: bool = False


@dataclass
class BudgetUpdate(Event):
    """Tokens spent so far out of the run's total."""

    type: ClassVar[str] = "budget"
    spent: int
    total: int


@dataclass
class RunFinished(Event):
    """The run's record was written: its status, error, usage, route and answer."""

    type: ClassVar[str] = "run_finished"
    run_id: str
    status: str
    route: str
    answer: str
    usage: dict[str, int] = field(default_factory=dict)
    error: str | None = None


@dataclass
class Answer(Event):
    """The run ended; ``result`` is the same ``Result`` that ``arun`` returns (the last streamed event)."""

    type: ClassVar[str] = "answer"
    answer: str
    result: Any = None

    def to_dict(self) -> dict[str, Any]:
        return {"type": self.type, "answer": self.answer,
                "result": self.result.to_dict() if self.result is not None else None}


def step_events(step: dict[str, Any]) -> list[Event]:
    """The events a recorded trajectory step announces."""
    kind = step.get("kind", "")
    if kind == "route_decision":
        return [RouteDecided(step["route"], step.get("reason", ""), step.get("propensity", 1.0))]
    if kind == "plan":
        return [Plan(step.get("plan") or {}, step.get("planner", ""), step.get("latency_s") or 0.0)]
    if kind == "tool_call":
        return [ToolCall(step.get("name", ""), step.get("args") or {}, step.get("result"), step.get("error"),
                         step.get("call_id"), step.get("latency_s") or 0.0)]
    finished = StepFinished(step.get("name") or step.get("op") or kind, kind, step.get("usage") or {},
                            step.get("latency_s", 0.0), step)
    return [finished]  # a model call's text arrived as TokenDelta events while it was generated


__all__ = [
    "Event", "RunStarted", "RouteDecided", "Plan", "PlanApproved", "FanOut", "SearcherDone", "SearcherFailed",
    "StepStarted", "StepFinished", "ToolCall", "TokenDelta", "BudgetUpdate", "RunFinished", "Answer", "step_events",
]
