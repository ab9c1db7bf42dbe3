"""Routing policies the harness compares, by name.

A policy turns an item into the ``route`` argument of ``Agent.arun`` (None = the Agent's own choice)
and, when it has one, its predicted probability of success (for calibration). New routers plug in
by adding a factory to ``ROUTERS`` (``"learned": "evals.my_router:build"``) — imported only when named.

* ``fixed:ROUTE`` always takes ROUTE (direct, reason, ...): the per-action baselines the oracle uses.
* ``rules``, ``self``, ``cascade``, ``learned:PATH``: the Agent decides with that router
  (agentrt.routing); its predicted success probability is read from the trajectory's route step.
"""

from __future__ import annotations

import importlib
from dataclasses import dataclass
from typing import Protocol

from agentrt.core.errors import InputError
from evals.suites import Item


@dataclass(slots=True)
class Choice:
    route: str | None            # None: the Agent chooses
    p_success: float | None = None
    router: str | None = None    # an agentrt.routing spec the Agent decides with (rules, learned:PATH, ...)


class EvalRouter(Protocol):
    name: str
    fixed: bool                  # a fixed action: its runs feed the oracle

    def choose(self, item: Item) -> Choice: ...


@dataclass(slots=True)
class FixedRouter:
    route: str
    name: str = ""
    fixed: bool = True

    def __post_init__(self) -> None:
        self.name = self.name or f"fixed:{self.route}"

    def choose(self, item: Item) -> Choice:
        return Choice(self.route)


@dataclass(slots=True)
class AgentRouter:
    """One of the runtime's routers (agentrt.routing): the Agent decides per item with it."""

    spec: str
    name: str = ""
    fixed: bool = False

    def __post_init__(self) -> None:
        self.name = self.name or self.spec

    def choose(self, item: Item) -> Choice:
        return Choice(None, router=self.spec)


RulesRouter = AgentRouter  # the Agent's default router


# name -> "module:factory" for routers that live elsewhere; factory(arg: str) -> EvalRouter.
ROUTERS: dict[str, str] = {}


def make_router(spec: str) -> EvalRouter:
    """``fixed:<route>`` | ``rules`` | ``self`` | ``cascade`` | ``learned:PATH`` | a name registered in ROUTERS."""
    from agentrt.core.types import ROUTES

    kind, _, arg = spec.partition(":")
    if kind == "fixed":
        if arg not in ROUTES:
            raise InputError(f"unknown route in router {spec!r}; choose fixed:{' | fixed:'.join(ROUTES)}")
        return FixedRouter(arg)
    if spec in ("rules", "self", "cascade"):
        return AgentRouter(spec)
    if kind == "learned" and arg:
        from agentrt.core.errors import ConfigError
        from agentrt.routing.learned import RouterModel

        try:
            RouterModel.load(arg)  # a missing or stale router file fails before any model loads
        except ConfigError as e:
            raise InputError(str(e)) from None
        return AgentRouter(spec)
    if kind in ROUTERS:
        module, _, factory = ROUTERS[kind].partition(":")
        return getattr(importlib.import_module(module), factory)(arg)
    known = [f"fixed:{r}" for r in ROUTES] + ["rules", "self", "cascade", "learned:PATH"] + sorted(ROUTERS)
    raise InputError(f"unknown router {spec!r}; choose one of: {', '.join(known)}")
