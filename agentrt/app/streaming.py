"""Streaming a run: ``astream`` / ``stream`` yield the run's typed events (agentrt.core.events, re-exported
here), ending with ``Answer``.

Text streams token by token: each model call yields ``TokenDelta`` events (a token or a small group of
tokens) while the model generates, each with the call's ``step`` name and the ``route``; ``thought`` is
True for reasoning (the reason route's thinking, plans, searchers, ...) and False for the answer the
user sees. A route whose answer is not generated as plain text (plan, sampled votes, abstain) yields it
as one answer delta at its end. ``Answer.answer`` is the authoritative answer (a route may trim what it
streamed, e.g. surrounding whitespace). Backends that cannot stream (a custom one) give one delta per call.

    async for event in agent.astream("What is the capital of France?"):
        if event.type == "token" and not event.thought:
            print(event.text, end="", flush=True)
"""

from __future__ import annotations

import asyncio
import dataclasses
import queue
import threading
from typing import Any, AsyncIterator, Iterator

from agentrt.core.events import (
    Answer, BudgetUpdate, Event, FanOut, Plan, PlanApproved, RouteDecided, RunFinished, RunStarted, SearcherDone,
    SearcherFailed, StepFinished, StepStarted, TokenDelta, ToolCall,
)
from agentrt.core.protocols import Runner
from agentrt.core.request import RunHooks, RunRequest

_DONE = object()


async def astream(agent: Runner, req: RunRequest, hooks: RunHooks | None = None) -> AsyncIterator[Event]:
    """Run ``req`` on ``agent`` and yield its typed events, ending with ``Answer``; closing early cancels it."""
    events: asyncio.Queue[Any] = asyncio.Queue()
    hooks = hooks or RunHooks()
    user_hook = hooks.on_event

    def on_event(event: Event) -> None:
        if user_hook is not None:
            user_hook(event)
        events.put_nowait(event)

    async def runner() -> Any:
        try:
            return await agent.run_request(req, dataclasses.replace(hooks, on_event=on_event))
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


def stream(agent: Runner, req: RunRequest, hooks: RunHooks | None = None) -> Iterator[Event]:
    """Synchronous ``astream``: the run's event loop lives in a helper thread; events come through a queue."""
    out: queue.Queue[Any] = queue.Queue()
    stop = threading.Event()
    loop = asyncio.new_event_loop()

    async def pump() -> None:
        gen = astream(agent, req, hooks)
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
    "Event", "RunStarted", "RouteDecided", "Plan", "PlanApproved", "FanOut", "SearcherDone", "SearcherFailed",
    "StepStarted", "StepFinished", "ToolCall", "TokenDelta", "BudgetUpdate", "RunFinished", "Answer", "astream",
    "stream",
]
