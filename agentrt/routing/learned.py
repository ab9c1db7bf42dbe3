"""The ``learned`` router: per-action success and cost models over features + a question embedding.

Per action, a logistic regression predicts the probability of success and a ridge regression the
log of the tokens spent; one temperature calibrates the probabilities. Weights live in a versioned
JSON file (``agentrt train-router`` writes it), so the router loads in milliseconds and decides in
well under a millisecond (numpy dot products).
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from agentrt.core.errors import ConfigError
from agentrt.routing.decision import RouteDecision, UtilityConfig, choose
from agentrt.routing.features import HASH_DIM, NUMERIC_FEATURES, vectorize

FORMAT = "agentrt-router"
VERSION = 1


def sigmoid(z: float) -> float:
    """The logistic function, clamped so that extreme logits neither overflow nor round to exactly 0 or 1."""
    return 1.0 / (1.0 + math.exp(-max(-30.0, min(30.0, z))))


@dataclass
class ActionModel:
    """Weights for one action (over standardized inputs)."""

    w: list[float]
    b: float
    tok_w: list[float]
    tok_b: float


@dataclass
class RouterModel:
    """A trained router: standardization, per-action models, calibration temperature."""

    mean: list[float]
    std: list[float]
    actions: dict[str, ActionModel]
    temperature: float = 1.0
    lam: float = 0.3
    metrics: dict[str, Any] | None = None
    # who made it and for which policy: {"policy": {"model", "digest", "id"}, "suites", "runs", "date",
    # "heldout": {...}, "version"}; empty for files written by `agentrt train-router` without --policy
    provenance: dict[str, Any] | None = None

    def logits(self, x: list[float]) -> dict[str, float]:
        """Uncalibrated success logits per action for one input vector."""
        return self._logits(self._standardized(x))

    def predict(self, x: list[float]) -> tuple[dict[str, float], dict[str, float]]:
        """p_success (calibrated) and expected tokens per action for one input vector."""
        z = self._standardized(x)
        p = {a: sigmoid(logit / self.temperature) for a, logit in self._logits(z).items()}
        tokens = {a: math.exp(min(12.0, sum(wi * zi for wi, zi in zip(m.tok_w, z)) + m.tok_b))
                  for a, m in self.actions.items()}
        return p, tokens

    def _standardized(self, x: list[float]) -> list[float]:
        return [(xi - m) / s for xi, m, s in zip(x, self.mean, self.std)]

    def _logits(self, z: list[float]) -> dict[str, float]:
        return {a: sum(wi * zi for wi, zi in zip(m.w, z)) + m.b for a, m in self.actions.items()}

    def save(self, path: str | Path) -> None:
        data = {
            "format": FORMAT, "version": VERSION, "features": list(NUMERIC_FEATURES), "hash_dim": HASH_DIM,
            "mean": self.mean, "std": self.std, "temperature": self.temperature, "lam": self.lam,
            "actions": {a: m.__dict__ for a, m in self.actions.items()}, "metrics": self.metrics or {},
            "provenance": self.provenance or {},
        }
        Path(path).write_text(json.dumps(data))

    @classmethod
    def load(cls, path: str | Path) -> RouterModel:
        """Load a router file; corrupt or version-mismatched files raise ConfigError."""
        path = Path(path)
        try:
            data = json.loads(path.read_text())
        except FileNotFoundError:
            raise ConfigError(f"router file {path} does not exist; train one with: agentrt train-router") from None
        except (json.JSONDecodeError, UnicodeDecodeError):
            raise ConfigError(f"router file {path} is corrupt (not JSON); retrain it with: agentrt train-router") from None
        if not isinstance(data, dict) or data.get("format") != FORMAT:
            raise ConfigError(f"{path} is not an agentrt router file")
        features = data.get("features")
        if (data.get("version") != VERSION or data.get("hash_dim") != HASH_DIM or not isinstance(features, list)
                or not set(features) <= set(NUMERIC_FEATURES)):
            raise ConfigError(
                f"router file {path} was written by another agentrt version (format v{data.get('version')}); "
                "retrain it with: agentrt train-router"
            )
        try:
            if features != list(NUMERIC_FEATURES):
                data = _widen(data, features)
            dim = len(NUMERIC_FEATURES) + HASH_DIM
            actions = {a: ActionModel(**m) for a, m in data["actions"].items()}
            if len(data["mean"]) != dim or any(len(m.w) != dim or len(m.tok_w) != dim for m in actions.values()):
                raise ValueError("dimension mismatch")
            return cls(data["mean"], data["std"], actions, float(data["temperature"]), float(data["lam"]),
                       data.get("metrics"), dict(data.get("provenance") or {}))
        except (KeyError, TypeError, ValueError) as e:
            raise ConfigError(f"router file {path} is corrupt ({e}); retrain it with: agentrt train-router") from None


def _widen(data: dict[str, Any], features: list[str]) -> dict[str, Any]:
    """A file fit on fewer features (an earlier agentrt's) in today's layout: the features it never saw get
    weight 0 (mean 0, std 1), so it decides exactly as it did."""
    where = [features.index(f) if f in features else None for f in NUMERIC_FEATURES]
    k = len(features)

    def widen(vec: list[float], fill: float) -> list[float]:
        return [fill if i is None else vec[i] for i in where] + list(vec[k:])

    out = dict(data, mean=widen(data["mean"], 0.0), std=widen(data["std"], 1.0))
    out["actions"] = {a: dict(m, w=widen(m["w"], 0.0), tok_w=widen(m["tok_w"], 0.0)) for a, m in data["actions"].items()}
    return out


# Abstain and ask succeed only on questions that cannot (or should not) be answered, so their p_success is
# the chance that this question is one. With a weak policy every answer route has a low p_success, and a
# router maximizing utility would abstain on nearly everything (overoptimizing the reward); these floors
# let it abstain or ask only when it believes the question is unanswerable / unclear. Settings'
# router_floors override them.
DEFAULT_FLOORS = {"abstain": 0.5, "ask": 0.5}


class LearnedRouter:
    """Predicts p_success and tokens per action, then applies the utility rule.

    ``policy``: the fingerprint (``agentrt.routing.registry.Fingerprint``) of the policy that runs. When the
    file records another policy, the router says so once, falls back to the rule priors and marks its
    decisions ``calibrated: false``.
    """

    name = "learned"

    def __init__(self, model: RouterModel, settings: Any, cfg: UtilityConfig | None = None, *,
                 policy: Any = None, version: str = "") -> None:
        self.model = model
        self.settings = settings
        cfg = cfg or UtilityConfig(lam=model.lam, actions=tuple(model.actions))
        self.cfg = cfg.model_copy(update={"floors": {**DEFAULT_FLOORS, **cfg.floors}})
        self.version = version or str((model.provenance or {}).get("version", ""))
        trained_for = str(((model.provenance or {}).get("policy") or {}).get("id", ""))
        self.mismatch = bool(policy is not None and trained_for and trained_for != policy.id)
        self.fallback = None
        if self.mismatch:
            from agentrt.routing.rules import RulesRouter

            self.fallback = RulesRouter(settings, cfg)
            self.trained_for, self.running = trained_for, policy.id

    async def decide(self, question: str, features: dict[str, float], budget: int) -> RouteDecision:
        if self.fallback is not None:
            from agentrt.routing.registry import warn_mismatch

            # said at the first decision, not when the router is built: a check that builds it (preflight)
            # or a run that fails before deciding has nothing to warn about yet
            warn_mismatch(self.version or "learned", self.trained_for, self.running)
            d = self.fallback.decide_sync(question, features, budget)
            d.reason += f" (router {self.version or 'learned'} was trained for {self.trained_for}: rule priors used)"
            d.calibrated, d.router_version = False, self.version
            return d
        p, tokens = self.model.predict(vectorize(features, question))
        d = choose(self.name, p, tokens, budget, self.cfg, features=features)
        # calibrated for the policy it was trained for: known only when the file says which one
        d.calibrated = bool((self.model.provenance or {}).get("policy"))
        d.router_version = self.version
        return d
