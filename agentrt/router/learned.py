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

from agentrt.core.config import Settings
from agentrt.core.errors import ConfigError
from agentrt.core.files import MiB, read_text_capped
from agentrt.router import evidence as ev
from agentrt.router.decision import RouteDecision, UtilityConfig, choose
from agentrt.router.features import HASH_DIM, NUMERIC_FEATURES, vectorize

FORMAT = "agentrt-router"
MAX_BYTES = 4 * MiB  # a router file is ~40 KB; a bigger one is not a router file (or is hostile)
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
    # a sample of the training inputs per action (agentrt.router.evidence); None in files written before it
    evidence: ev.Evidence | None = None

    def effective_sizes(self, x: list[float], corpus: str | None = None) -> tuple[dict[str, float], str]:
        """Per action, the effective number of training runs resembling input ``x`` asked over ``corpus``
        (``evidence.corpus_key``; None: not known), and the method used (``kernel`` over the stored sample;
        ``moments`` for a file without one)."""
        bound, _, method = self.corpus_sizes(x, corpus)
        return bound, method

    def corpus_sizes(self, x: list[float], corpus: str | None) -> tuple[dict[str, float], dict[str, float], str]:
        """Per action, the evidence over ``corpus`` (``effective_sizes``) and over every corpus (what the
        fallback shrinks by), and the method; one kernel pass."""
        if self.evidence is not None:
            return (*ev.corpus_sizes(self.evidence, x, self.mean, self.std, corpus), "kernel")
        runs = int(((self.provenance or {}).get("runs") or {}).get("train") or (self.metrics or {}).get("examples") or 0)
        sizes = ev.moment_sizes(x, self.mean, self.std, list(self.actions), runs, len(NUMERIC_FEATURES))
        return sizes, sizes, "moments"

    @property
    def base_rates(self) -> dict[str, float]:
        """Each action's success rate over its training runs (files written before it: none)."""
        rates = (self.metrics or {}).get("base_rates") or {}
        return {a: float(v) for a, v in rates.items() if a in self.actions}

    def prior(self, x: list[float], minimum: float = ev.MIN_EVIDENCE) -> tuple[dict[str, float], str]:
        """What the router claims for input ``x`` out of evidence, per action, and what it rests on: the
        action's rate on the training runs sharing the question's rarest cue, shrunk toward its rate on the runs
        asked over an index or without one as this question is (``evidence.cue_prior``); a file written before
        cue rates: the action's overall training rate."""
        counts = (self.metrics or {}).get("cue_rates") or {}
        features = dict(zip(NUMERIC_FEATURES, x))
        return ev.cue_prior(features, counts, self.base_rates, minimum, (self.metrics or {}).get("index_rates"))

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
        if self.evidence is not None:
            data["evidence"] = self.evidence.to_json()
        Path(path).write_text(json.dumps(data))

    @classmethod
    def load(cls, path: str | Path) -> RouterModel:
        """Load a router file; corrupt or version-mismatched files raise ConfigError."""
        path = Path(path)
        try:
            data = json.loads(read_text_capped(path, MAX_BYTES, "router file"))
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
            evidence = ev.Evidence.from_json(data.get("evidence"))
            if evidence is not None and features != list(NUMERIC_FEATURES):
                evidence = _widen_evidence(evidence, features)
            return cls(data["mean"], data["std"], actions, float(data["temperature"]), float(data["lam"]),
                       data.get("metrics"), dict(data.get("provenance") or {}), evidence)
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


def _widen_evidence(evidence: ev.Evidence, features: list[str]) -> ev.Evidence:
    """The stored sample of a file fit on fewer features, in today's layout (the new features are 0)."""
    k, new = len(features), {f: i for i, f in enumerate(NUMERIC_FEATURES)}
    shift = len(NUMERIC_FEATURES) - k

    def move(i: int) -> int:
        return new[features[i]] if i < k else i + shift

    return ev.Evidence({a: ev.ActionSample(s.runs, [{move(i): v for i, v in row.items()} for row in s.rows])
                        for a, s in evidence.actions.items()}, evidence.bandwidth,
                       None if evidence.dims is None else len(NUMERIC_FEATURES) if evidence.dims == k else evidence.dims)


# Abstain and ask succeed only on questions that cannot (or should not) be answered, so their p_success is
# the chance that this question is one. With a weak policy every answer route has a low p_success, and a
# router maximizing utility would abstain on nearly everything (overoptimizing the reward); these floors
# let it abstain or ask only when it believes the question is unanswerable / unclear. Settings'
# router_floors override them.
DEFAULT_FLOORS = {"abstain": 0.5, "ask": 0.5}


class LearnedRouter:
    """Predicts p_success and tokens per action, then applies the utility rule.

    ``policy``: the fingerprint (``agentrt.router.registry.Fingerprint``) of the policy that runs. When the
    file records another policy, the router says so once, falls back to the rule priors and marks its
    decisions ``calibrated: false``.
    """

    name = "learned"

    def __init__(self, model: RouterModel, settings: Settings, cfg: UtilityConfig | None = None, *,
                 policy: Any = None, version: str = "", fallback_cfg: UtilityConfig | None = None,
                 base_policy: Any = None) -> None:
        self.model = model
        self.settings = settings
        cfg = cfg or UtilityConfig(lam=model.lam, actions=tuple(model.actions))
        self.cfg = cfg.model_copy(update={"floors": {**DEFAULT_FLOORS, **cfg.floors}})
        self.version = version or str((model.provenance or {}).get("version", ""))
        trained_for = str(((model.provenance or {}).get("policy") or {}).get("id", ""))
        self.mismatch = bool(policy is not None and trained_for and trained_for != policy.id)
        self.policy_id = policy.id if policy is not None else ""
        # A tiered policy whose base model this router was trained for (``base_policy``): its estimates stand for
        # the base tier's actions, and each tier action gets the base route's estimate as it is (no lift: measured,
        # the rules' lift made the router send 77% of a never-seen document family to direct@large, 0 of 23 right,
        # ECE 0.32), so a dearer tier is chosen only where a learned router for the tiered policy has seen it win
        self.lifted: UtilityConfig | None = None
        if self.mismatch and base_policy is not None and trained_for == base_policy.id and fallback_cfg is not None:
            self.mismatch = False
            self.lifted = self.cfg.model_copy(update={"actions": fallback_cfg.actions, "prices": fallback_cfg.prices})
        self.fallback = None
        if self.mismatch:
            from agentrt.router.rules import RulesRouter

            self.fallback = RulesRouter(settings, fallback_cfg or cfg)
            self.trained_for, self.running = trained_for, policy.id

    async def decide(self, question: str, features: dict[str, float], budget: int) -> RouteDecision:
        d = await self._decide(question, features, budget)
        d.policy = self.policy_id  # which policy's traffic this run is (learn --traffic learns per policy)
        return d

    async def _decide(self, question: str, features: dict[str, float], budget: int) -> RouteDecision:
        x = vectorize(features, question)
        corpus = ev.corpus_key(features, getattr(self.settings, "corpus", None))
        # what decides is unchanged by the corpus bound (shrinking reads the evidence over every corpus, ``shared``);
        # what is marked calibrated is not (``sizes``: over this corpus for a corpus-bound action)
        sizes, shared, method = self.model.corpus_sizes(x, corpus)
        sizes, shared = ({a: round(n, 2) for a, n in d.items()} for d in (sizes, shared))
        if self.fallback is not None:
            from agentrt.router.registry import warn_mismatch

            # said at the first decision, not when the router is built: a check that builds it (preflight)
            # or a run that fails before deciding has nothing to warn about yet
            warn_mismatch(self.version or "learned", self.trained_for, self.running)
            d = self.fallback.decide_sync(question, features, budget)
            d.reason += f" (router {self.version or 'learned'} was trained for {self.trained_for}: rule priors used)"
            d.calibrated, d.router_version = False, self.version
            d.evidence, d.state, d.fallback = sizes, ev.OTHER_POLICY, "rules"
            return d
        p, tokens = self.model.predict(x)
        if self.lifted is not None:
            from agentrt.router.tiers import with_tier_priors

            with_tier_priors(p, tokens, self.lifted.actions, uplift=0.0)
            d = choose(self.name, p, tokens, budget, self.lifted, features=features)
            if "@" in d.action:  # no run of this tier taught the router anything: an uncalibrated prior decided
                d.router_version, d.evidence, d.state, d.fallback = self.version, sizes, ev.INSUFFICIENT, "tier_prior"
                d.reason += (f" ({d.action}: the router's estimate for {d.action.partition('@')[0]} on the base model; "
                             "no run on this tier yet)")
                return d
        else:
            d = choose(self.name, p, tokens, budget, self.cfg, features=features)
        d.router_version = self.version
        d.evidence = sizes
        if not (self.model.provenance or {}).get("policy"):
            # a file that does not say which policy it was trained for cannot claim calibration for this one
            d.state = ev.INSUFFICIENT
            return d
        minimum = float(getattr(self.settings, "router_min_evidence", ev.MIN_EVIDENCE))
        if sizes.get(d.action, 0.0) >= minimum:
            d.calibrated, d.state = True, ev.CALIBRATED
            return d
        if d.action in ev.CORPUS_BOUND and corpus:
            anywhere = shared.get(d.action, 0.0)
            if anywhere >= minimum:
                # runs over other corpora resemble it, too few over this one: the estimate they taught stands (it
                # is the best there is for these documents), marked as having no evidence here
                d.state, d.fallback = ev.INSUFFICIENT, ev.OTHER_CORPORA
                d.reason += (f" ({anywhere:.1f} training runs resemble this question for '{d.action}', only "
                             f"{sizes.get(d.action, 0.0):.1f} over corpus '{corpus}': whether these documents answer "
                             f"it has no evidence yet; the estimate is the other corpora's)")
                return d
        # out of evidence: the learned estimate for the action it would take rests on too few similar runs, so
        # it does not decide as it is. The documented fallback (docs/routing.md; measured: docs/results/routing.md):
        # every estimate shrunk toward its action's training success rate on the runs sharing the question's rarest
        # cue (evidence.cue_prior) by its evidence (evidence.shrunk), decided by the same rule; a file without base
        # rates (written before them) lets the rules decide
        base, cue = self.model.prior(x, minimum)
        if base:
            q = ev.shrunk(p, shared, base, minimum)
            fb = choose(self.name, q, tokens, budget, self.cfg, features=features)
            where = ev.prior_source(cue)
            then = f"; {fb.action}'s {base.get(fb.action, 0.0):.2f}" if fb.action != d.action else ""
            fb.reason += (f" (only {shared.get(d.action, 0.0):.1f} training runs resemble this question for "
                          f"'{d.action}' (< {minimum:g}, {method}): its estimate p_success "
                          f"{p.get(d.action, 0.0):.2f} shrunk toward the action's {where} "
                          f"{base.get(d.action, 0.0):.2f}{then})")
            fb.router_version, fb.evidence, fb.state, fb.fallback = self.version, sizes, ev.INSUFFICIENT, "prior"
            fb.calibrated = False
            return fb
        from agentrt.router.rules import RulesRouter

        fb = RulesRouter(self.settings, self.cfg).decide_sync(question, features, budget)
        fb.reason += (f" (router {self.version or 'learned'}: only {shared.get(d.action, 0.0):.1f} training runs "
                      f"resemble this question for '{d.action}' (< {minimum:g}, {method}); its estimate "
                      f"p_success {d.p_success.get(d.action, 0.0):.2f} is not trusted: rules decided)")
        fb.router_version, fb.evidence, fb.state, fb.fallback = self.version, sizes, ev.INSUFFICIENT, "rules"
        fb.calibrated = False
        return fb
