"""RLCR: reward a correct answer and a calibrated stated confidence (Damani et al. 2025, "Beyond binary rewards").

    reward = correct - (q - correct)^2

``correct`` comes from the row's own verifier (numeric, qa, math, ...) applied to the answer with the
``<confidence>`` tag stripped (``agentrt.core.confidence.split_confidence``); ``q`` is the stated confidence.
The Brier term is a proper scoring rule: the expected reward is highest when ``q`` equals the real chance of
being right, so the policy gains nothing by guessing confidently.

``correct`` is the verifier's score clipped to [0, 1] (partial credit where the verifier gives it: F1 for
``qa``). The verifier's own penalties (hedging, cheating) stay in the score: it is the verifier's score (which
may be negative) minus the Brier term.

Penalties (sizes chosen so that saying nothing is never better than saying anything):

* no confidence tag: the Brier term is taken at its worst (1.0) and ``MISSING_CONFIDENCE_PENALTY`` (0.25) more;
* a tag whose content is not a number in [0, 1]: the same, with ``MALFORMED_CONFIDENCE_PENALTY`` (0.25).

So a response scores in [-2.25, 1]: 1 = right and sure (q = 1), 0 = wrong and stating q = 0.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from agentrt.core.confidence import brier, split_confidence
from agentrt.trajectory.rewards._base import Reward

MISSING_CONFIDENCE_PENALTY = 0.25
MALFORMED_CONFIDENCE_PENALTY = 0.25
WORST_BRIER = 1.0


def rlcr_reward(response: str, ground_truth: Any, verifier: str, base: Callable[[str, Any], Reward]) -> Reward:
    """Score ``response`` (an answer ending with ``<confidence>q</confidence>``) with RLCR on top of ``base``.

    Components: ``correct`` (the base verifier's score on the stripped answer), ``brier`` ((q - correct)^2, or
    1.0 when no usable confidence was stated), ``confidence`` (q, present only when stated) and the base
    verifier's own components prefixed ``base_``."""
    stated = split_confidence(response)
    inner = base(stated.answer, ground_truth)
    correct = min(1.0, max(0.0, float(inner.score)))
    components = {"correct": round(float(inner.score), 6)}
    components.update({f"base_{k}": v for k, v in inner.components.items()})
    penalties = dict(inner.penalties)
    if stated.status == "ok" and stated.confidence is not None:
        b = brier(stated.confidence, correct)
        components["confidence"] = stated.confidence
        reason = f"{inner.reason}; stated confidence {stated.confidence:g}"
    else:
        b = WORST_BRIER
        size = MISSING_CONFIDENCE_PENALTY if stated.status == "missing" else MALFORMED_CONFIDENCE_PENALTY
        penalties[f"{stated.status}_confidence"] = size
        reason = f"{inner.reason}; {stated.status} confidence"
    components["brier"] = round(b, 6)
    extra = sum(v for k, v in penalties.items() if k.endswith("_confidence"))
    score = float(inner.score) - b - extra
    return Reward(score=round(score, 6), correct=inner.score >= 1.0 - 1e-9, components=components,
                  penalties=penalties, reason=reason, verifier=f"rlcr:{verifier}")
