"""Route choice. For now: transparent rules over the question (the learned router comes later).

A decision always records the probability with which its route was chosen (the propensity), so
logged runs can be used for off-policy learning.
"""

from __future__ import annotations

import re

from agentrt.trajectory import RouteStep

_ARITHMETIC = re.compile(r"\d\s*[-+*/x×^]\s*\d|\bhow (many|much)\b|\bcalculate\b|\bsolve\b|\bprove\b", re.I)
_MULTI_STEP = re.compile(r"\bstep by step\b|\bwhy\b|\bexplain\b|\bcompare\b", re.I)


def decide(question: str, available: tuple[str, ...] = ("direct", "reason")) -> RouteStep:
    """Pick ``reason`` for arithmetic or multi-step cues, else ``direct``."""
    features = {
        "chars": len(question),
        "arithmetic": bool(_ARITHMETIC.search(question)),
        "multi_step": bool(_MULTI_STEP.search(question)),
    }
    wants_reason = features["arithmetic"] or features["multi_step"] or len(question) > 400
    route = "reason" if wants_reason and "reason" in available else "direct"
    why = "arithmetic or multi-step cue" if wants_reason else "short factual question"
    return RouteStep(route=route, propensity=1.0, probabilities={route: 1.0}, reason=why, features=features)
