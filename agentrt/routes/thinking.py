"""Thinking conventions shared by the routes that think (reason, its samples) and the exports.

A thought is ``<think> ... </think>`` (native thinking models) or a prompted thought before the
answer cue. ``split_thought`` is the one parser of both.
"""

from __future__ import annotations

import re
from typing import Any
from agentrt.core.config import Settings

THINK_OPEN, THINK_CLOSE = "<think>", "</think>"
ANSWER_CUE = "Final answer:"
REASON_SYSTEM = (
    "You are a careful assistant. Think step by step inside <think> </think>, "
    f"then give the final answer after '{ANSWER_CUE}'."
)
# Smallest thought worth having; below this, reason degrades to a direct answer.
MIN_THOUGHT_TOKENS = 8


def split_thought(text: str) -> tuple[str | None, str]:
    """Separate ``<think>...</think>`` (or a prompted thought before the answer cue) from the answer."""
    match = re.search(r"<think>(.*?)(?:</think>|$)(.*)", text, flags=re.S)
    if match:
        thought, rest = match.group(1).strip(), match.group(2)
    else:
        thought, rest = None, text
    if ANSWER_CUE in rest:
        before, _, rest = rest.partition(ANSWER_CUE)
        thought = (thought + "\n" + before).strip() if thought else before.strip() or None
    return thought, rest.strip()


def native_thinking(settings: Settings, policy: Any) -> bool:
    """Whether the policy thinks natively (``enable_thinking`` in its chat template)."""
    style = settings.thinking_style
    if style != "auto":
        return style == "native"
    return bool(getattr(policy, "supports_thinking", False))


def no_thinking(settings: Settings, policy: Any) -> dict[str, Any]:
    """Chat-template kwargs that turn native thinking off (nothing for a prompted thinker)."""
    return {"enable_thinking": False} if native_thinking(settings, policy) else {}
