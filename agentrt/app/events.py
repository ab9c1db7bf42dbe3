"""Typed run events: what ``Agent.stream`` / ``astream`` yield, and what the REPL and server show.

A run reports raw dict events through ``RunContext.on_event`` (cheap, no imports); ``to_events``
turns each into zero or more typed events below. Token deltas are coarse: one ``TokenDelta`` per
model call, carrying that call's whole completion.
"""

from __future__ import annotations

import asyncio
import queue
import threading
from dataclasses import asdict, dataclass, field
from typing import TYPE_CHECKING, Any, AsyncIterator, ClassVar, Iterator

if TYPE_CHECKING:
    from agentrt.app.agent import Agent, Result


@dataclass
class Event:
    """Base of every event; ``type`` names it (``route_decided``, ``step_finished``, ...)."""

    type: ClassVar[str] = "event"

    def to_dict(self) -> dict[str, Any]:
        """A JSON-ready dict with the event's ``type``."""
        return {"type": self.type, **asdict(self)}


@dataclass
class RunStarted(Event):
    """The run began: its id (the trajectory id), the chosen route and the budget."""

    type: ClassVar[str] = "run_started"
    run_id: str
    route: str
    budget: int
    model: str = ""


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


@dataclass
class PlanApproved(Event):
    """The caller's approve_plan callback (or the default) accepted or rejected the plan."""

    type: ClassVar[str] = "plan_approved"
    approved: bool
    plan: dict[str, Any] = field(default_factory=dict)


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
    """A step was recorded: a model call, a memory op, ... (``kind`` is the trajectory step kind)."""

    type: ClassVar[str] = "step_finished"
    name: str
    kind: str
    usage: dict[str, int] = field(default_factory=dict)
    latency_s: float = 0.0


@dataclass
class ToolCall(Event):
    """A tool ran: its arguments, result (or error)."""

    type: ClassVar[str] = "tool_call"
    name: str
    args: dict[str, Any] = field(default_factory=dict)
    result: str | None = None
    error: str | None = None


@dataclass
class TokenDelta(Event):
    """Text a model call produced (coarse: the whole completion of one call)."""

    type: ClassVar[str] = "token"
    step: str
    text: str


@dataclass
class BudgetUpdate(Event):
    """Tokens spent so far out of the run's total."""

    type: ClassVar[str] = "budget"
    spent: int
    total: int


@dataclass
class Answer(Event):
    """The run ended; ``result`` is the same ``Result`` that ``arun`` returns."""

    type: ClassVar[str] = "answer"
    answer: str
    result: Any = None

    def to_dict(self) -> dict[str, Any]:
        return {"type": self.type, "answer": self.answer,
                "result": self.result.to_dict() if self.result is not None else None}


def to_events(raw: dict[str, Any]) -> list[Event]:
    """Typed events for one raw run event (an unknown raw event gives none)."""
    kind = raw.get("type")
    if kind == "run_started":
        return [RunStarted(raw["run_id"], raw["route"], raw["budget"], raw.get("model", ""))]
    if kind == "model_call_started":
        return [StepStarted(raw["name"], raw.get("backend", ""), raw.get("prompt_tokens", 0), raw.get("max_tokens", 0))]
    if kind == "budget":
        return [BudgetUpdate(raw["spent"], raw["total"])]
    if kind == "plan_approved":
        return [PlanApproved(bool(raw["approved"]), raw.get("plan") or {})]
    if kind != "step":
        return []
    step = raw["step"]
    step_kind = step.get("kind", "")
    if step_kind == "route_decision":
        return [RouteDecided(step["route"], step.get("reason", ""), step.get("propensity", 1.0))]
    if step_kind == "plan":
        return [Plan(step.get("plan") or {}, step.get("planner", ""))]
    if step_kind == "tool_call":
        return [ToolCall(step.get("name", ""), step.get("args") or {}, step.get("result"), step.get("error"))]
    if step_kind == "model_call":
        texts = step.get("completions") or [""]
        return [TokenDelta(step.get("name", ""), texts[0]),
                StepFinished(step.get("name", ""), step_kind, step.get("usage") or {}, step.get("latency_s", 0.0))]
    return [StepFinished(step.get("name") or step.get("op") or step_kind, step_kind, {}, step.get("latency_s", 0.0))]


_DONE = object()


async def astream(agent: Agent, question: str, **options: Any) -> AsyncIterator[Event]:
    """Run ``agent.arun`` and yield its typed events, ending with ``Answer``; closing early cancels it."""
    events: asyncio.Queue[Any] = asyncio.Queue()
    user_hook = options.pop("on_event", None)

    def on_event(raw: dict[str, Any]) -> None:
        if user_hook is not None:
            user_hook(raw)
        for event in to_events(raw):
            events.put_nowait(event)

    async def runner() -> Result:
        try:
            return await agent.arun(question, on_event=on_event, **options)
        finally:
            events.put_nowait(_DONE)

    task = asyncio.ensure_future(runner())
    try:
        while True:
            item = await events.get()
            if item is _DONE:
                break
            yield item
        result = task.result()  # re-raises the run's error
        yield Answer(result.answer, result)
    finally:
        if not task.done():
            task.cancel()
            try:
                await task
            except (asyncio.CancelledError, Exception):  # noqa: BLE001 - the consumer left; nothing to report to
                pass


def stream(agent: Agent, question: str, **options: Any) -> Iterator[Event]:
    """Synchronous ``astream``: the run's event loop lives in a helper thread; events come through a queue."""
    out: queue.Queue[Any] = queue.Queue()
    stop = threading.Event()
    loop = asyncio.new_event_loop()

    async def pump() -> None:
        gen = astream(agent, question, **options)
        try:
            async for event in gen:
                out.put(event)
                if stop.is_set():
                    break
        except BaseException as e:  # noqa: BLE001 - handed to the consumer thread
            out.put(e)
        finally:
            await gen.aclose()
            out.put(_DONE)

    holder: dict[str, asyncio.Task] = {}

    def main() -> None:
        asyncio.set_event_loop(loop)
        holder["task"] = loop.create_task(pump())
        loop.run_until_complete(holder["task"])
        loop.close()

    thread = threading.Thread(target=main, name="agentrt-stream", daemon=True)
    thread.start()
    try:
        while True:
            item = out.get()
            if item is _DONE:
                break
            if isinstance(item, BaseException):
                raise item
            yield item
    finally:
        stop.set()
        task = holder.get("task")
        if task is not None and not task.done():
            loop.call_soon_threadsafe(task.cancel)
        thread.join()


__all__ = [
    "Event", "RunStarted", "RouteDecided", "Plan", "PlanApproved", "StepStarted", "StepFinished",
    "ToolCall", "TokenDelta", "BudgetUpdate", "Answer", "to_events", "astream", "stream",
]
