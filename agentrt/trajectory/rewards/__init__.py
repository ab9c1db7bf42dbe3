"""Verifiable rewards, shared by the runtime (trajectory rewards, exports, GRPO) and the eval harness.

Every verifier returns a ``Reward`` (score, components, penalties, reason). Scores are in [0, 1]
(partial credit where a task defines it: F1, fraction of unit tests, fraction of IFEval instructions);
detectable cheating is penalized explicitly and scores below zero:

* a hedge between several answers ("42 or 43", two different ``\\boxed{}``): ``-HEDGE_PENALTY``
* code that exits early, skips, edits or short-circuits the tests, patches the checker / assert /
  builtins, or fakes equality: ``-CHEAT_PENALTY``

    >>> from agentrt.trajectory.rewards import score
    >>> score("numeric", "... so she makes $18.\\n#### 18", "#### 18").score
    1.0

``rlcr:<verifier>`` (e.g. ``rlcr:qa``) scores an answer that ends with a stated confidence
``<confidence>q</confidence>``: the verifier's score on the stripped answer minus the Brier term, with
penalties for a missing or malformed confidence (``_rlcr.py``); ``rlcr`` alone takes a ground truth
``{"verifier": ..., "ground_truth": ...}``.

Heavy verifiers import their library on first use (math-verify, if-verifiable: ``agentrt[rewards]``).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from agentrt.core.errors import InputError
from agentrt.trajectory.rewards._base import CHEAT_PENALTY, HEDGE_PENALTY, Reward, penalized
from agentrt.trajectory.rewards._code import unit_tests
from agentrt.trajectory.rewards._text import exact_match, f1_score, normalize_answer, numeric_match, qa_match

# verifier name -> function(response, ground_truth) -> Reward. ``ground_truth`` is what a verl row's
# reward_model.ground_truth holds: a string (numeric, math, qa: a string or a list of strings) or a dict
# (unit_tests: {test, entry_point}; ifeval: {instruction_id_list, kwargs, prompt}).


def _math(response: str, ground_truth: Any) -> Reward:
    from agentrt.trajectory.rewards._math import math_match

    return math_match(response, str(ground_truth))


def _ifeval(response: str, ground_truth: Any) -> Reward:
    from agentrt.trajectory.rewards._ifeval import ifeval_match

    return ifeval_match(response, ground_truth["instruction_id_list"], ground_truth["kwargs"], ground_truth.get("prompt", ""))


def _unit_tests(response: str, ground_truth: Any) -> Reward:
    return unit_tests(response, ground_truth["test"], ground_truth["entry_point"], prompt=ground_truth.get("prompt", ""))


VERIFIERS: dict[str, Callable[[str, Any], Reward]] = {
    "numeric": lambda r, g: numeric_match(r, str(g)),
    "math": _math,
    "qa": lambda r, g: qa_match(r, g if isinstance(g, list) else [str(g)]),
    "unit_tests": _unit_tests,
    "ifeval": _ifeval,
}



def _rlcr(response: str, ground_truth: Any) -> Reward:
    if not isinstance(ground_truth, dict) or "verifier" not in ground_truth:
        raise InputError("the rlcr reward needs a ground truth {'verifier': NAME, 'ground_truth': ...} "
                         "or a verifier name such as rlcr:qa")
    return rlcr_score(ground_truth["verifier"], response, ground_truth.get("ground_truth"))


VERIFIERS["rlcr"] = _rlcr


def rlcr_score(verifier: str, response: str, ground_truth: Any) -> Reward:
    """RLCR on top of the named verifier: correct - (q - correct)^2, penalties for a missing/malformed q."""
    from agentrt.trajectory.rewards._rlcr import rlcr_reward

    base = VERIFIERS.get(verifier)
    if base is None or verifier == "rlcr":
        raise InputError(f"unknown verifier {verifier!r} under rlcr; choose one of: "
                         f"{', '.join(v for v in VERIFIERS if v != 'rlcr')}")
    return rlcr_reward(response, ground_truth, verifier, base)


# Which verifier scores a data source (by default).
DATA_SOURCES: dict[str, str] = {
    "gsm8k": "numeric", "math500": "math", "math": "math", "ifeval": "ifeval", "humaneval": "unit_tests",
    "simpleqa": "qa", "hotpotqa": "qa",
}


def verifier_for(data_source: str) -> str | None:
    """The verifier name for a data source (``openai/gsm8k`` and ``gsm8k`` both map), or None."""
    key = data_source.lower().rsplit("/", 1)[-1].replace("-", "").replace("_", "")
    return DATA_SOURCES.get(key)


def score(verifier: str, response: str, ground_truth: Any) -> Reward:
    """Score ``response`` against ``ground_truth`` with the named verifier."""
    if verifier.startswith("rlcr:"):
        return rlcr_score(verifier.partition(":")[2], response, ground_truth)
    fn = VERIFIERS.get(verifier)
    if fn is None:
        raise InputError(f"unknown verifier {verifier!r}; choose one of: {', '.join(VERIFIERS)}")
    reward = fn(response, ground_truth)
    if not reward.verifier:
        reward.verifier = verifier
    return reward


__all__ = [
    "Reward", "VERIFIERS", "DATA_SOURCES", "CHEAT_PENALTY", "HEDGE_PENALTY", "score", "verifier_for", "penalized", "rlcr_score",
    "numeric_match", "qa_match", "exact_match", "f1_score", "normalize_answer", "unit_tests",
]
