"""Routing policies the harness compares, by name.

A policy turns an item into the ``route`` argument of ``Agent.arun`` (None = the Agent's own choice)
and, when it has one, its predicted probability of success (for calibration). New routers plug in
by adding a factory to ``ROUTERS`` (``"mine": "evals.my_router:build"``) — imported only when named.

* ``fixed:ROUTE`` always takes ROUTE (direct, reason, ...): the per-action baselines the oracle uses.
* ``rules``, ``self``, ``cascade``, ``learned:PATH``: the Agent decides with that router
  (agentrt.router); its predicted success probability is read from the trajectory's route step.

Every spec but the ``ROUTERS`` names is checked by ``agentrt.router.make_router``: one parser.
"""

from __future__ import annotations

import importlib
from dataclasses import dataclass
from typing import Protocol

from agentrt.core.config import Settings
from agentrt.core.errors import InputError
from evals.suites import Item


@dataclass(slots=True)
class Choice:
    route: str | None            # None: the Agent chooses
    p_success: float | None = None
    router: str | None = None    # an agentrt.router spec the Agent decides with (rules, learned:PATH, ...)


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
        # decided by agentrt's own fixed router, so the run records the decision with the question's features
        # (its index signals included) at propensity 1, like any router's: a grid of fixed runs trains and
        # values routers that read those features
        return Choice(self.route, router=f"fixed:{self.route}")


@dataclass(slots=True)
class AgentRouter:
    """One of the runtime's routers (agentrt.router): the Agent decides per item with it."""

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


def make_router(spec: str, settings: Settings | None = None) -> EvalRouter:
    """``fixed:<route>`` | ``rules`` | ``self`` | ``cascade`` | ``learned:PATH`` | a name registered in ROUTERS.

    The runtime's specs are parsed by ``agentrt.router.make_router`` (the one parser; a learned
    router's file is loaded there, so a missing or stale file fails before any model loads); a spec
    it does not know may name one of the harness's own routers in ``ROUTERS``. ``settings``: what
    the runtime's router is built with for that check (default: ``Settings()``). Bad specs raise
    InputError listing the valid ones.
    """
    from agentrt.core.errors import ConfigError
    from agentrt.core.types import ROUTES
    from agentrt.router import make_router as runtime_router

    kind, _, arg = spec.partition(":")
    if settings is None:
        from agentrt.core.config import Settings

        settings = Settings()
    if kind == "fixed" and "@" in arg:  # a route on a model tier: its form here, the tier by the command's settings
        from agentrt.core.request import check_route

        try:
            return FixedRouter(check_route(arg))
        except ValueError as e:
            raise InputError(f"router {spec!r}: {e}") from None
    try:
        runtime_router(spec, settings)
    except ConfigError as e:
        if kind in ROUTERS:  # not a runtime spec: one of the harness's own
            module, _, factory = ROUTERS[kind].partition(":")
            return getattr(importlib.import_module(module), factory)(arg)
        if kind == "fixed":
            raise InputError(f"unknown route in router {spec!r}; choose fixed:{' | fixed:'.join(ROUTES)}") from None
        if spec.startswith("learned:"):
            raise InputError(str(e)) from None
        extra = f"; or one of the harness's: {', '.join(sorted(ROUTERS))}" if ROUTERS else ""
        raise InputError(f"{e}{extra}") from None
    # A fixed action is passed to the run as its route (no router step): its runs feed the oracle.
    return FixedRouter(arg) if kind == "fixed" else AgentRouter(spec)
