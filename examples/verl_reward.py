"""verl reward function over agentrt's verifiers, for rows written by ``agentrt export --format verl``.

    custom_reward_function.path=examples/verl_reward.py custom_reward_function.name=compute_score

verl calls ``compute_score(data_source, solution_str, ground_truth, extra_info)`` per response. The
export puts the verifier name in ``extra_info["verifier"]`` and writes list/dict ground truths (qa
answers, unit tests, IFEval kwargs) as JSON strings; this turns them back and scores with
``agentrt.trajectory.rewards.score`` — the same reward the rollout recorded.
"""

from __future__ import annotations

import json
from typing import Any

from agentrt.trajectory.rewards import score, verifier_for

_JSON_TRUTHS = ("qa", "unit_tests", "ifeval")


def compute_score(data_source: str, solution_str: str, ground_truth: Any, extra_info: dict | None = None,
                  **_: Any) -> float:
    verifier = (extra_info or {}).get("verifier") or verifier_for(data_source) or "qa"
    if verifier in _JSON_TRUTHS and isinstance(ground_truth, str) and ground_truth[:1] in "[{":
        ground_truth = json.loads(ground_truth)
    return float(score(verifier, solution_str, ground_truth).score)
