"""``self:PATH``: a policy trained on the strategy environment routes its own requests.

The policy at PATH (a Hugging Face folder written by ``agentrt train-policy --grpo --env strategy``) was trained
to answer the route-label instruction (``messages``) with one label. Here each of the six labels is scored as the
start of the reply (the summed log-probability of its tokens) in one batched pass, and the softmax over those six
is the policy's **label distribution** pi(a | question).

What p_success means for a self router: the label distribution ranks routes but is not a success probability
(GRPO pushes it toward the best label, not toward the chance that a label succeeds). At training time the
runs of the training split map the policy's signals, z = the six log pi(. | x) (standardized), to the verifier's
verdict with a small logistic fit per action (``SelfCalibration``, stored beside the policy as
``self_router.json``): p_success(a) = sigmoid(w_a . z + b_a), the success rate of training runs that took ``a``
where the policy's label distribution looked like this one. It reads nothing but the policy's own output: no
question features, no words. Its evidence, as for the learned router (``agentrt.router.evidence``), is an
effective sample size: the training runs of ``a`` whose signals lie within the kernel bandwidth of these. At least
``router_min_evidence`` -> ``calibrated``; fewer -> ``insufficient_evidence``, and the estimates shrink toward
each action's training success rate (``evidence.shrunk``, fallback ``prior``), as the learned router does.
Expected tokens per action are the training runs' mean. **The decision is the policy's own**: its most probable
label among the actions the run allows (``label_choice``: the same guards every router has, e.g. no plan without an
index, no action whose expected tokens exceed the budget), picked by ``choose`` with the label distribution as the
score and no price or floors, so its propensities (argmax: 1; ``router_temperature`` / ``router_epsilon``: the
sampling probabilities) are logged in the route decision as for any router. The calibrated p_success is what the
decision reports (ECE, AUROC, evidence), not what it maximises: a router that re-ranked the routes by it would be
the learned router again, not the policy routing itself. The label distribution is logged in its features
(``label_p_<action>``).

A policy folder without ``self_router.json`` (any hf policy) still routes: p_success is the label probability
itself, tokens the rules' a priori cost, state ``insufficient_evidence`` (never ``calibrated``).

Scoring runs on the router's own backend (``hf:PATH``), not through the run's door: like a learned router's
file it is the router's model, and its pass is not charged to the run's budget.
"""

from __future__ import annotations

import json
import math
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from agentrt.core.config import Settings
from agentrt.core.errors import ConfigError
from agentrt.core.types import ROUTES, Message
from agentrt.router import evidence as ev
from agentrt.router.decision import RouteDecision, UtilityConfig, choose

CALIBRATION_FILE = "self_router.json"
SYSTEM = "Choose how the assistant handles the request."
INSTRUCTION = "{q}\n\nReply with one word: direct, reason, plan, read, ask or abstain."
_LABEL = re.compile(r"\b(" + "|".join(ROUTES) + r")\b")


def messages(question: str) -> list[Message]:
    """The strategy prompt: the route-label instruction around the question (training and routing share it)."""
    return [Message("system", SYSTEM), Message("user", INSTRUCTION.format(q=question))]


def parse_label(text: str) -> str | None:
    """The route a completion names: its first label word (case-insensitive), or None when it names none."""
    m = _LABEL.search(text.lower())
    return m.group(1) if m else None


def softmax(scores: dict[str, float]) -> dict[str, float]:
    top = max(scores.values())
    w = {a: math.exp(s - top) for a, s in scores.items()}
    z = sum(w.values())
    return {a: v / z for a, v in w.items()}


def sigmoid(z: float) -> float:
    return 1 / (1 + math.exp(-max(-30.0, min(30.0, z))))


def signals(label_p: dict[str, float]) -> list[float]:
    """The policy's signals for one question: log pi(a | q) for every label, in ``ROUTES`` order."""
    return [math.log(max(label_p.get(a, 0.0), 1e-9)) for a in ROUTES]


@dataclass
class ActionCalibration:
    """One action's map from the policy's signals to p_success, and the training signals behind it."""

    w: list[float]  # one weight per label's standardized log-probability (``ROUTES`` order)
    b: float
    runs: int
    base_rate: float
    tokens: float
    sample: list[list[float]] = field(default_factory=list)  # standardized training signals (the evidence kernel's)


@dataclass
class SelfCalibration:
    """What ``self_router.json`` holds: per action, the signals -> p_success map, evidence and mean tokens; the
    signals are standardized by ``mean`` / ``std`` (over the training questions)."""

    actions: dict[str, ActionCalibration]
    mean: list[float]
    std: list[float]
    bandwidth: float
    lam: float
    provenance: dict[str, Any] = field(default_factory=dict)

    def standardized(self, label_p: dict[str, float]) -> list[float]:
        return [(v - m) / s for v, m, s in zip(signals(label_p), self.mean, self.std)]

    def predict(self, label_p: dict[str, float]) -> tuple[dict[str, float], dict[str, float], dict[str, float]]:
        """(p_success, expected tokens, evidence sizes) per calibrated action from the label distribution."""
        z = self.standardized(label_p)
        p, tokens, sizes = {}, {}, {}
        for a, c in self.actions.items():
            p[a] = sigmoid(sum(w * v for w, v in zip(c.w, z)) + c.b)
            tokens[a] = c.tokens
            kernel = sum(math.exp(-sum((u - v) ** 2 for u, v in zip(z, t)) / (2 * self.bandwidth ** 2))
                         for t in c.sample)
            sizes[a] = round(kernel * c.runs / max(1, len(c.sample)), 2)
        return p, tokens, sizes

    def save(self, path: str | Path) -> None:
        data = {"format": "agentrt-self-router", "mean": self.mean, "std": self.std, "bandwidth": self.bandwidth,
                "lam": self.lam, "provenance": self.provenance,
                "actions": {a: c.__dict__ for a, c in self.actions.items()}}
        Path(path).write_text(json.dumps(data))

    @classmethod
    def load(cls, path: str | Path) -> SelfCalibration:
        try:
            data = json.loads(Path(path).read_text())
            return cls({a: ActionCalibration(**c) for a, c in data["actions"].items()}, list(data["mean"]),
                       list(data["std"]), float(data["bandwidth"]), float(data["lam"]), dict(data.get("provenance") or {}))
        except (OSError, ValueError, KeyError, TypeError) as e:
            raise ConfigError(f"{path} is not a self-router calibration ({e}); train it again with "
                              "agentrt train-policy --grpo --env strategy, or delete it to route uncalibrated") from None


def label_choice(router: str, label_p: dict[str, float], p_success: dict[str, float],
                 tokens: dict[str, float], budget: int, cfg: UtilityConfig, *,
                 features: dict[str, Any] | None = None) -> RouteDecision:
    """The policy's own decision: its most probable label among the actions the run allows (``choose`` with the
    label distribution as the score, no price, no floors); the decision reports the calibrated ``p_success``."""
    actions = tuple(a for a in cfg.actions if a in p_success and a in label_p)
    d = choose(router, {a: label_p[a] for a in actions}, tokens, budget,
               cfg.model_copy(update={"actions": actions, "lam": 0.0, "floors": {}}), features=features)
    d.p_success = {a: round(v, 4) for a, v in p_success.items()}
    return d


class SelfPolicyRouter:
    """Routes with the label distribution of the policy at ``path`` (see the module docstring)."""

    name = "self"

    def __init__(self, path: str, settings: Settings, cfg: UtilityConfig | None = None, *, scorer: Any = None) -> None:
        folder = Path(path).expanduser()
        if not (folder / "config.json").is_file():
            raise ConfigError(f"self:{path}: no Hugging Face model folder there (config.json missing); train one "
                              "with agentrt train-policy --grpo --env strategy --out DIR, then use self:DIR")
        self.path, self.settings = folder, settings
        from agentrt.router.learned import DEFAULT_FLOORS

        cfg = cfg or UtilityConfig(lam=getattr(settings, "router_lambda", 0.3))
        # the learned router's floors: abstain and ask only when the question is likely unanswerable / unclear
        self.cfg = cfg.model_copy(update={"floors": {**DEFAULT_FLOORS, **cfg.floors}})
        calibration = folder / CALIBRATION_FILE
        self.calibration = SelfCalibration.load(calibration) if calibration.is_file() else None
        self._scorer = scorer  # async (messages, continuations) -> (scores, tokens); default: the hf:PATH backend
        self.version = f"self:{folder}"

    async def label_distribution(self, question: str) -> dict[str, float]:
        """pi(a | question) over the six labels, each scored as the whole reply."""
        if self._scorer is None:
            from agentrt.backends import load_backend

            self._scorer = load_backend(f"hf:{self.path}", self.settings).score
        scores, _ = await self._scorer(messages(question), list(ROUTES))
        return softmax(dict(zip(ROUTES, scores)))

    async def decide(self, question: str, features: dict[str, float], budget: int) -> RouteDecision:
        label_p = await self.label_distribution(question)
        return self.decide_from(label_p, features, budget)

    def decide_from(self, label_p: dict[str, float], features: dict[str, float], budget: int) -> RouteDecision:
        """The decision for a label distribution (the bench calls this with precomputed distributions)."""
        feats = {**features, **{f"label_p_{a}": round(p, 4) for a, p in label_p.items()}}
        if self.calibration is None:
            from agentrt.router.rules import expected_tokens

            d = choose(self.name, label_p, expected_tokens(features, self.settings), budget, self.cfg, features=feats)
            d.reason = f"{d.action}: the policy's label distribution (uncalibrated: no {CALIBRATION_FILE}); " + d.reason
            d.state, d.router_version = ev.INSUFFICIENT, self.version
            return d
        p, tokens, sizes = self.calibration.predict(label_p)
        d = label_choice(self.name, label_p, p, tokens, budget, self.cfg, features=feats)
        minimum = float(getattr(self.settings, "router_min_evidence", ev.MIN_EVIDENCE))
        if sizes.get(d.action, 0.0) >= minimum:
            d.calibrated, d.state = True, ev.CALIBRATED
            d.reason = f"{d.action}: the policy's own choice (p {label_p[d.action]:.2f}); p_success calibrated"
        else:
            base = {a: c.base_rate for a, c in self.calibration.actions.items()}
            d.p_success = {a: round(v, 4) for a, v in ev.shrunk(p, sizes, base, minimum).items()}
            d.state, d.fallback = ev.INSUFFICIENT, "prior"
            d.reason = (f"{d.action}: the policy's own choice (p {label_p[d.action]:.2f}); few training runs had "
                        "this label distribution: p_success shrunk toward the action's training rate")
        d.evidence, d.router_version = sizes, self.version
        return d
