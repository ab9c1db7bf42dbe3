"""Scoring eval answers: a thin adapter over ``agentrt.trajectory.rewards`` plus abstention.

``agentrt.trajectory.rewards`` holds the verifiers (numeric, math, qa, unit_tests, ifeval). This adds what the
harness needs on top: recognizing an abstention, and scoring ``unanswerable`` items (1 when the
agent abstained, else 0) and ``ambiguous`` ones (1 when it asked a clarifying question: the ask route, or
an answer that is a question). An answerable item the agent abstained on scores whatever its verifier says
(normally 0).
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from evals.suites import Item

_ABSTAIN = re.compile(
    r"\b(i\s+(do\s+not|don't|dont)\s+know|i\s+am\s+not\s+sure|i'm\s+not\s+sure|cannot\s+(be\s+)?(answer|determin|know)"
    r"|can't\s+(answer|determine|know)|unanswerable|not\s+enough\s+information|insufficient\s+information"
    r"|no\s+way\s+to\s+know|unknown)\b",
    re.I,
)


def is_abstention(answer: str, route: str = "") -> bool:
    """True when the run abstained: the abstain route, or a "don't know" answer.

    An empty answer is no abstention: it is a run that produced no answer (status ``no_answer``,
    agentrt.core.answer), scored as wrong, never credited as a wise "don't know" (issue 37)."""
    if route == "abstain":
        return True
    text = answer.strip()
    return bool(text) and bool(_ABSTAIN.search(text[:300]))


@dataclass(slots=True)
class Scored:
    score: float      # in [-1, 1]; penalties (hedging, cheating) score below zero
    correct: bool     # score >= the pass threshold (1.0: full credit)
    abstained: bool
    reason: str


def score_item(item: Item, answer: str, route: str = "") -> Scored:
    """Score one answer to ``item``; never raises on a bad answer (a verifier crash is a 0 with its reason)."""
    abstained = is_abstention(answer, route)
    if item.type == "unanswerable":
        return Scored(float(abstained), abstained, abstained, "abstained" if abstained else "answered an unanswerable question")
    if item.type == "ambiguous":  # the right response is a clarifying question, not an answer or a shrug
        asked = route == "ask" or (not abstained and answer.strip().endswith("?"))
        return Scored(float(asked), asked, abstained, "asked what was meant" if asked else "did not ask what was meant")
    from agentrt.trajectory.rewards import score

    try:
        reward = score(item.verifier, answer, item.ground_truth())
    except Exception as e:  # a verifier failure is recorded, not fatal to the eval
        return Scored(0.0, False, abstained, f"verifier error: {type(e).__name__}: {e}")
    return Scored(float(reward.score), reward.score >= 1.0 - 1e-9, abstained, reward.reason)
