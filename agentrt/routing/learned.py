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
        if data.get("version") != VERSION or data.get("features") != list(NUMERIC_FEATURES) or data.get("hash_dim") != HASH_DIM:
            raise ConfigError(
                f"router file {path} was written by another agentrt version (format v{data.get('version')}); "
                "retrain it with: agentrt train-router"
            )
        try:
            dim = len(NUMERIC_FEATURES) + HASH_DIM
            actions = {a: ActionModel(**m) for a, m in data["actions"].items()}
            if len(data["mean"]) != dim or any(len(m.w) != dim or len(m.tok_w) != dim for m in actions.values()):
                raise ValueError("dimension mismatch")
            return cls(data["mean"], data["std"], actions, float(data["temperature"]), float(data["lam"]), data.get("metrics"))
        except (KeyError, TypeError, ValueError) as e:
            raise ConfigError(f"router file {path} is corrupt ({e}); retrain it with: agentrt train-router") from None


class LearnedRouter:
    """Predicts p_success and tokens per action, then applies the utility rule."""

    name = "learned"

    def __init__(self, model: RouterModel, settings: Any, cfg: UtilityConfig | None = None) -> None:
        self.model = model
        self.settings = settings
        self.cfg = cfg or UtilityConfig(lam=model.lam, actions=tuple(model.actions))

    async def decide(self, question: str, features: dict[str, float], budget: int) -> RouteDecision:
        p, tokens = self.model.predict(vectorize(features, question))
        return choose(self.name, p, tokens, budget, self.cfg, features=features)
