"""Stated confidence: the one format a policy uses to say how sure it is, and the one way it is read back.

An answer may end with a short tail ``<confidence>0.72</confidence>``: the model's probability that the
answer above it is correct. Routes that ask for it append ``CONFIDENCE_INSTRUCTION`` to their prompt (or
generate the tail with ``CONFIDENCE_CHOICES`` under a grammar); ``split_confidence`` strips the tail from the
answer and returns the number. RLCR (calibration reward) scores it with the Brier rule in ``brier``.

    >>> split_confidence("Paris.\\n<confidence>0.9</confidence>")
    Stated(answer='Paris.', confidence=0.9, status='ok')
    >>> split_confidence("Paris.").status
    'missing'
"""

from __future__ import annotations

import dataclasses
import re
from dataclasses import dataclass
from typing import Any, Literal, TypeVar, get_args

OPEN_TAG, CLOSE_TAG = "<confidence>", "</confidence>"

# No example number: the 135M model copies one (with "<confidence>0.7</confidence>" here it put 0.97 of its
# mass on 0.7 for every question, leaving nothing for calibration training to reweight; docs/rlcr.md).
CONFIDENCE_INSTRUCTION = (
    "After your answer, on a new line, state how likely it is that your answer is correct, as a probability p "
    "between 0 and 1, in this exact form: <confidence>p</confidence>")

# What a grammar-constrained tail may produce: 0.0, 0.05, ..., 1.0 (two decimals at most keeps it a few tokens).
CONFIDENCE_CHOICES: list[str] = [f"{i / 20:.2f}".rstrip("0").rstrip(".") if i % 20 else f"{i // 20}.0"
                                 for i in range(21)]

# The last tag in the text wins (a model may echo the instruction's example earlier); the number is any
# decimal or percentage; anything else inside the tag is malformed.
_TAG = re.compile(r"<\s*confidence\s*>\s*(?P<body>[^<]*?)\s*<\s*/\s*confidence\s*>", re.I)
_OPEN_ONLY = re.compile(r"<\s*confidence\s*>(?P<body>[^<]*)$", re.I)
_NUMBER = re.compile(r"^(?P<num>\d+(?:\.\d+)?|\.\d+)\s*(?P<pct>%?)$")

Status = Literal["ok", "missing", "malformed"]
M = TypeVar("M")  # a chat message: core.types.Message or an OpenAI-style dict
# How a run asks for a stated confidence (Settings.confidence, RunRequest.answer.confidence, --confidence).
ConfidenceMode = Literal["off", "tail", "grammar", "scored"]
CONFIDENCE_MODES: tuple[str, ...] = get_args(ConfidenceMode)


@dataclass(frozen=True, slots=True)
class Stated:
    """An answer with its stated confidence. ``confidence`` is None unless ``status == "ok"``."""

    answer: str
    confidence: float | None
    status: Status


def _number(body: str) -> float | None:
    match = _NUMBER.match(body.strip())
    if not match:
        return None
    value = float(match["num"]) / (100.0 if match["pct"] else 1.0)
    return value if 0.0 <= value <= 1.0 else None


def split_confidence(text: str) -> Stated:
    """Strip a trailing ``<confidence>q</confidence>`` (or an unclosed one at the very end) from ``text``.

    ``ok``: a number in [0, 1] (``0.7``, ``.7``, ``70%``); ``malformed``: a tag whose content is not such a
    number; ``missing``: no tag. Every tag is removed from the answer either way, so a malformed tail never
    reaches a user or a verifier."""
    matches = list(_TAG.finditer(text))
    if matches:
        last = matches[-1]
        answer = _TAG.sub("", text)
        value = _number(last["body"])
        status: Status = "ok" if value is not None else "malformed"
        return Stated(answer.strip(), value, status)
    tail = _OPEN_ONLY.search(text)
    if tail:  # generation stopped at the close tag (a stop string) or ran out of tokens inside it
        value = _number(tail["body"])
        return Stated(text[:tail.start()].strip(), value, "ok" if value is not None else "malformed")
    return Stated(text.strip(), None, "missing")


def ask_for_confidence(content: str) -> str:
    """A user message's text with ``"\n\n" + CONFIDENCE_INSTRUCTION`` appended (once): the one way routes
    and the trainer ask a policy to write the tail itself."""
    return content if CONFIDENCE_INSTRUCTION in content else f"{content}\n\n{CONFIDENCE_INSTRUCTION}"


def with_instruction(messages: list[M]) -> list[M]:
    """``messages`` with ``ask_for_confidence`` applied to the last user message: the one helper for the
    routes (``Message`` objects) and the trainer (OpenAI-style dicts); the input is left as it was."""
    out = list(messages)
    for i in range(len(out) - 1, -1, -1):
        m: Any = out[i]
        if isinstance(m, dict):
            if m.get("role") == "user":
                out[i] = {**m, "content": ask_for_confidence(str(m["content"]))}  # type: ignore[assignment]
                break
        elif m.role == "user":
            out[i] = dataclasses.replace(m, content=ask_for_confidence(m.content))
            break
    return out


def brier(confidence: float, correct: float) -> float:
    """The Brier term ``(q - correct)^2``; ``correct`` may be partial credit in [0, 1]."""
    return (confidence - correct) ** 2
