"""The Reward value and the penalty rule every verifier follows."""

from __future__ import annotations

from agentrt.trajectory import RewardBreakdown

# One type for rewards everywhere: what a verifier returns is what a trajectory record stores.
Reward = RewardBreakdown

HEDGE_PENALTY = 0.5
CHEAT_PENALTY = 1.0


def penalized(base: float, components: dict[str, float], penalties: dict[str, float], reason: str,
              verifier: str) -> Reward:
    """A penalty voids the credit: score = -sum(penalties) (at least -1); else the base score."""
    if penalties:
        score = max(-1.0, -sum(penalties.values()))
    else:
        score = base
    return Reward(score=round(score, 6), components=components, penalties=penalties, reason=reason, verifier=verifier)
