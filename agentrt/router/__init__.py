"""Routers: decide how much thinking a request deserves.

Specs: ``auto`` (the default: the router promoted for the running policy, else the shipped one, else
``rules``; see ``registry``), ``fixed:<action>``, ``rules``, ``self``, ``self:PATH`` (a strategy-trained policy folder), ``learned:PATH`` (or
``learned:VERSION`` from the registry), ``cascade``. Every router has
``async decide(question, features, budget) -> RouteDecision``; ``make_router`` builds one from a spec.
"""

from __future__ import annotations

from typing import Any

from agentrt.core.config import Settings
from agentrt.core.errors import ConfigError
from agentrt.core.protocols import Scorer
from agentrt.router.decision import ACTIONS, RouteDecision, UtilityConfig, choose
from agentrt.router.features import extract

__all__ = ["ACTIONS", "RouteDecision", "UtilityConfig", "choose", "extract", "make_router", "CascadeRouter"]

ROUTER_SPECS = "auto, fixed:<action>, rules, self, self:PATH, learned:PATH (or learned:VERSION), cascade"


class CascadeRouter:
    """Run the cheapest promising route; the agent escalates when the answer's confidence is low.

    Confidence is the mean token log-probability of the answer (``Settings.cascade_threshold``).
    """

    name = "cascade"
    ladder = ("direct", "reason", "plan")

    def __init__(self, settings: Settings, cfg: UtilityConfig | None = None) -> None:
        from agentrt.router.rules import RulesRouter

        self.rules = RulesRouter(settings, cfg)

    async def decide(self, question: str, features: dict[str, float], budget: int) -> RouteDecision:
        d = await self.rules.decide(question, features, budget)
        d.router = self.name
        if d.action in self.ladder:
            start = self.ladder.index(d.action)
            # start from the cheapest rung unless the rules see a reason to skip it
            start = 0 if d.action == "reason" and not (features["arithmetic"] or features["code"]) else start
            d.action = self.ladder[start]
            d.escalation = [a for a in self.ladder[start + 1:] if a not in d.excluded]  # guarded: never escalate into it
            d.probabilities = {a: float(a == d.action) for a in d.probabilities}
            d.propensity = 1.0
            d.reason = f"cascade: start with {d.action}, escalate to {' -> '.join(d.escalation) or 'nothing'} if unsure"
        return d


async def _no_scorer(*_: Any) -> list[float]:
    raise ConfigError("the self router scores through a run: use it from Agent.run (router='self')")


def make_router(spec: str, settings: Settings, *, policy: Any = None, scorer: Any = None,
                cfg: UtilityConfig | None = None, actions: tuple[str, ...] | None = None) -> Any:
    """Build the router a spec names; unknown specs raise ConfigError listing the valid ones.

    ``scorer`` (the run's ``RunContext.score``) is what the ``self`` router scores its labels with;
    ``policy``, when given, is checked to be able to score, and is the policy a learned router checks
    it was trained for (else ``settings.policy``'s spec is). ``actions``: the ones it may choose among
    (default all; the Agent leaves out plan when there is no index to search).
    """
    from agentrt.router.rules import FixedRouter, RulesRouter

    cfg = cfg or UtilityConfig(lam=getattr(settings, "router_lambda", 0.3),
                               floors=dict(getattr(settings, "router_floors", {}) or {}),
                               temperature=getattr(settings, "router_temperature", 0.0),
                               epsilon=getattr(settings, "router_epsilon", 0.0))
    if actions is not None:
        cfg = cfg.model_copy(update={"actions": tuple(a for a in cfg.actions if a in actions)})
    if getattr(settings, "tiers", None):  # a tiered policy: each answering route on each tier, priced per tier
        from agentrt.router.tiers import prices, tiered_actions

        tiered = tiered_actions(cfg.actions, settings)
        cfg = cfg.model_copy(update={"actions": tiered, "prices": prices(settings, tiered)})
    kind, _, arg = spec.partition(":")
    if kind == "fixed" and _fixed_action(arg, settings):
        return FixedRouter(arg, settings)
    if kind == "rules" and not arg:
        return RulesRouter(settings, cfg)
    if kind == "cascade" and not arg:
        return CascadeRouter(settings, cfg)
    if kind == "self" and not arg:
        from agentrt.router.selfscore import SelfRouter

        if policy is not None and not isinstance(policy, Scorer):
            raise ConfigError(f"the self router needs a backend that can score text (hf:...); {policy.name} cannot")
        return SelfRouter(scorer or _no_scorer, settings, cfg)
    if kind == "self" and arg:  # a policy trained on the strategy environment routes (router/selfpolicy.py)
        from agentrt.router.selfpolicy import SelfPolicyRouter

        return SelfPolicyRouter(arg, settings, cfg)
    if kind == "auto" and not arg:
        from agentrt.router import registry
        from agentrt.router.rules import RulesRouter

        fingerprint = _fingerprint(policy, settings)
        entry = registry.resolve_default(_home(settings), fingerprint)
        router = (RulesRouter(settings, cfg) if entry is None
                  else _learned(str(entry.path), settings, cfg, fingerprint, entry.version))
        return _observed(router, entry, settings, cfg, fingerprint)
    if kind == "learned" and arg:
        import re

        version = ""
        # a registry version (r003, shipped:NAME) is looked up in the registry, never as a file of the
        # working directory: a server request may name one (app/server/specs.py), never a path
        if re.fullmatch(r"r\d{1,9}|shipped:[A-Za-z0-9_.-]{1,64}", arg):
            from agentrt.router import registry

            version = arg
            arg = str(registry.find(_home(settings), arg).path)
        return _learned(arg, settings, cfg, _fingerprint(policy, settings), version)
    raise ConfigError(f"unknown router {spec!r}; use one of: {ROUTER_SPECS}")


def _fixed_action(arg: str, settings: Settings) -> bool:
    """Whether ``fixed:ARG`` names an action: a route, or ``ROUTE@TIER`` on a tier ``settings`` has."""
    from agentrt.core.types import TIER_ROUTES, split_action

    route, tier = split_action(arg)
    if "@" not in arg:
        return route in ACTIONS
    if route in TIER_ROUTES and tier in (getattr(settings, "tiers", None) or {}):
        return True
    raise ConfigError(f"fixed:{arg}: no tier {tier!r} (tiers: {', '.join(getattr(settings, 'tiers', None) or {}) or 'none'}; "
                      f"set one with --tier {tier}=SPEC)" if route in TIER_ROUTES else
                      f"fixed:{arg}: {route!r} runs on no tier; these do: {', '.join(TIER_ROUTES)}")


def _home(settings: Settings) -> Any:
    from agentrt.core.config import default_home

    return getattr(settings, "home", None) or default_home()


def _fingerprint(policy: Any, settings: Settings) -> Any:
    from agentrt.router.registry import settings_fingerprint

    return settings_fingerprint(settings, policy)


def _observed(router: Any, entry: Any, settings: Settings, cfg: UtilityConfig, fingerprint: Any) -> Any:
    """``router``, with the candidate observed for this policy (if any) deciding in shadow (router.shadow)."""
    from agentrt.router import registry
    from agentrt.router.shadow import ShadowRouter

    candidate = registry.observing(_home(settings), fingerprint.id)
    if candidate is None or (entry is not None and candidate.version == entry.version):
        return router
    greedy = cfg.model_copy(update={"temperature": 0.0, "epsilon": 0.0})  # its would-be choice, not a sample
    return ShadowRouter(router, _learned(str(candidate.path), settings, greedy, fingerprint, candidate.version))


def _learned(path: str, settings: Settings, cfg: UtilityConfig, fingerprint: Any, version: str) -> Any:
    from agentrt.router.learned import LearnedRouter, RouterModel

    model = RouterModel.load(path)
    # the actions both allowed here and modeled by the file, and those exploration gives a share (drawn
    # for that share alone: the file has no estimate for them)
    allowed = tuple(a for a in cfg.actions if a in model.actions or cfg.min_share.get(a, 0) > 0) or tuple(model.actions)
    # trained for another policy, it falls back to the rules over every action here (a tiered policy's included)
    from agentrt.router.registry import tier_base

    base = tier_base(settings)  # a tiered policy: a router trained for its base model still knows that tier
    return LearnedRouter(model, settings, cfg.model_copy(update={"actions": allowed}), policy=fingerprint,
                         version=version, fallback_cfg=cfg, base_policy=base)
