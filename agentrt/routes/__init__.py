"""The routes: one package, one registry. A route answers a question inside a run.

Each route is a module with ``async def run(ctx: RunContext, question: str) -> RouteOutput``:

=========  ==========================================================================
direct     answer in one call, no thinking (``direct.py``)
reason     think under a thinking cap, then answer; N samples + majority/verifier (``reason.py``)
plan       plan -> parallel searchers -> cited answer, the LangGraph workflow (``plan.py``)
ask        a clarifying question instead of a guess (``ask.py``)
abstain    "I don't know", no tokens spent (``abstain.py``)
=========  ==========================================================================

The names come from ``agentrt.core.types.ROUTES`` (the router's actions are the same tuple); route
modules are imported on first use, so that the plan route's LangGraph loads only when it runs.
"""

from __future__ import annotations

import importlib
from typing import Awaitable, Callable

from agentrt.core.errors import InputError
from agentrt.core.types import ROUTES
from agentrt.routes._confidence import CONFIDENT_ROUTES, ask_confidence
from agentrt.routes.context import RouteOutput, RunContext

RouteFn = Callable[[RunContext, str], Awaitable[RouteOutput]]

_MODULES = {name: f"agentrt.routes.{name}" for name in ROUTES}


def check_route(name: str) -> str:
    """``name`` if it is a route, else ``InputError`` listing the routes."""
    if name not in _MODULES:
        raise InputError(f"unknown route {name!r}; choose one of: {', '.join(ROUTES)}")
    return name


def get_route(name: str) -> RouteFn:
    """The ``run`` function of route ``name`` (its module is imported on first use).

    It runs with ``ctx.route`` set to ``name`` (streamed token deltas carry it); a route that streamed
    no answer text (its answer came from JSON, a vote, or no model at all) then says its answer as one
    ``TokenDelta``, so an observer always sees the answer arrive as answer text. When the run asks for a
    stated confidence (``ctx.options.confidence``) and the route did not state one (grammar mode, or a
    route that cannot carry the tail), one grammar-constrained call asks for it (``agentrt.routes._confidence``).
    """
    route = importlib.import_module(_MODULES[check_route(name)]).run

    async def run(ctx: RunContext, question: str) -> RouteOutput:
        ctx.route, before = name, ctx.answer_deltas
        output = await route(ctx, question)
        if ctx.answer_deltas == before:
            ctx.say("answer", output.answer)
        if (ctx.options.confidence != "off" and output.confidence_status is None and output.answer
                and name in CONFIDENT_ROUTES):
            output = await ask_confidence(ctx, output)
        return output

    run.__doc__ = route.__doc__
    return run


__all__ = ["CONFIDENT_ROUTES", "ROUTES", "RouteFn", "RouteOutput", "RunContext", "check_route", "get_route"]
